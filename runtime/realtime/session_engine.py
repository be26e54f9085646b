"""What a voice session's engine is made of, and what its configuration sets on it.

Theory of operation
-------------------
Rule 1. ``build_engine`` assembles one session's engine from the process's services: the
        knowledge tool (the authenticated user's documents bound to the role), ``confide``
        (the agent's note to role memory, RM-4), the tool gate every HTTP or client tool call
        passes (``runtime.tool_gate``; the person grants as authenticated), the thread's
        budgeted history (a small local model's context is smaller: ``history_window``),
        long-term memory, thread memory, input enrichment, and the shared model's hold.
Rule 2. ``session_setup`` is the GA session configuration as the engine takes it
        (``Engine.configure``): the role's voice unless the client chose one of its own, the
        output modalities, the client's functions and tool choice, the output limit, the turn
        detection (the server's timings, the client's silence and eagerness) and the formats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from journal.store import JournalStore
from knowledge.tool import make_knowledge_tool
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.engine_config import SessionSetup, TurnFailure
from pipeline.history import ConversationHistory
from pipeline.turn_commands import TurnSettings
from plugins.brain.local_model import local_model_of
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ASR, TTS, Brain, ToolChoice, ToolSpec
from runtime.budget import BudgetedASR, BudgetedBrain, BudgetedTTS, BudgetGuard
from runtime.confide import CONFIDE_TOOL_TIMEOUT_S, ConfideServices, ConfideTool
from runtime.config import Settings
from runtime.enrichment import EnrichmentServices, session_enrichment
from runtime.memory_hook import MemoryServices, session_memory
from runtime.metered import metered
from runtime.realtime.session_config import (
    GA_VOICES,
    SEMANTIC_VAD_EAGERNESS,
    SessionConfig,
    TurnDetectionConfig,
)
from runtime.roles import Role
from runtime.thread_memory import ThreadMemoryHook
from runtime.tool_gate import ToolGate
from runtime.usage import Prices, UsageMeter
from tools.decide import ToolDecider

if TYPE_CHECKING:
    from journal.checkpoints import CheckpointStore
    from journal.events import ThreadRef
    from journal.projector import BudgetedConversationContextProjector
    from knowledge.base import KnowledgeBase
    from pipeline.engine_config import Plugins
    from runtime.realtime.outbox import Outbox
    from runtime.thread_memory import ThreadMemoryService
    from tools.catalog import ToolCatalog
    from tools.grants import GrantStore
    from tools.http_tool import HttpToolExecutor
    from tools.judge import Judge
    from tools.judgements import JudgementCache
    from tools.rules import RuleStore


class EngineServices(ConfideServices, MemoryServices, EnrichmentServices, Protocol):
    """What a session's engine is built from (Rule 1), beside what its confide tool, memory
    and enrichment take."""

    plugins: Plugins
    checkpoints: CheckpointStore
    projector: BudgetedConversationContextProjector
    knowledge: KnowledgeBase
    thread_memory_service: ThreadMemoryService
    grants: GrantStore
    rules: RuleStore
    judgements: JudgementCache
    tool_judge: Judge | None
    tool_catalog: ToolCatalog
    tool_executor: HttpToolExecutor
    budget_guard: BudgetGuard | None
    budget_fallback: Brain | None
    budget_fallback_asr: ASR | None
    budget_fallback_tts: TTS | None
    prices: Prices


def history_window(brain: object) -> tuple[int, int]:
    """(context window, reserved output) of the history budget for ``brain``: a small local
    model's context is smaller than the default (``context_tokens`` when it says)."""
    window = getattr(brain, "context_tokens", None)
    if not isinstance(window, int):
        return 8_192, 1_024
    return window, int(getattr(brain, "reserved_output_tokens", 256))


def within_budget(guard: BudgetGuard | None, tenant: str) -> Callable[[], Awaitable[bool]] | None:
    """Whether the tenant may still use the paid brain (background memory work asks too)."""
    if guard is None:
        return None

    async def allowed() -> bool:
        return not await guard.spent(tenant)

    return allowed


def budgeted(services: EngineServices, tenant: str, brain: Brain) -> Plugins:
    """The plugins with ``brain``; each paid stage of the deployment guarded by the tenant's
    budget (``runtime.budget``; a role's own agent is not: ``runtime.role_agent`` Rule 4)."""
    guard, plugins = services.budget_guard, services.plugins
    if guard is None:
        return plugins if brain is plugins.brain else dataclasses.replace(plugins, brain=brain)
    paid = services.prices.paid
    asr, tts = plugins.asr, plugins.tts
    if paid["brain"] and brain is plugins.brain:
        brain = BudgetedBrain(brain, guard=guard, tenant=tenant, fallback=services.budget_fallback)
    if paid["asr"]:
        asr = BudgetedASR(asr, guard=guard, tenant=tenant, fallback=services.budget_fallback_asr)
    if paid["tts"]:
        tts = BudgetedTTS(tts, guard=guard, tenant=tenant, fallback=services.budget_fallback_tts)
    return dataclasses.replace(plugins, brain=brain, asr=asr, tts=tts)


def session_plugins(
    services: EngineServices, tenant: str, brain: Brain, usage: UsageMeter | None
) -> Plugins:
    """The session's plugins: its brain, guarded by the budget, and its models timed."""
    plugins = budgeted(services, tenant, brain)
    return plugins if usage is None else metered(plugins, usage.used_model)


