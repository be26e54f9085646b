"""Services: what one server process shares between sessions (stores, loaded models)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from accounts.model import Revocation, is_client_secret
from accounts.postgres_store import PostgresAccountStore
from journal.checkpoints import CheckpointStore, InMemoryCheckpointStore
from journal.postgres_checkpoints import PostgresCheckpointStore
from journal.postgres_store import PostgresJournalStore
from journal.projector import BudgetedConversationContextProjector
from journal.store import InMemoryJournalStore, JournalStore
from knowledge.base import KnowledgeBase
from knowledge.embedding import E5Embedder
from knowledge.postgres_store import PostgresKnowledgeStore
from knowledge.store import InMemoryKnowledgeStore
from memory.crypto import KEY_FILE_NAME, Keyring, KeySource
from memory.learning_runs import InMemoryLearningRunStore, LearningRunStore
from memory.pool_store import InMemoryPoolStore, PoolStore
from memory.postgres_learning_runs import PostgresLearningRunStore
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_store import PostgresMemoryStore
from memory.postgres_thread_store import PostgresThreadMemoryStore
from memory.role_records import InMemoryRoleRecords, RoleRecords
from memory.store import InMemoryMemoryStore, MemoryStore
from memory.thread_consolidation import JsonModel
from memory.thread_store import InMemoryThreadMemoryStore, ThreadMemoryStore
from pipeline.engine import Plugins
from runtime.accounts import AccountStore, InMemoryAccountStore, Principal, ensure_local_token
from runtime.config import Settings
from runtime.database import Database, open_database
from runtime.limits import WriteRateLimiter
from runtime.live import LiveSessions
from runtime.metrics import LoopLagMonitor
from runtime.migrations import apply_migrations
from runtime.plugin_factory import build_plugins, warm_up
from runtime.postgres_records import PostgresRecordStore
from runtime.postgres_stores import PostgresRoleStore, PostgresThreadStore
from runtime.records import InMemoryRecordStore, RecordLimits, RecordStore
from runtime.resume import InMemoryResumeTokenStore, PostgresResumeTokenStore, ResumeTokenStore
from runtime.roles import InMemoryRoleStore, Role, RoleStore, default_role
from runtime.thread_memory import ThreadMemoryService, json_model_of
from runtime.threads import InMemoryThreadStore, ThreadStore
from runtime.transport import Calls

log = logging.getLogger(__name__)

BRAIN_MEMORY_MODEL = "brain"
"""The memory model name of the brain's own model."""


MIGRATED_PACKAGES = ("runtime", "accounts", "journal", "memory", "knowledge", "tools")
"""Every domain package whose schema the runtime applies at start, in order."""


