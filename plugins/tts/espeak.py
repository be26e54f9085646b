"""eSpeak NG text-to-speech through ctypes, with the library and data of ``espeakng-loader``.

Theory of operation. The eSpeak NG library keeps its state in process globals and is not
thread-safe, so there is one ``_EspeakEngine`` per process, created lazily, and every call to it
runs on one single-thread ``WorkerPool`` shared by all ``EspeakTTS`` instances (plus a lock, in
case anyone calls it from elsewhere). The library runs in synchronous mode: ``espeak_Synth``
blocks while it calls our synth callback with about 60 ms of samples at a time and the events
inside them. The callback feeds a ``WordChunker``; each chunk it cuts (whole words, at least
``min_chunk_ms`` long) goes straight to the event loop through ``call_soon_threadsafe``, so audio
streams out while eSpeak is still synthesising. When the stream is closed (by the consumer,
e.g. with ``contextlib.aclosing`` around a task that gets cancelled, or by the event loop's
async-generator finaliser once a cancelled task drops it) a flag is set; the callback sees it at
its next buffer (about 1 ms later) and returns 1, which makes eSpeak abandon the text, and the
stream waits for the worker to come back so the engine is idle and usable for the next call.

Audio buffered per call is bounded by ``max_text_chars`` (eSpeak speaks about 15 characters per
second, so the default caps one call at roughly two minutes of audio).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from plugins.contracts import SpeechChunk
from plugins.errors import PluginError, PluginUnavailable
from plugins.language import has_cjk, normalise_language
from plugins.tts.espeak_words import WordChunker
from plugins.workers import WorkerPool

logger = logging.getLogger(__name__)

SAMPLE_RATE = 22_050
"""eSpeak NG's output rate (mono PCM16)."""