def build_engine(
    services: EngineServices,
    *,
    thread: ThreadRef,
    role: Role,
    config: SessionConfig,
    journal: JournalStore,
    person: str,
    session_id: str,
    epoch: int,
    outbox: Outbox,
    on_turn_failed: Callable[[TurnFailure], None],
    call_tools: Sequence[tuple[ToolSpec, ToolHandler]] = (),
    brain: Brain | None = None,
    usage: UsageMeter | None = None,
) -> tuple[Engine, ToolGate]:
    """Rule 1: the session's engine and its tool gate; ``call_tools``: the built-ins of the
    transport (a phone call's ``end_call``); ``brain``: the role's own agent
    (``runtime.role_agent``), else the deployment's brain; ``usage``: the session's meter, its
    models' time counted into it (``runtime.metered``)."""
    brain = services.plugins.brain if brain is None else brain
    knowledge_spec, knowledge_tool = make_knowledge_tool(
        services.knowledge, tenant=thread.tenant, user=thread.user, role_id=role.id
    )
    confide = ConfideTool(
        services, thread=thread, role_id=role.id, language=role.language, journal=journal
    )
    window, reserved = history_window(brain)
    settings = services.settings
    tool_gate = ToolGate(
        decider=ToolDecider(
            services.grants, services.rules, services.judgements, services.tool_judge
        ),
        grants=services.grants,
        rules=services.rules,
        catalog=services.tool_catalog,
        executor=services.tool_executor,
        journal=journal,
        thread=thread,
        role_id=role.id,
        person=person,
        voice_session_id=session_id,
        allowed_hosts=settings.tool_host_set(),
        language=role.language,
        confirm_timeout_s=settings.tool_confirm_timeout_s,
        client_undecided=settings.tool_client_undecided,
    )
    for spec, _ in call_tools:
        tool_gate.registry.add_builtin(spec.name)
    engine = Engine(
        plugins=session_plugins(services, thread.tenant, brain, usage),
        sink=outbox,
        journal=journal,
        history=ConversationHistory(
            journal,
            services.checkpoints,
            projector=services.projector,
            context_window=window,
            reserved_output=reserved,
        ),
        thread=thread,
        persona=Persona(
            config.instructions, role.voice, role.language, role.failure_message, role_id=role.id
        ),
        voice_session_id=session_id,
        settings=EngineSettings(
            output_sample_rate=config.output_format.rate,
            turns=turn_settings(settings, config.turn_detection),
            preemptive=settings.preemptive,
            tool_timeout_s=CONFIDE_TOOL_TIMEOUT_S,
        ),
        incarnation=epoch,
        memory=session_memory(services, thread, role, outbox.send),
        thread_memory=ThreadMemoryHook(
            services.thread_memory_service,
            thread,
            services.plugins.brain,
            lane=session_id,
            may_use_model=within_budget(services.budget_guard, thread.tenant),
        ),
        model_hold=local_model_of(services.plugins.brain),
        enrichment=session_enrichment(services, thread, role),
        tools={
            knowledge_spec.name: knowledge_tool,
            confide.spec.name: confide.handler,
            **{spec.name: handler for spec, handler in call_tools},
        },
        tool_specs=(knowledge_spec, confide.spec, *(spec for spec, _ in call_tools)),
        on_turn_end=confide.turn_ended,
        tool_gate=tool_gate,
        on_turn_failed=on_turn_failed,
    )
    return engine, tool_gate


def turn_settings(settings: Settings, detection: TurnDetectionConfig) -> TurnSettings:
    """The coordinator's timings: the server's, with the client's silence and eagerness."""
    chosen = detection.silence_duration_ms
    silence = (settings.silence_ms if chosen is None else chosen) / 1000.0
    eagerness = settings.eagerness
    if detection.type == "semantic_vad":
        eagerness = SEMANTIC_VAD_EAGERNESS[detection.eagerness]
    return TurnSettings(
        silence_delay=silence,
        min_interrupt=(
            settings.min_interrupt_ms / 1000.0 if detection.interrupt_response else 3600.0
        ),
        auto_commit=detection.type != "none",
        false_interruption_timeout=settings.false_interruption_ms / 1000.0 or None,
        eagerness=eagerness,
        transcript_cues=settings.transcript_cues,
    )


def session_setup(config: SessionConfig, role: Role, settings: Settings) -> SessionSetup:
    """Rule 2."""
    limit = config.max_output_tokens
    detection = config.turn_detection
    idle = detection.idle_timeout_ms
    return SessionSetup(
        instructions=config.instructions,
        voice=role.voice if config.voice in GA_VOICES else config.voice,
        audio_out="audio" in config.output_modalities,
        client_tools=config.tools,
        tool_choice=ToolChoice.from_ga(config.tool_choice),
        max_output_tokens=limit if isinstance(limit, int) else None,
        auto_respond=detection.create_response,
        turns=turn_settings(settings, detection),
        idle_timeout_s=idle / 1000.0 if idle is not None else None,
        vad_threshold=detection.threshold,
        prefix_padding_ms=detection.prefix_padding_ms,
        output_sample_rate=config.output_format.rate,
    )


__all__ = ["build_engine", "history_window", "session_setup", "turn_settings"]
