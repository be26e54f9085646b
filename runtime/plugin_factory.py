"""Build the plugins a configuration names. Imports are lazy: a deployment that points a stage
at a provider never loads the embedded model for it."""

from __future__ import annotations

import importlib.metadata
import logging
from typing import TYPE_CHECKING, cast

from pipeline.engine import Plugins
from plugins.contracts import ASR, TTS, VAD, Brain, Endpointer
from runtime.config import BRAIN_ENTRY_POINTS, BUILTIN_BRAINS, Settings

if TYPE_CHECKING:
    from plugins.brain.relevance import RelevanceJudge
    from runtime.model_server import ModelBackends

log = logging.getLogger(__name__)


async def warm_up(plugins: Plugins) -> None:
    """Load models before the first session needs them (``load``/``warm_up`` if a plugin has
    one); each plugin does its loading off the event loop."""
    for plugin in (plugins.vad, plugins.asr, plugins.brain, plugins.tts, plugins.endpointer):
        for name in ("load", "warm_up"):
            method = getattr(plugin, name, None)
            if method is not None:
                await method()
                break


def build_plugins(settings: Settings) -> Plugins:
    return Plugins(
        vad=_vad(settings),
        asr=_asr(settings),
        brain=build_brain(settings),
        tts=_tts(settings),
        endpointer=_endpointer(settings),
    )


def budget_fallbacks(
    settings: Settings, paid: dict[str, bool]
) -> tuple[Brain | None, ASR | None, TTS | None]:
    """What answers, hears and speaks for a tenant that spent its budget (``runtime.budget``
    Rule 2): the embedded stack for each paid stage, when ``OPENREALTIME_BUDGET_FALLBACK`` names
    an embedded brain; none otherwise."""
    if settings.budget_fallback == "none":
        return None, None, None
    embedded = settings.model_copy(
        update={"brain": settings.budget_fallback, "asr": "whisper", "tts": "auto"}
    )
    return (
        build_brain(embedded) if paid["brain"] else None,
        _asr(embedded) if paid["asr"] else None,
        _tts(embedded) if paid["tts"] else None,
    )


def build_model_backends(settings: Settings) -> ModelBackends:
    """The embedded models ``openrealtime serve-models`` serves: Whisper, the configured TTS
    and the local language model (its fair queue keyed by caller)."""
    from plugins.brain.local_model import LocalModel, LocalModelSettings
    from plugins.tts import create_tts
    from runtime.model_server import ModelBackends

    reason = LocalModel.unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the local language model cannot run: {reason}")
    model = LocalModel(
        LocalModelSettings(
            context_tokens=settings.llm_context_tokens,
            threads=settings.llm_threads,
            max_waiting=settings.llm_queue_max,
            max_per_lane=settings.models_max_waiting_per_caller,
            start_deadline_s=settings.llm_start_deadline_s,
            cache_dir=settings.model_cache_dir,
        )
    )
    from plugins.asr.whisper import WhisperASR

    asr_model = None if settings.asr_model == "base" else settings.asr_model
    tts = create_tts("auto" if settings.tts == "openai" else settings.tts)
    return ModelBackends(
        asr=WhisperASR(model=asr_model, data_dir=settings.data_dir),
        tts=tts,
        chat=model,
        asr_model=f"whisper-{settings.asr_model}",
        tts_model="openrealtime-tts",
        chat_model=model.model.name,
    )


def _vad(settings: Settings) -> VAD:
    if settings.vad == "silero":
        from plugins.vad.silero import SileroVAD

        return SileroVAD()
    from plugins.vad.energy import EnergyVAD

    return EnergyVAD()


def _endpointer(settings: Settings) -> Endpointer | None:
    if settings.endpointing == "smart_turn":
        from plugins.endpointing.smart_turn import SmartTurnEndpointer

        return SmartTurnEndpointer()
    return None