@dataclass
class Services:
    settings: Settings
    plugins: Plugins
    accounts: AccountStore
    roles: RoleStore
    threads: ThreadStore
    journal: JournalStore
    checkpoints: CheckpointStore
    projector: BudgetedConversationContextProjector = field(
        default_factory=BudgetedConversationContextProjector
    )
    resume_tokens: ResumeTokenStore = field(default_factory=InMemoryResumeTokenStore)
    records: RecordStore = field(default_factory=InMemoryRecordStore)
    """Conversation records: the history page's transcripts (issue 8)."""
    memory: MemoryStore = field(default_factory=InMemoryMemoryStore)
    """Long-term memory per user and role (issue 7)."""
    thread_memory: ThreadMemoryStore = field(default_factory=InMemoryThreadMemoryStore)
    """Each thread's learned facts (SPEC TM, issue 17)."""
    pool: PoolStore = field(default_factory=InMemoryPoolStore)
    """The role memory pools (SPEC RM, issue 18)."""
    role_records: RoleRecords = field(default_factory=InMemoryRoleRecords)
    """Role memory's settings, confessions, enrichments and model call log (SPEC RM-4…8)."""
    learning_runs: LearningRunStore = field(default_factory=InMemoryLearningRunStore)
    """Durable learning runs of role memory (SPEC RM-4)."""
    keyring: Keyring | None = None
    """The memory keyring (None in tests that build services by hand)."""
    memory_models: dict[str, JsonModel] = field(default_factory=dict)
    """Memory models a role may name in its settings (SPEC RM-6), by name: ``brain`` is the
    brain's own model when it has one (the local LLM by default); tests add scripted ones."""
    knowledge: KnowledgeBase = field(
        default_factory=lambda: KnowledgeBase(InMemoryKnowledgeStore())
    )
    """Documents, role bindings and retrieval (issue 6); this default has semantic recall off."""
    database: Database | None = None
    local_token: str | None = None
    active_sessions: set[str] = field(default_factory=set)
    live_sessions: LiveSessions = field(default_factory=LiveSessions)
    """Voice sessions of this process by id, connected or waiting to be resumed."""
    loop_lag: LoopLagMonitor = field(default_factory=LoopLagMonitor)
    thread_memory_service: ThreadMemoryService = field(init=False)
    """Thread memory's view, commands and consolidation (``runtime/thread_memory.py``)."""
    calls: Calls = field(init=False)
    """WebRTC calls of this process (``runtime.webrtc``)."""
    write_limiter: WriteRateLimiter = field(init=False)
    """Write requests per user and minute (SPEC ACC-5, ``runtime/policy.py`` rule 4)."""
    owns_plugins: bool = False
    """Whether the plugins were built here (and are closed with the services)."""

    def __post_init__(self) -> None:
        self.calls = Calls(self.active_sessions)
        brain_model = json_model_of(self.plugins.brain)
        if brain_model is not None:
            self.memory_models.setdefault(BRAIN_MEMORY_MODEL, brain_model)
        self.thread_memory_service = ThreadMemoryService(self)
        self.write_limiter = WriteRateLimiter(per_minute=self.settings.write_requests_per_minute)

    def revoked(self, revocation: Revocation) -> None:
        """Credentials stopped being valid (here or in another process): the live voice
        sessions they opened close at once (4013)."""
        for session in list(self.live_sessions.values()):
            principal = session.principal
            if principal is not None and revocation.covers(principal):
                session.revoke_credentials()

    async def authenticate(self, token: str, *, realtime: bool = False) -> Principal | None:
        """Who ``token`` proves, or None. A client secret (``ek_…``) proves someone only for a
        realtime session (``realtime=True``: the WebSocket's handshake); everywhere else —
        the HTTP API — it proves no one."""
        if is_client_secret(token):
            return await self.accounts.authenticate_client_secret(token) if realtime else None
        return await self.accounts.authenticate(token)

    async def authenticate_header(
        self, header: str | None, *, realtime: bool = False
    ) -> Principal | None:
        token = bearer_token(header)
        return None if token is None else await self.authenticate(token, realtime=realtime)

    async def role_for(self, principal: Principal, role_id: str | None) -> Role | None:
        """The agent role a new session of ``principal`` uses: ``role_id``, else the one a
        client secret is bound to, else the tenant's default. None when unknown, or when a
        client secret's principal asks for another role than its own."""
        if role_id is None:
            role_id = principal.bound_role_id
        if role_id is None:
            return await default_role(self.roles, principal.tenant)
        if not principal.may_use_role(role_id):
            return None
        return await self.roles.get(principal.tenant, role_id)

    def fence_session(self, session_id: str, epoch: int) -> None:
        """A resume moved ``session_id`` to ``epoch`` (maybe on another process): the copy
        this process holds, if older, stops serving (its connection is closed with 4012)."""
        session = self.live_sessions.get(session_id)
        if session is not None:
            session.fence(epoch)

    async def close(self) -> None:
        await self.calls.close()
        await self.accounts.close()
        await self.resume_tokens.close()
        for session in list(self.live_sessions.values()):
            await session.shutdown()
        brain_close = getattr(self.plugins.brain, "aclose", None)
        if self.owns_plugins and brain_close is not None:
            await brain_close()
        if self.database is not None:
            await self.database.close()
            self.database = None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def record_limits(settings: Settings) -> RecordLimits:
    return RecordLimits(
        max_segment_messages=settings.conversation_segment_max_messages,
        max_segment_bytes=settings.conversation_segment_max_bytes,
        max_messages=settings.conversation_max_messages,
    )


