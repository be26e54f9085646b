"""Long-term memory per user and role (SPEC MEM-1 … MEM-8): entries and their rules (``entries``),
the store contract (``store``), kept as entries of the role pools (``pool_memory``,
``memory_ledger``, ``postgres_pool_memory``; the PostgreSQL per-user store of before,
``postgres_store``, remains for its rows moved in at start and for key rotation), extraction
from final user messages (``extraction``), the ``<memory_data>`` block (``injection``), the
voice session's hook (``session``) and the export document (``backup``), and durable learning
runs of role memory (``learning_runs``, ``postgres_learning_runs``, the runner ``learner``).
This package never imports ``runtime``."""
