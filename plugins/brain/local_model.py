"""The local language model, in-process: one llama.cpp runtime (``xllamacpp``) per process.

Theory of operation
-------------------
Rule 1. One model per process, loaded once (``load``: assemble and verify the GGUF, then start
        llama.cpp; both off the event loop), shared by every session. ``warm_up`` loads it and
        runs one tiny request so the first session does not pay for it.
Rule 2. Requests go through ``FairModelQueue`` (``plugins.brain.model_queue``): round robin
        across sessions, bounded, each with a deadline to start. One worker thread runs them one
        at a time; llama.cpp keeps the previous prompt's KV cache in its slot and recent prompts
        in a RAM cache (``cache_ram_mib``), so a prompt that starts like an earlier one only
        computes its new tail (the prefix cache; see ``plugins.brain.llm`` for the layout).
Rule 3. Streaming: llama.cpp calls back on the worker thread for every chunk; the callback hands
        it to the event loop (``call_soon_threadsafe``) and returns "stop" once the consumer has
        gone. Closing or cancelling the consumer therefore stops generation at the next token
        and frees the model for the next request. A request still waiting is taken out of the
        queue at once. Every generation is bounded by ``max_tokens`` and ``max_generation_s``.
Rule 4. No network listener anyone else can use: llama.cpp's server object always binds an HTTP
        listener, so it is bound to a Unix socket in a fresh private directory (mode 0700) and
        protected by a random API key that is never written anywhere; nothing of ours talks to
        it (requests are passed in-process). It is removed on close.
Rule 5. llama.cpp installs its own SIGINT/SIGTERM handlers when it starts; the Python handlers in
        force before are put back right after, so the server's own shutdown keeps working.
Rule 6. Logs: llama.cpp's own logging is silenced (it could print prompts at high verbosity);
        we log only sizes and timings, never prompt or output text.
Rule 7. Foreground first (SPEC RT-11; the queue's Rules 5–7). ``chat(background=True)`` is
        work nobody is waiting on: it starts only in a pause (``hold``/``release`` mark a
        session mid-turn), and when foreground work arrives it is stopped at its next token
        or prompt batch (llama.cpp reports prompt progress every ``prefill_batch_tokens``)
        and put back in the queue; its text is handed over only once it is complete, so a
        preempted run is simply run again (the prompt cache keeps most of its prefix).
Rule 8. Prompts computed ahead (``prepare``): while a person speaks, their session may have the
        start of its next prompt computed (the system message and the history: the prefix
        cache then holds it when the question comes, which only computes its own tail). It
        is a chance taken, never a debt: it starts only within ``PREPARE_START_S`` and when
        no one's request waits, another session's request stops it at its next token or
        prompt batch (never put back), it is not counted among the session's requests
        (``calls``) or the model's timings, and it never loads the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from plugins.brain.model_files import QWEN_05B, ModelFile, ensure_model_file, missing_packages
from plugins.brain.model_queue import (
    BACKGROUND_WAIT_S,
    BackgroundPolicy,
    FairModelQueue,
    ModelQueueFull,
    Ticket,
    model_run_started,
    model_run_stopped,
)
from plugins.errors import PluginTimeout, PluginUnavailable, ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalModelSettings:
    context_tokens: int = 4096
    """The model's context window (history is budgeted to fit it)."""
    threads: int = 2
    cache_ram_mib: int = 256
    """llama.cpp's RAM cache of recent prompts (other sessions' prefixes), in MiB."""
    max_waiting: int = 32
    max_per_lane: int = 2
    start_deadline_s: float = 20.0
    """A request that cannot start within this time fails (``PluginTimeout``)."""
    max_generation_s: float = 30.0
    cache_dir: Path | None = None
    prefill_batch_tokens: int = 64
    """llama.cpp's prompt batch: a background request can be stopped after each one (Rule 7);
    smaller is quicker to preempt and slower to prefill (2026-12-05: 32 tokens cut the
    foreground wait p99 to ~110 ms but delayed every answer's first audio by 80–170 ms)."""
    background: BackgroundPolicy = field(default_factory=BackgroundPolicy)
    max_background_waiting: int = 256
    """Background requests waiting for a pause at most (their own room: Rule 2 of the queue)."""
    background_start_deadline_s: float = BACKGROUND_WAIT_S
    """A background request that found no pause to start in for this long fails (its owner
    retries after a later turn)."""


