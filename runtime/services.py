"""Services: what one server process shares between sessions (stores, loaded models)."""

from __future__ import annotations

import asyncio
import contextlib
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
from knowledge.postgres_store import PostgresKnowledgeStore
from knowledge.store import InMemoryKnowledgeStore
from memory.crypto import KEY_FILE_NAME, Keyring, KeySource
from memory.fact_reader import FactReader
from memory.learning_runs import InMemoryLearningRunStore, LearningRunStore
from memory.memory_ledger import InMemoryMemoryLedger
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import InMemoryPoolStore, PoolStore
from memory.postgres_learning_runs import PostgresLearningRunStore
from memory.postgres_pool_memory import PostgresMemoryLedger, move_entries_to_pool
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_role_records import PostgresRoleRecords
from memory.postgres_store import PostgresMemoryStore
from memory.postgres_thread_store import PostgresThreadMemoryStore
from memory.role_records import InMemoryRoleRecords, MemoryModelCalls, RoleRecords
from memory.store import MemoryStore
from memory.thread_consolidation import JsonModel
from memory.thread_store import InMemoryThreadMemoryStore, ThreadMemoryStore
from pipeline.engine import Plugins
from plugins.brain.local_model import local_model_of
from plugins.contracts import ASR, TTS, Brain
from plugins.embedding import E5Embedder
from records.audio_store import AudioStore, LocalAudioStore
from records.recordings import InMemoryRecordingIndex, PostgresRecordingIndex, RecordingIndex
from runtime.accounts import AccountStore, InMemoryAccountStore, Principal, ensure_local_token
from runtime.budget import BudgetGuard
from runtime.config import Settings
from runtime.database import Database, open_database
from runtime.limits import WriteRateLimiter
from runtime.metrics import LoopLagMonitor, ModelState, ProcessState
from runtime.migrations import apply_migrations
from runtime.plugin_factory import budget_fallbacks, build_plugins, warm_up
from runtime.postgres_records import PostgresRecordStore
from runtime.postgres_stores import PostgresRoleStore, PostgresThreadStore
from runtime.realtime.live import LiveSessions
from runtime.realtime.resume import (
    InMemoryResumeTokenStore,
    PostgresResumeTokenStore,
    ResumeTokenStore,
)
from runtime.realtime.transport import Calls
from runtime.recording import RecordingExpiry, open_audio_store
from runtime.records import InMemoryRecordStore, RecordLimits, RecordStore
from runtime.role_memory import RoleLearning, RoleMemoryModels
from runtime.roles import InMemoryRoleStore, Role, RoleStore, default_role
from runtime.telemetry import Telemetry
from runtime.telephony.call_records import (
    CallRecordStore,
    InMemoryCallRecords,
    PostgresCallRecords,
)
from runtime.telephony.calls import PhoneCalls
from runtime.thread_memory import ThreadMemoryService, json_model_of
from runtime.threads import InMemoryThreadStore, ThreadStore
from runtime.tracing import tracing_from_settings
from runtime.usage import (
    CpuShare,
    InMemoryUsageLedger,
    PostgresUsageLedger,
    Prices,
    UsageLedger,
    prices_for,
    stack_of,
)
from tools.catalog import InMemoryToolCatalog, InMemoryToolSecrets, ToolCatalog, ToolSecrets
from tools.grants import GrantStore, InMemoryGrantStore
from tools.http_tool import HttpToolExecutor
from tools.judge import Judge, LanguageModelJudge
from tools.judgements import InMemoryJudgementCache, JudgementCache
from tools.postgres_catalog import PostgresToolCatalog, PostgresToolSecrets
from tools.postgres_grants import PostgresGrantStore
from tools.postgres_rules import PostgresJudgementCache, PostgresRuleStore
from tools.rules import InMemoryRuleStore, RuleStore

log = logging.getLogger(__name__)

BRAIN_MEMORY_MODEL = "brain"
"""The memory model name of the brain's own model."""


