"""Long-term memory per user and role (SPEC MEM-1 … MEM-8): entries and their rules
(``entries``), the store contract with in-memory and PostgreSQL implementations (``store``,
``postgres_store``), extraction from final user messages (``extraction``), the
``<memory_data>`` block (``injection``), the voice session's hook (``session``) and the export
document (``backup``). This package never imports ``runtime``."""