class ChatBackend(Protocol):
    """What the worker needs of llama.cpp: one blocking chat completion with a chunk callback
    (returning True stops it)."""

    def chat(self, payload: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Timings:
    """llama.cpp's figures for one request: prompt tokens computed and taken from the cache,
    prompt time, generated tokens and their rate."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    tokens_per_s: float = 0.0


@dataclass(slots=True)
class Generation:
    """What one request produced besides text: its timings and where its time went."""

    lane: str
    queue_wait_s: float | None = None
    background: bool = False
    busy_s: float = 0.0
    """Time the request held the model (every run of it, a preempted one's included)."""
    first_token_s: float | None = None  # from start of running to the first text
    timings: Timings | None = None
    stopped: bool = False
    first_top_logprobs: dict[str, float] | None = None
    """The first generated token's alternatives and their log-probabilities, when the payload
    asked for ``logprobs`` / ``top_logprobs`` (a judge reads them: ``plugins.brain.relevance``)."""


@dataclass
class ModelStats:
    """Recent figures of the process's model (bounded samples)."""

    queue_waits_ms: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    first_token_ms: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4096))
    """(ms from start to first token, prompt tokens taken from the cache)."""
    tokens_per_s: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    requests: int = 0
    background_started: int = 0
    """Background requests submitted (each is counted once, however often it was preempted)."""
    background_completed: int = 0
    background_failed: int = 0
    background_abandoned: int = 0
    """Background requests whose owner stopped waiting (its own bound, a cancelled task)."""
    background_preempted: int = 0
    background_busy_s: float = 0.0
    foreground_busy_s: float = 0.0
    stopped_early: int = 0
    prepares: int = 0
    """Prompts computed ahead to their end (Rule 8)."""
    prepares_stopped: int = 0
    """… stopped for someone's request (or failed)."""
    prepares_skipped: int = 0
    """… not started: someone's request was waiting."""
    prepare_busy_s: float = 0.0
    expired: int = 0
    rejected: int = 0
    """Requests refused because the queue was full (``model_busy``)."""

    def count_background(self, outcome: str) -> None:
        if outcome == "completed":
            self.background_completed += 1
        elif outcome == "failed":
            self.background_failed += 1
        else:
            self.background_abandoned += 1


_END = object()
_STARTED = object()  # the worker took the request: its owner's run bound starts (queue Rule 8)
_STOPPED = object()  # stopped for a person and put back: the bound waits again (queue Rule 8)