def _asr(settings: Settings) -> ASR:
    if settings.asr == "openai":
        from plugins.asr.openai_asr import OpenAIASR

        return OpenAIASR(
            base_url=settings.asr_base_url,
            api_key=settings.asr_api_key.get_secret_value(),
            model=settings.asr_model_name,
            timeout=settings.provider_timeout_s,
        )
    from plugins.asr.whisper import WhisperASR

    model = None if settings.asr_model == "base" else settings.asr_model
    return WhisperASR(model=model, data_dir=settings.data_dir)


def build_brain(settings: Settings) -> Brain:
    """The brain ``settings.brain`` names: a built-in, or an installed package's
    (``openrealtime.brains`` entry point: a factory taking the settings)."""
    if settings.brain == "http":
        from plugins.brain.http_agent import HttpAgentBrain

        return HttpAgentBrain(
            settings.agent_url,
            token=settings.agent_token.get_secret_value(),
            timeout_s=settings.agent_timeout_s,
        )
    if settings.brain not in BUILTIN_BRAINS:
        (entry,) = importlib.metadata.entry_points(group=BRAIN_ENTRY_POINTS, name=settings.brain)
        brain = entry.load()(settings)
        if not callable(getattr(brain, "stream", None)):
            raise TypeError(f"the brain {settings.brain!r} has no stream(request) method")
        return cast(Brain, brain)
    if settings.brain == "openai":
        from plugins.brain.openai_brain import OpenAIBrain

        return OpenAIBrain(
            base_url=settings.brain_base_url,
            api_key=settings.brain_api_key.get_secret_value(),
            model=settings.brain_model,
            timeout=settings.provider_timeout_s,
        )
    if settings.brain == "llm":
        from plugins.brain.local_model import LocalModel, LocalModelSettings
        from plugins.brain.model_queue import BackgroundPolicy

        reason = LocalModel.unavailable_reason()
        if reason is None:
            from plugins.brain.llm import LLMBrain

            model = LocalModel(
                LocalModelSettings(
                    context_tokens=settings.llm_context_tokens,
                    threads=settings.llm_threads,
                    max_waiting=settings.llm_queue_max,
                    start_deadline_s=settings.llm_start_deadline_s,
                    cache_dir=settings.model_cache_dir,
                    prefill_batch_tokens=settings.llm_prefill_batch_tokens,
                    background=BackgroundPolicy(
                        idle_before_s=settings.llm_background_idle_s,
                        share=settings.llm_background_share,
                    ),
                )
            )
            return LLMBrain(
                model,
                max_answer_tokens=settings.llm_max_answer_tokens,
                judge=relevance_judge(settings),
            )
        log.warning("brain: the local language model cannot run (%s); using rules", reason)
    from plugins.brain.local import LocalBrain

    return LocalBrain()


def relevance_judge(settings: Settings) -> RelevanceJudge | None:
    """Rule 4's judge for the default brain (``plugins.brain.relevance``), or None when it is
    switched off or its wheels are not installed (the brain's quote check decides)."""
    from plugins.brain.local_model import LocalModelSettings
    from plugins.brain.relevance import RelevanceJudge

    if not settings.llm_relevance_judge:
        return None
    reason = RelevanceJudge.unavailable_reason()
    if reason is not None:
        log.warning("brain: no relevance judge (%s); the quote check decides", reason)
        return None
    return RelevanceJudge.local(
        LocalModelSettings(
            context_tokens=2048,
            threads=settings.llm_threads,
            max_waiting=settings.llm_queue_max,
            start_deadline_s=settings.llm_start_deadline_s,
            cache_dir=settings.model_cache_dir,
            prefill_batch_tokens=settings.llm_prefill_batch_tokens,
        )
    )


def _tts(settings: Settings) -> TTS:
    if settings.tts == "openai":
        from plugins.tts.openai_tts import OpenAITTS

        return OpenAITTS(
            base_url=settings.tts_base_url,
            api_key=settings.tts_api_key.get_secret_value(),
            model=settings.tts_model,
            voice=settings.tts_voice,
            timeout=settings.provider_timeout_s,
        )
    from plugins.tts import create_tts

    return create_tts(settings.tts)