def memory_key_source(settings: Settings) -> KeySource:
    """Where the memory keyring comes from: ``memory_keys`` when set, else the key file."""
    return KeySource(
        configured=settings.memory_keys.get_secret_value() or None,
        path=settings.memory_key_file or settings.data_dir / KEY_FILE_NAME,
    )


async def open_memory_store(
    pool: object, keyring: Keyring, source: KeySource
) -> PostgresMemoryStore:
    """The PostgreSQL memory store under ``keyring`` (re-read from ``source`` when a row is
    under a key it lacks), with every row written before encryption sealed
    (``seal_plaintext``: work only on the first start after the upgrade)."""
    store = PostgresMemoryStore(pool, keyring=keyring, reload_keyring=source.load)
    sealed = await store.seal_plaintext()
    if sealed:
        log.info("memory: sealed %d entries written before encryption at rest", sealed)
    return store


def knowledge_base(settings: Settings, database: Database | None) -> KnowledgeBase:
    """The knowledge base on the process's database (or memory), semantic recall per
    ``settings.knowledge_semantic`` (the model loads on first use, off the event loop)."""
    store = InMemoryKnowledgeStore() if database is None else PostgresKnowledgeStore(database.pool)
    embedder = E5Embedder.shared() if settings.knowledge_semantic else None
    return KnowledgeBase(store, embedder=embedder)


async def open_services(settings: Settings, *, plugins: Plugins | None = None) -> Services:
    """Build the process's services. ``plugins`` overrides the configured ones (tests,
    benchmarks with instant fakes)."""
    warm = plugins is None
    if plugins is None:
        plugins = build_plugins(settings)
        await warm_up(plugins)
    # The keys are read (or the key file made) whichever the storage, so a bad configuration
    # fails at start; the in-memory store holds entries in process memory, unsealed.
    key_source = memory_key_source(settings)
    keyring = key_source.load()
    if settings.storage == "memory":
        services = Services(
            settings=settings,
            plugins=plugins,
            accounts=InMemoryAccountStore(),
            roles=InMemoryRoleStore(),
            threads=InMemoryThreadStore(),
            journal=InMemoryJournalStore(),
            checkpoints=InMemoryCheckpointStore(),
            records=InMemoryRecordStore(record_limits(settings)),
            keyring=keyring,
        )
    else:
        database = await open_database(
            database_url=settings.database_url, data_dir=settings.data_dir
        )
        try:
            await apply_migrations(database.pool, MIGRATED_PACKAGES)
            memory = await open_memory_store(database.pool, keyring, key_source)
        except BaseException:
            await database.close()
            raise
        services = Services(
            settings=settings,
            plugins=plugins,
            accounts=PostgresAccountStore(database.pool, url=database.url),
            roles=PostgresRoleStore(database.pool),
            threads=PostgresThreadStore(database.pool),
            journal=PostgresJournalStore(database.pool),
            checkpoints=PostgresCheckpointStore(database.pool),
            resume_tokens=PostgresResumeTokenStore(database.pool, url=database.url),
            records=PostgresRecordStore(database.pool, limits=record_limits(settings)),
            memory=memory,
            thread_memory=PostgresThreadMemoryStore(database.pool),
            pool=PostgresPoolStore(database.pool, keyring=keyring),
            learning_runs=PostgresLearningRunStore(database.pool),
            keyring=keyring,
            database=database,
        )
    services.owns_plugins = warm
    services.knowledge = knowledge_base(settings, services.database)
    if warm and services.knowledge.embedder is not None:
        await services.knowledge.embedder.reference()  # loads the model now, off the loop
    services.local_token = await ensure_local_token(services.accounts, settings.data_dir)
    await services.accounts.watch(services.revoked)
    # A resume continued on another process fences this process's copy of the session.
    await services.resume_tokens.watch(services.fence_session)
    return services