class _Job:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        payload: dict[str, Any],
        lane: str,
        *,
        background: bool = False,
    ):
        self.loop = loop
        self.payload = payload
        self.items: asyncio.Queue[Any] = asyncio.Queue()
        self.gone = threading.Event()  # the consumer stopped listening
        self.generation = Generation(lane, background=background)
        self.expired = False
        self.background = background
        self.prepare = False
        """A prompt computed ahead (Rule 8): no text wanted, stopped for anyone else's."""

    def push(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.gone.set()

    def expire(self) -> None:
        self.expired = True
        self.push(PluginTimeout("the local model was busy past this request's deadline"))
        self.push(_END)


_CALL_LANES = 4096
PREPARE_START_S = 0.5
"""A prompt computed ahead that could not start within this is dropped (Rule 8)."""


class LocalModel:
    """The process's local language model (see the module's rules)."""

    def __init__(
        self,
        settings: LocalModelSettings | None = None,
        *,
        model: ModelFile = QWEN_05B,
        backend_factory: Callable[[Path, LocalModelSettings], ChatBackend] | None = None,
    ) -> None:
        self.settings = settings or LocalModelSettings()
        self.model = model
        self.stats = ModelStats()
        self._calls: dict[str, int] = {}
        """Requests per lane (the most recent ``_CALL_LANES`` lanes): ``calls``."""
        self._backend_factory = backend_factory or _xllamacpp_backend
        self._backend: ChatBackend | None = None
        self._queue: FairModelQueue[_Job] = FairModelQueue(
            max_waiting=self.settings.max_waiting,
            max_per_lane=self.settings.max_per_lane,
            background=self.settings.background,
            max_background_waiting=self.settings.max_background_waiting,
        )
        self._queue.on_foreground = self._preempt_background
        self._running_background = False
        self._running_prepare: str | None = None
        """The lane whose prompt is being computed ahead now (Rule 8)."""
        self._preempt = threading.Event()
        self.observers: list[Callable[[Generation], None]] = []
        """Called with each finished request's ``Generation`` (on the worker thread): the
        process's metrics (``runtime/metrics.py``). Sizes and timings only, never text."""
        self._load_lock = asyncio.Lock()
        self._worker: threading.Thread | None = None
        self._warm = False
        self._closed = False

    @staticmethod
    def unavailable_reason(model: ModelFile = QWEN_05B) -> str | None:
        """Why this model cannot run here (missing packages), or None."""
        missing = missing_packages(model)
        if missing:
            return f"packages not installed: {', '.join(missing)}"
        return None

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    @property
    def waiting(self) -> int:
        """Requests waiting in the queue for the model now."""
        return len(self._queue)

    @property
    def queue(self) -> FairModelQueue[_Job]:
        return self._queue

    def hold(self, lane: str) -> None:
        """``lane``'s person is mid-turn: background work yields and none starts (Rule 7)."""
        self._queue.hold(lane, time.monotonic())

    def release(self, lane: str) -> None:
        """``lane``'s answer is generated (or its turn ended otherwise)."""
        self._queue.release(lane, time.monotonic())

    def _preempt_background(self) -> None:
        if self._running_background:
            self._preempt.set()

    async def load(self) -> None:
        async with self._load_lock:
            if self._closed:
                raise PluginUnavailable("the local model was shut down")
            if self._backend is not None:
                return
            saved = _python_signal_handlers()
            started = time.perf_counter()
            self._backend = await asyncio.to_thread(self._open_backend)
            _restore_signal_handlers(saved)
            log.info(
                "local model %s loaded in %.1f s", self.model.name, time.perf_counter() - started
            )
            self._worker = threading.Thread(target=self._work, name="local-llm", daemon=True)
            self._worker.start()

    def _open_backend(self) -> ChatBackend:
        path = ensure_model_file(self.settings.cache_dir, self.model)
        return self._backend_factory(path, self.settings)

    async def warm_up(self) -> None:
        """Load the model and run one tiny request (llama.cpp's first call sets up its graphs)."""
        await self.load()
        if self._warm:
            return
        async for _ in self.chat(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}, lane="warm-up"
        ):
            pass
        self._warm = True

    async def prepare(self, messages: list[dict[str, str]], *, lane: str) -> None:
        """Have the start of ``lane``'s next prompt computed now, if the model is free (Rule 8):
        ``messages`` as the prompt will begin (its last message may be left empty)."""
        if not self.loaded or self._closed:
            return
        payload = {"messages": messages, "max_tokens": 1, "temperature": 0}
        pieces = self.chat(payload, lane=lane, start_deadline_s=PREPARE_START_S, prepare=True)
        try:
            async for _ in pieces:
                pass
        except (PluginTimeout, ModelQueueFull, PluginUnavailable):
            self.stats.prepares_skipped += 1

    async def chat(
        self,
        payload: dict[str, Any],
        *,
        lane: str,
        generation: Generation | None = None,
        start_deadline_s: float | None = None,
        background: bool = False,
        prepare: bool = False,
    ) -> AsyncGenerator[str, None]:
        """Stream the text of one chat completion (OpenAI chat-completions fields in
        ``payload``; ``stream`` is set here). ``generation`` receives its timings. Close the
        generator to stop generating (Rule 3). ``background``: work nobody waits on, run in
        the pauses and preempted by foreground work; its text comes in one piece (Rule 7)."""
        await self.load()
        if not prepare:
            self._calls[lane] = self._calls.pop(lane, 0) + 1
            while len(self._calls) > _CALL_LANES:
                del self._calls[next(iter(self._calls))]
        job = _Job(
            asyncio.get_running_loop(), {**payload, "stream": True}, lane, background=background
        )
        job.prepare = prepare
        if background or prepare:
            job.payload["return_progress"] = True  # a progress chunk per prompt batch
        if generation is not None:
            generation.background = background
            job.generation = generation
        now = time.monotonic()
        default = (
            self.settings.background_start_deadline_s
            if background
            else self.settings.start_deadline_s
        )
        deadline = now + (default if start_deadline_s is None else start_deadline_s)
        try:
            ticket = self._queue.submit(
                lane, job, now=now, deadline=deadline, on_expire=job.expire, background=background
            )
        except ModelQueueFull:
            if not prepare:
                self.stats.rejected += 1
            raise
        if background:
            self.stats.background_started += 1
        elif not prepare and self._running_prepare not in (None, lane):
            self._preempt.set()  # someone's request: a prompt computed ahead gives way (Rule 8)
        outcome = "abandoned"  # the consumer went away (its own bound, a cancelled task)
        try:
            while True:
                if ticket.state == "waiting" and job.items.empty():
                    # Rule 3 of the queue, kept from here too: a deadline is a deadline even
                    # while the model is busy with a long generation.
                    try:
                        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                            item = await job.items.get()
                    except TimeoutError:
                        if self._queue.cancel(ticket):
                            self.stats.expired += not prepare
                            outcome = "failed"
                            raise PluginTimeout(
                                "the local model was busy past this request's deadline"
                            ) from None
                        continue
                else:
                    item = await job.items.get()
                if item is _END:
                    outcome = "completed"
                    return
                if item is _STARTED:
                    model_run_started()
                    continue
                if item is _STOPPED:
                    model_run_stopped()
                    continue
                if isinstance(item, BaseException):
                    if job.expired and not prepare:
                        self.stats.expired += 1
                    outcome = "failed"
                    raise item
                yield item
        finally:
            job.gone.set()
            self._queue.cancel(ticket)
            if background:
                self.stats.count_background(outcome)

    def calls(self, lane: str) -> int:
        """How many requests ``lane`` made so far (a turn that made none ran no model)."""
        return self._calls.get(lane, 0)

    async def aclose(self) -> None:
        self._closed = True
        for ticket in self._queue.close():
            ticket.item.push(PluginUnavailable("the local model was shut down"))
            ticket.item.push(_END)
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.to_thread(worker.join, 60.0)
        backend, self._backend = self._backend, None
        if backend is not None:
            await asyncio.to_thread(backend.close)

    # ------------------------------------------------------------ worker thread

    def _work(self) -> None:
        while True:
            ticket = self._queue.wait_and_take(time.monotonic, 0.5)
            if ticket is None:
                if self._queue.closed:
                    return
                continue
            self._run(ticket)

    def _run(self, ticket: Ticket[_Job]) -> None:
        job = ticket.item
        generation = job.generation
        generation.queue_wait_s = ticket.queue_wait
        if job.prepare:
            self._run_ahead(job)
            job.push(_END)
            return
        if not job.background:
            self.stats.queue_waits_ms.append((ticket.queue_wait or 0.0) * 1000)
        self.stats.requests += 1
        started = time.monotonic()
        stop_at = started + self.settings.max_generation_s
        backend = self._backend
        if backend is None or job.gone.is_set():
            job.push(_END)
            return
        job.push(_STARTED)
        text: list[str] = []  # a background request's output, handed over whole (Rule 7)
        preempted = False
        self._preempt.clear()
        self._running_background = job.background
        if job.background and (self._queue.foreground_waiting or self._queue.held(started)):
            self._preempt.set()  # foreground work came between the take and now

        wants_logprobs = bool(job.payload.get("logprobs"))

        def on_chunk(chunk: dict[str, Any]) -> bool:
            nonlocal preempted
            if job.gone.is_set():
                generation.stopped = True
                return True
            if job.background and self._preempt.is_set():
                preempted = True
                return True
            if "prompt_progress" in chunk and not chunk.get("choices"):
                return False
            error = _error_of(chunk)
            if error is not None:
                job.push(ProviderError(f"local model: {error}", retryable=False))
                return True
            for choice in chunk.get("choices") or ():
                if wants_logprobs and generation.first_top_logprobs is None:
                    generation.first_top_logprobs = _top_logprobs(choice)
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    if generation.first_token_s is None:
                        generation.first_token_s = time.monotonic() - started
                    if job.background:
                        text.append(piece)
                    else:
                        job.push(piece)
            timings = chunk.get("timings")
            if isinstance(timings, dict):
                generation.timings = _timings(timings)
            if time.monotonic() > stop_at:
                job.push(PluginTimeout("the local model generated for too long"))
                generation.stopped = True
                return True
            return False

        failed = False
        try:
            backend.chat(job.payload, on_chunk)
        except Exception as e:  # the runtime's errors reach the consumer as plugin errors
            failed = True
            log.warning("local model request failed: %s", type(e).__name__)
            job.push(ProviderError(f"local model failed: {type(e).__name__}", retryable=True))
        self._running_background = False
        ended = time.monotonic()
        self._queue.ran(started, ended, background=job.background)
        generation.busy_s += ended - started
        if job.background:
            self.stats.background_busy_s += ended - started
        else:
            self.stats.foreground_busy_s += ended - started
        if preempted and not failed and not job.gone.is_set():
            self.stats.background_preempted += 1
            generation.first_token_s = None
            if self._queue.requeue(ticket):
                job.push(_STOPPED)
                return  # it runs again from the start in the next pause
            job.push(PluginUnavailable("the local model was shut down"))
        self._record(generation)
        if text and not failed:
            job.push("".join(text))
        job.push(_END)

    def _run_ahead(self, job: _Job) -> None:
        """Rule 8 on the worker: compute a prompt's start unless someone's request waits or
        comes."""
        backend = self._backend
        if backend is None or job.gone.is_set():
            return
        self._preempt.clear()
        self._running_prepare = job.generation.lane
        stopped = False

        def on_chunk(chunk: dict[str, Any]) -> bool:
            nonlocal stopped
            stopped = self._preempt.is_set() or job.gone.is_set()
            return stopped

        started = time.monotonic()
        try:
            if self._queue.foreground_waiting:  # came between the take and now
                self.stats.prepares_skipped += 1
                return
            backend.chat(job.payload, on_chunk)
        except Exception as e:  # a chance taken, never a failure of anyone's turn
            log.info("a prompt computed ahead failed: %s", type(e).__name__)
            stopped = True
        finally:
            self._running_prepare = None
            busy = time.monotonic() - started
            self.stats.prepare_busy_s += busy
            job.generation.busy_s += busy
        if stopped:
            self.stats.prepares_stopped += 1
        else:
            self.stats.prepares += 1

    def _record(self, generation: Generation) -> None:
        if generation.stopped:
            self.stats.stopped_early += 1
        timings = generation.timings
        if generation.first_token_s is not None:
            cached = timings.cached_tokens if timings else 0
            self.stats.first_token_ms.append((generation.first_token_s * 1000, cached))
        if timings is not None and timings.generated_tokens >= 8:
            self.stats.tokens_per_s.append(timings.tokens_per_s)
        for observe in self.observers:
            try:
                observe(generation)
            except Exception:  # a metric must never stop the model's worker
                log.exception("local model observer failed")