DEFAULT_VOICES: dict[str, str] = {"en": "en-us", "zh": "cmn"}
"""eSpeak voice for each base language code."""

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_BUFFER_MS = 60
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_DONT_EXIT = 0x8000
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE = 1
_PARAM_PITCH = 3
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_EVENT_PHONEME = 7


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    """``espeak_EVENT`` from speak_lib.h."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


@dataclass(eq=False)
class _Job:
    """One ``espeak_Synth`` call: the chunker it feeds and the way back to the event loop."""

    text: str
    voices: tuple[str, ...]
    words_per_minute: int
    pitch: int
    chunker: WordChunker
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[SpeechChunk | None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def deliver(self, chunks: list[SpeechChunk]) -> None:
        for chunk in chunks:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, chunk)


class _EspeakEngine:
    """The process-wide eSpeak NG library. Only ever used on the eSpeak worker thread."""

    def __init__(self) -> None:
        try:
            import espeakng_loader

            library = ctypes.CDLL(espeakng_loader.get_library_path())
            data_path = str(espeakng_loader.get_data_path())
        except (ImportError, OSError, RuntimeError) as e:
            raise PluginUnavailable(f"eSpeak NG library could not be loaded: {e}") from e
        library.espeak_Initialize.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        library.espeak_Initialize.restype = ctypes.c_int
        library.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        library.espeak_SetSynthCallback.restype = None
        library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        library.espeak_SetVoiceByName.restype = ctypes.c_int
        library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        library.espeak_SetParameter.restype = ctypes.c_int
        library.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        library.espeak_Synth.restype = ctypes.c_int
        options = _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_DONT_EXIT
        rate = library.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MS, data_path.encode(), options
        )
        if rate != SAMPLE_RATE:
            raise PluginUnavailable(f"eSpeak NG failed to initialise (returned {rate})")
        self._library = library
        self._callback = _SynthCallback(self._on_synth)
        library.espeak_SetSynthCallback(self._callback)
        self._lock = threading.Lock()
        self._voice: str | None = None
        self._missing_voices: set[str] = set()
        self._job: _Job | None = None

    def synthesize(self, job: _Job) -> None:
        """Speak ``job.text``, delivering chunks as they are cut. Blocks until done."""
        if job.cancelled.is_set():
            return
        with self._lock:
            self._select_voice(job.voices)
            self._library.espeak_SetParameter(_PARAM_RATE, job.words_per_minute, 0)
            self._library.espeak_SetParameter(_PARAM_PITCH, job.pitch, 0)
            encoded = job.text.replace("\x00", " ").encode("utf-8")
            self._job = job
            try:
                result = self._library.espeak_Synth(
                    encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
                )
            finally:
                self._job = None
        if job.error is not None:
            raise PluginError(f"eSpeak NG synthesis failed: {job.error!r}") from job.error
        if job.cancelled.is_set():
            return
        if result != 0:
            raise PluginError(f"eSpeak NG synthesis failed with code {result}", retryable=True)
        job.deliver(job.chunker.finish())

    def _select_voice(self, candidates: tuple[str, ...]) -> None:
        for voice in candidates:
            if voice == self._voice:
                return
            if self._library.espeak_SetVoiceByName(voice.encode()) == 0:
                self._voice = voice
                return
            self._voice = None
            if voice not in self._missing_voices:
                self._missing_voices.add(voice)
                logger.warning("eSpeak NG has no voice %r", voice)
        raise PluginUnavailable(f"eSpeak NG has none of the voices {', '.join(candidates)}")

    def _on_synth(
        self,
        wav: ctypes._Pointer[ctypes.c_short],
        num_samples: int,
        events: ctypes._Pointer[_Event],
    ) -> int:
        job = self._job
        if job is None or job.cancelled.is_set():
            return 1
        try:
            if num_samples > 0 and wav:
                samples = np.ctypeslib.as_array(wav, shape=(num_samples,)).astype(np.int16)
                job.chunker.add_audio(samples)
            index = 0
            while (event := events[index]).type != _EVENT_LIST_TERMINATED:
                if event.type == _EVENT_WORD:
                    job.chunker.word_started(event.text_position, event.sample)
                elif event.type == _EVENT_PHONEME:
                    job.chunker.phoneme(event.id.string, event.sample)
                index += 1
            job.deliver(job.chunker.take_ready())
        except BaseException as e:  # an exception must not unwind into C: abort instead
            job.error = e
            return 1
        return 1 if job.cancelled.is_set() else 0


_engine: _EspeakEngine | None = None
_engine_lock = threading.Lock()
_pool: WorkerPool | None = None


def _espeak_pool() -> WorkerPool:
    global _pool
    with _engine_lock:
        if _pool is None:
            _pool = WorkerPool("tts-espeak", max_workers=1)
        return _pool


def _load_engine() -> _EspeakEngine:
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = _EspeakEngine()
        return _engine


def _run_job(job: _Job) -> None:
    _load_engine().synthesize(job)


class EspeakTTS:
    """eSpeak NG speech: English (``en-us``), Mandarin (``cmn``) and any other eSpeak voice.

    ``voice`` in ``stream`` names an eSpeak voice and wins over ``language``; ``language``
    ("en", "zh", "zh-CN", …) picks from ``voices``; with neither, text containing CJK
    ideographs is spoken with ``cmn`` and everything else with ``default_voice``. A ``voice``
    eSpeak does not have (say, another provider's voice name set on a role) is logged once and
    replaced by the voice the language would pick; ``PluginUnavailable`` only when that fails too.
    """

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        *,
        words_per_minute: int = 175,
        pitch: int = 50,
        voices: dict[str, str] | None = None,
        default_voice: str = "en-us",
        min_chunk_ms: float = 200.0,
        max_text_chars: int = 2_000,
    ) -> None:
        """``words_per_minute`` is eSpeak's speaking rate (80–450), ``pitch`` 0–100.
        ``min_chunk_ms`` is the shortest chunk streamed before the end of the text."""
        if not 80 <= words_per_minute <= 450:
            raise ValueError(f"words_per_minute must be 80..450, got {words_per_minute}")
        if not 0 <= pitch <= 100:
            raise ValueError(f"pitch must be 0..100, got {pitch}")
        self.words_per_minute = words_per_minute
        self.pitch = pitch
        self.voices = dict(DEFAULT_VOICES if voices is None else voices)
        self.default_voice = default_voice
        self.min_chunk_ms = min_chunk_ms
        self.max_text_chars = max_text_chars

    async def warm_up(self) -> None:
        """Load and initialise the library now instead of on the first sentence."""
        await _espeak_pool().run(_load_engine)

    def voice_for(self, text: str, *, voice: str | None, language: str | None) -> str:
        """The eSpeak voice ``stream`` would try first."""
        return voice or self._language_voice(text, language)

    def _language_voice(self, text: str, language: str | None) -> str:
        base = normalise_language(language)
        if base is not None:
            return self.voices.get(base, base)
        if has_cjk(text):
            return self.voices.get("zh", "cmn")
        return self.default_voice

    async def stream(
        self, text: str, *, voice: str | None = None, language: str | None = None
    ) -> AsyncIterator[SpeechChunk]:
        """Speak ``text``, streaming chunks of whole words as eSpeak produces them."""
        if len(text) > self.max_text_chars:
            raise PluginError(f"text longer than {self.max_text_chars} characters")
        if not text.strip():
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[SpeechChunk | None] = asyncio.Queue()
        chunker = WordChunker(
            text,
            sample_rate=SAMPLE_RATE,
            min_chunk_samples=int(self.min_chunk_ms * SAMPLE_RATE / 1000),
        )
        job = _Job(
            text=text,
            voices=tuple(
                dict.fromkeys(v for v in (voice, self._language_voice(text, language)) if v)
            ),
            words_per_minute=self.words_per_minute,
            pitch=self.pitch,
            chunker=chunker,
            loop=loop,
            queue=queue,
        )
        worker = asyncio.ensure_future(_espeak_pool().run(_run_job, job))
        worker.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (chunk := await queue.get()) is not None:
                yield chunk
            await worker
        finally:
            job.cancelled.set()
            if not worker.done():
                await asyncio.wait({worker})
            if worker.done() and not worker.cancelled():
                worker.exception()