MIGRATED_PACKAGES = ("runtime", "accounts", "journal", "memory", "knowledge", "tools", "records")
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
    memory: MemoryStore = field(default_factory=lambda: in_memory_memory(InMemoryPoolStore()))
    """Long-term memory per user and role (issue 7), kept as entries of the role pools
    (``memory/pool_memory.py``): ``open_services`` builds it over ``pool``."""
    thread_memory: ThreadMemoryStore = field(default_factory=InMemoryThreadMemoryStore)
    """Each thread's learned facts (SPEC TM, issue 17)."""
    pool: PoolStore = field(default_factory=InMemoryPoolStore)
    """The role memory pools (SPEC RM, issue 18)."""
    role_records: RoleRecords = field(default_factory=InMemoryRoleRecords)
    """Role memory's settings, confessions, enrichments and model call log (SPEC RM-4…8)."""
    memory_calls: MemoryModelCalls | None = None
    """Calls of the roles' memory models under RM-6: ``runtime.role_memory.RoleMemoryModels``
    over ``memory_models`` and ``role_records`` unless one is given (tests)."""
    learning_runs: LearningRunStore = field(default_factory=InMemoryLearningRunStore)
    """Durable learning runs of role memory (SPEC RM-4)."""
    call_records: CallRecordStore = field(default_factory=InMemoryCallRecords)
    """Phone calls (SPEC TEL-5): the history page's list, numbers sealed at rest."""
    recording_index: RecordingIndex = field(default_factory=InMemoryRecordingIndex)
    """What is known of each recording (SPEC REC-2)."""
    audio_store: AudioStore | None = None
    usage: UsageLedger = field(default_factory=InMemoryUsageLedger)
    """What each tenant's conversations used (``runtime.usage``)."""
    cpu_share: CpuShare = field(default_factory=CpuShare)
    """The process's CPU time shared out among its sessions (``runtime.usage`` Rule 6)."""
    prices: Prices = field(default_factory=Prices)
    """What the running stack costs (``OPENREALTIME_PRICES``), read once at start."""
    budget_guard: BudgetGuard | None = None
    """Set when the brain is paid: stops it for a tenant that spent its budget."""
    budget_fallback: Brain | None = None
    budget_fallback_asr: ASR | None = None
    budget_fallback_tts: TTS | None = None
    """What takes over a paid stage once a tenant spent its budget (``runtime.budget`` Rule 2)."""
    audio_store_name: str = "local"
    """``Recording.store`` of the recordings this process makes (``recording_store``)."""
    """Where recordings' sealed audio rests (the data directory's ``recordings/``); None in
    tests that build services by hand: nothing is recorded."""
    recording_expiry: RecordingExpiry | None = None
    """Deletes expired recordings (``start_background``)."""
    keyring: Keyring | None = None
    """The memory keyring (None in tests that build services by hand)."""
    memory_models: dict[str, JsonModel] = field(default_factory=dict)
    """Memory models a role may name in its settings (SPEC RM-6), by name: ``brain`` is the
    brain's own model when it has one (the local LLM by default); tests add scripted ones."""
    knowledge: KnowledgeBase = field(
        default_factory=lambda: KnowledgeBase(InMemoryKnowledgeStore())
    )
    """Documents, role bindings and retrieval (issue 6); this default has semantic recall off."""
    tool_catalog: ToolCatalog = field(default_factory=InMemoryToolCatalog)
    """Each role's declared HTTP tools (SPEC TOOL-1)."""
    tool_secrets: ToolSecrets = field(default_factory=InMemoryToolSecrets)
    """The tenants' secrets that HTTP tool headers name (never returned, never logged)."""
    grants: GrantStore = field(default_factory=InMemoryGrantStore)
    """Tool grants (SPEC TOOL-2)."""
    rules: RuleStore = field(default_factory=InMemoryRuleStore)
    """Tool rules per role (SPEC TOOL-3)."""
    judgements: JudgementCache = field(default_factory=InMemoryJudgementCache)
    """The rules judge's stored judgements (SPEC TOOL-3)."""
    tool_judge: Judge | None = None
    """The rules judge (``Settings.tool_judge``): ``open_services`` gives the brain's model
    when there is one; None: no rules model, so no decision by rules."""
    database: Database | None = None
    local_token: str | None = None
    active_sessions: set[str] = field(default_factory=set)
    live_sessions: LiveSessions = field(default_factory=LiveSessions)
    """Voice sessions of this process by id, connected or waiting to be resumed."""
    loop_lag: LoopLagMonitor = field(default_factory=LoopLagMonitor)
    thread_memory_service: ThreadMemoryService = field(init=False)
    """Thread memory's view, commands and consolidation (``runtime/thread_memory.py``)."""
    role_memory: RoleLearning = field(init=False)
    fact_reader: FactReader | None = field(init=False, default=None)
    """Reads what the memory patterns missed with the brain's model (``memory/fact_reader``)."""
    """Role memory's model calls and learner (``runtime/role_memory.py``); its learner runs
    between ``start_background`` and ``close``."""
    calls: Calls = field(init=False)
    """WebRTC calls of this process (``runtime.webrtc.calls``)."""
    phone: PhoneCalls = field(init=False)
    """Phone calls of this process (``runtime.telephony.calls``)."""
    tool_executor: HttpToolExecutor = field(init=False)
    """Runs the sessions' HTTP tool calls on one connection pool (``runtime.tool_gate``)."""
    write_limiter: WriteRateLimiter = field(init=False)
    """Write requests per user and minute (SPEC ACC-5, ``runtime/http/policy.py`` rule 4)."""
    owns_plugins: bool = False
    """Whether the plugins were built here (and are closed with the services)."""
    draining: bool = False
    """The process takes no new sessions (``start_draining``): ``/healthz/ready`` answers 503
    so the load balancer sends new connections elsewhere."""
    warmed: bool = True
    """The plugins' models are loaded (``open_services`` warms them before it returns)."""
    telemetry: Telemetry = field(init=False)
    """Metrics and turn traces of this process (``runtime/telemetry.py``)."""

    def __post_init__(self) -> None:
        self.telemetry = Telemetry(self.operating_state, tracing_from_settings(self.settings))
        self.loop_lag.on_sample = self.telemetry.metrics.loop_lag_sample
        model = local_model_of(self.plugins.brain)
        if model is not None:
            model.observers.append(self.telemetry.metrics.model_request)
        self.calls = Calls(self.active_sessions)
        self.phone = PhoneCalls()
        self.tool_executor = HttpToolExecutor(
            _CurrentToolSecrets(self), self.settings.tool_host_set()
        )
        brain_model = json_model_of(self.plugins.brain)
        if brain_model is not None:
            self.memory_models.setdefault(BRAIN_MEMORY_MODEL, brain_model)
            if self.settings.memory_model_facts and model is not None:
                # The local model only: a provider's model would charge for every statement.
                self.fact_reader = FactReader(brain_model, self.memory)
        self.thread_memory_service = ThreadMemoryService(self)
        models = RoleMemoryModels(self.memory_models, self.role_records)
        if self.memory_calls is None:
            self.memory_calls = models  # enrichment, confide and learning share one gate per role
        self.role_memory = RoleLearning(
            models=models,
            runs=self.learning_runs,
            pool=self.pool,
            journal=self.journal,
            records=self.role_records,
            keyring=self.keyring,
        )
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

    def start_draining(self) -> None:
        """Take no new sessions from now on (readiness fails; ``SIGUSR1`` of ``serve``). What
        draining does to the sessions already here is SIGTERM's (SPEC OPS-1)."""
        if not self.draining:
            log.info("draining: this process is no longer ready for new sessions")
        self.draining = True

    def operating_state(self) -> ProcessState:
        """What the process holds now, for ``/metrics`` (``runtime/metrics.py`` rule 3)."""
        sessions = list(self.live_sessions.values())
        model = local_model_of(self.plugins.brain)
        return ProcessState(
            live_sessions=len(sessions),
            waiting_for_resume=sum(1 for s in sessions if s.connection is None),
            connections=len(self.active_sessions),
            journal_buffered=sum(s.journal.buffered for s in sessions),
            draining=self.draining,
            model=None
            if model is None
            else ModelState(
                waiting=model.waiting,
                capacity=model.settings.max_waiting,
                requests=model.stats.requests,
                expired=model.stats.expired,
                rejected=model.stats.rejected,
                stopped_early=model.stats.stopped_early,
            ),
        )

    def fence_session(self, session_id: str, epoch: int) -> None:
        """A resume moved ``session_id`` to ``epoch`` (maybe on another process): the copy
        this process holds, if older, stops serving (its connection is closed with 4012)."""
        session = self.live_sessions.get(session_id)
        if session is not None:
            session.fence(epoch)

    async def start_background(self) -> None:
        """Start the work the services do between requests: role memory's learner (recovery
        of the runs a stopped process left, then its workers), and the recordings' expiry."""
        await self.role_memory.start()
        if self.audio_store is not None and self.recording_expiry is None:
            self.recording_expiry = RecordingExpiry(
                self.recording_index,
                self.audio_store,
                interval_s=self.settings.recording_expiry_interval_s,
            )
            self.recording_expiry.start()

    async def stop_background(self) -> None:
        """Stop what ``start_background`` started."""
        await self.role_memory.close()
        expiry, self.recording_expiry = self.recording_expiry, None
        if expiry is not None:
            await expiry.stop()

    async def close(self) -> None:
        await self.stop_background()
        if self.fact_reader is not None:
            await self.fact_reader.close()
        model = local_model_of(self.plugins.brain)
        if model is not None:
            with contextlib.suppress(ValueError):
                model.observers.remove(self.telemetry.metrics.model_request)
        # Flushing the last spans may wait on the exporter's network: off the event loop.
        await asyncio.to_thread(self.telemetry.close)
        await self.calls.close()
        await self.tool_executor.aclose()
        await self.accounts.close()
        await self.resume_tokens.close()
        for session in list(self.live_sessions.values()):
            await session.shutdown()
        await self.thread_memory_service.close()
        brain_close = getattr(self.plugins.brain, "aclose", None)
        if self.owns_plugins and brain_close is not None:
            await brain_close()
        if self.database is not None:
            await self.database.close()
            self.database = None