def local_model_of(brain: object) -> LocalModel | None:
    """The process's local language model behind ``brain`` (the default brain wraps it), or
    None for a brain without one (a provider, the rules, a test's fake)."""
    for candidate in (brain, getattr(brain, "model", None)):
        if isinstance(candidate, LocalModel):
            return candidate
    return None


def _error_of(chunk: dict[str, Any]) -> str | None:
    if "choices" in chunk:
        return None
    error = chunk.get("error", chunk if "message" in chunk else None)
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("type") or error.get("code") or "error")
    return "error"


def _timings(raw: dict[str, Any]) -> Timings:
    def number(key: str) -> float:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    return Timings(
        prompt_tokens=int(number("prompt_n")),
        cached_tokens=int(number("cache_n")),
        prompt_ms=number("prompt_ms"),
        generated_tokens=int(number("predicted_n")),
        tokens_per_s=number("predicted_per_second"),
    )


def _python_signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signal_handlers(saved: dict[int, Any]) -> None:
    for sig, handler in saved.items():
        if handler is not None:
            signal.signal(sig, handler)


class _XllamacppBackend:
    def __init__(self, path: Path, settings: LocalModelSettings) -> None:
        try:
            import xllamacpp
        except ImportError as e:
            raise PluginUnavailable("the xllamacpp runtime is not installed") from e
        self._socket_dir = Path(tempfile.mkdtemp(prefix="openrealtime-llm-"))
        os.chmod(self._socket_dir, 0o700)
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = settings.context_tokens
        params.n_parallel = 1
        params.cpuparams.n_threads = settings.threads
        params.cpuparams_batch.n_threads = settings.threads
        params.cache_ram_mib = settings.cache_ram_mib
        params.n_batch = params.n_ubatch = settings.prefill_batch_tokens
        params.verbosity = -1
        params.hostnames = [str(self._socket_dir / "llm.sock")]
        params.api_keys = [secrets.token_urlsafe(32)]
        try:
            self._server = xllamacpp.Server(params)
        except Exception as e:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            raise PluginUnavailable(f"the local model did not start: {e}") from e

    def chat(self, payload: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        def callback(chunk: Any) -> bool:
            if isinstance(chunk, str | bytes):
                try:
                    chunk = json.loads(chunk)
                except ValueError:
                    return False
            return on_chunk(chunk) if isinstance(chunk, dict) else False

        self._server.handle_chat_completions(payload, callback)

    def close(self) -> None:
        del self._server
        shutil.rmtree(self._socket_dir, ignore_errors=True)


def _top_logprobs(choice: dict[str, Any]) -> dict[str, float] | None:
    """The first token's ``top_logprobs`` of a streamed choice as {token: logprob}, if any."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    top = content[0].get("top_logprobs") or ()
    return {str(t.get("token", "")): float(t.get("logprob", -1e9)) for t in top}


def _xllamacpp_backend(path: Path, settings: LocalModelSettings) -> ChatBackend:
    return _XllamacppBackend(path, settings)