class _CurrentToolSecrets:
    """The services' tool secrets as they are when a call reads them (the store may be
    replaced after the services are built)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def get(self, tenant: str, name: str) -> str | None:
        return await self.services.tool_secrets.get(tenant, name)


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


def in_memory_memory(pool: PoolStore) -> PoolMemoryStore:
    """Per-user memory over ``pool`` with its ledger in process memory."""
    return PoolMemoryStore(pool, InMemoryMemoryLedger())


async def open_memory_store(
    pool: object, keyring: Keyring, source: KeySource
) -> tuple[PoolMemoryStore, PostgresPoolStore]:
    """Per-user memory and the role pools it lives in, on PostgreSQL, under ``keyring``
    (re-read from ``source`` when a row is under a key it lacks). The rows of the per-user
    store of before (``memory_entries``) are first sealed if written before encryption
    (``seal_plaintext``), then moved into the pools (``move_entries_to_pool``): work only on
    the first start after each upgrade; rows of no known user stay where they are."""
    old = PostgresMemoryStore(pool, keyring=keyring, reload_keyring=source.load)
    sealed = await old.seal_plaintext()
    if sealed:
        log.info("memory: sealed %d entries written before encryption at rest", sealed)
    pools = PostgresPoolStore(pool, keyring=keyring, reload_keyring=source.load)
    await move_entries_to_pool(old, pools)
    return PoolMemoryStore(pools, PostgresMemoryLedger(pool)), pools


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
    # fails at start; the in-memory stores hold entries in process memory only.
    key_source = memory_key_source(settings)
    keyring = key_source.load()
    audio_store, audio_store_name = open_audio_store(settings)
    if settings.storage == "memory":
        if isinstance(audio_store, LocalAudioStore):  # rows gone with the last process
            orphans = await asyncio.to_thread(audio_store.remove_all)
            if orphans:
                log.info("recordings: removed %d left by an earlier in-memory run", orphans)
        pools = InMemoryPoolStore()
        services = Services(
            settings=settings,
            plugins=plugins,
            accounts=InMemoryAccountStore(),
            roles=InMemoryRoleStore(),
            threads=InMemoryThreadStore(),
            journal=InMemoryJournalStore(),
            checkpoints=InMemoryCheckpointStore(),
            records=InMemoryRecordStore(record_limits(settings)),
            memory=in_memory_memory(pools),
            pool=pools,
            # Declarations are checked against this process's allowlist when they are made.
            tool_catalog=InMemoryToolCatalog(settings.tool_host_set()),
            keyring=keyring,
            audio_store=audio_store,
            audio_store_name=audio_store_name,
        )
    else:
        database = await open_database(
            database_url=settings.database_url, data_dir=settings.data_dir
        )
        try:
            await apply_migrations(database.pool, MIGRATED_PACKAGES)
            memory, pg_pools = await open_memory_store(database.pool, keyring, key_source)
            thread_memory = PostgresThreadMemoryStore(database.pool, keyring=keyring)
            sealed = await thread_memory.seal_plaintext()
            if sealed:
                log.info("thread memory: sealed %d threads written before encryption", sealed)
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
            thread_memory=thread_memory,
            pool=pg_pools,
            role_records=PostgresRoleRecords(database.pool, keyring=keyring),
            learning_runs=PostgresLearningRunStore(database.pool),
            grants=PostgresGrantStore(database.pool),
            rules=PostgresRuleStore(database.pool),
            judgements=PostgresJudgementCache(database.pool),
            tool_catalog=PostgresToolCatalog(database.pool, settings.tool_host_set()),
            tool_secrets=PostgresToolSecrets(database.pool, keyring=keyring),
            call_records=PostgresCallRecords(database.pool, keyring=keyring),
            recording_index=PostgresRecordingIndex(database.pool),
            usage=PostgresUsageLedger(database.pool),
            audio_store=audio_store,
            audio_store_name=audio_store_name,
            keyring=keyring,
            database=database,
        )
    if settings.tool_judge == "brain":
        judge_model = json_model_of(plugins.brain)
        if judge_model is not None:
            services.tool_judge = LanguageModelJudge(judge_model, name="brain-rule-readings")
    services.prices = prices = prices_for(settings.prices, stack_of(settings))
    if any(prices.paid.values()):  # a paid stage: budgets apply
        services.budget_guard = BudgetGuard(
            services.usage, prices, cache_s=settings.budget_check_interval_s
        )
        services.budget_fallback, services.budget_fallback_asr, services.budget_fallback_tts = (
            budget_fallbacks(settings, prices.paid)
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
