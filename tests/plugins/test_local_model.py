"""LocalModel with a scripted fake llama.cpp backend, and the model file's assembly.

The backend runs in the model's worker thread. Its script is a list of steps: a string is a
streamed token, a dict is a raw chunk, an exception is raised, a callable is run (to wait on a
gate or move the virtual clock). The module's clock (``time.monotonic``) is replaced with a
virtual one, so start deadlines, queue waits and ``max_generation_s`` are exercised without
sleeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import plugins.brain.local_model as local_model_module
from plugins.brain import model_files
from plugins.brain.local_model import (
    Generation,
    LocalModel,
    LocalModelSettings,
    Timings,
)
from plugins.brain.model_files import ModelFile, ensure_model_file
from plugins.brain.model_queue import (
    BACKGROUND_WAIT_S,
    BackgroundPolicy,
    ModelQueueFull,
    bound_runs,
)
from plugins.errors import PluginTimeout, PluginUnavailable, ProviderError

GATE_TIMEOUT = 5.0  # a gate never released fails the test instead of hanging it
TIMINGS = {
    "prompt_n": 120,
    "cache_n": 100,
    "prompt_ms": 45.5,
    "predicted_n": 9,
    "predicted_per_second": 21.5,
}


class VirtualClock:
    """``time.monotonic`` for the model module; moved by tests and backend scripts."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()
        self.perf_counter = time.perf_counter

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


def token(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"content": text}}]}


def timings_chunk(**overrides: Any) -> dict[str, Any]:
    return {"choices": [{"delta": {}}], "timings": {**TIMINGS, **overrides}}


Step = str | dict[str, Any] | BaseException | Callable[[], None]


class FakeBackend:
    """A ChatBackend that plays one script per request (the last script repeats)."""

    def __init__(self, *scripts: list[Step]) -> None:
        self.scripts = list(scripts) or [["ok", timings_chunk()]]
        self.payloads: list[dict[str, Any]] = []
        self.sent: list[list[str]] = []  # tokens handed to on_chunk, per request
        self.stopped: list[bool] = []  # on_chunk asked to stop, per request
        self.gates: list[threading.Event] = []
        self.closed = False
        self.running = threading.Event()  # set while a request is in chat()

    def gate(self) -> Callable[[], None]:
        event = threading.Event()
        self.gates.append(event)

        def wait() -> None:
            assert event.wait(GATE_TIMEOUT), "a gate of the fake backend was never opened"

        wait.event = event  # type: ignore[attr-defined]
        return wait

    def release_all(self) -> None:
        for event in self.gates:
            event.set()

    def chat(self, payload: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        index = len(self.payloads)
        self.payloads.append(payload)
        self.sent.append([])
        self.stopped.append(False)
        script = self.scripts[min(index, len(self.scripts) - 1)]
        self.running.set()
        try:
            for step in script:
                if isinstance(step, BaseException):
                    raise step
                if callable(step):
                    step()
                    continue
                chunk = token(step) if isinstance(step, str) else step
                if isinstance(step, str):
                    self.sent[index].append(step)
                if on_chunk(chunk):
                    self.stopped[index] = True
                    return
        finally:
            self.running.clear()

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    virtual = VirtualClock()
    monkeypatch.setattr(local_model_module, "time", virtual)
    return virtual


@pytest.fixture(autouse=True)
def no_model_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        local_model_module, "ensure_model_file", lambda cache_dir, model: Path("/fake/model.gguf")
    )


class Harness:
    def __init__(self) -> None:
        self.backend = FakeBackend()
        self.factory_calls: list[tuple[Path, LocalModelSettings]] = []
        self.models: list[LocalModel] = []

    def model(self, backend: FakeBackend, **settings: Any) -> LocalModel:
        self.backend = backend

        def factory(path: Path, model_settings: LocalModelSettings) -> FakeBackend:
            self.factory_calls.append((path, model_settings))
            return backend

        model = LocalModel(LocalModelSettings(**settings), backend_factory=factory)
        self.models.append(model)
        return model


@pytest.fixture
async def harness(clock: VirtualClock) -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    h.backend.release_all()
    for model in h.models:
        await asyncio.wait_for(model.aclose(), GATE_TIMEOUT)


def ask(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 16, **extra}


async def collect(stream: AsyncIterator[str]) -> list[str]:
    return [piece async for piece in stream]


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the worker thread catch up (it hands results over through the loop)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- streaming


async def test_text_streams_in_order_and_the_payload_is_sent_as_a_stream(
    harness: Harness,
) -> None:
    backend = FakeBackend(["Hel", "lo", " there", timings_chunk()])
    model = harness.model(backend)
    payload = ask()

    assert await collect(model.chat(payload, lane="A")) == ["Hel", "lo", " there"]

    assert backend.payloads == [{**payload, "stream": True}]
    assert "stream" not in payload
    assert [path for path, _ in harness.factory_calls] == [Path("/fake/model.gguf")]
    assert model.loaded and model.stats.requests == 1


async def test_the_model_is_loaded_once_for_many_requests(harness: Harness) -> None:
    model = harness.model(FakeBackend(["x"]))

    for lane in ("A", "B", "A"):
        assert await collect(model.chat(ask(), lane=lane)) == ["x"]

    assert len(harness.factory_calls) == 1


async def test_generation_timings_are_filled_from_the_timings_chunk(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend([lambda: clock.advance(0.3), "a", "b", timings_chunk()])
    model = harness.model(backend)
    generation = Generation(lane="A")

    await collect(model.chat(ask(), lane="A", generation=generation))

    assert generation.timings == Timings(
        prompt_tokens=120, cached_tokens=100, prompt_ms=45.5, generated_tokens=9, tokens_per_s=21.5
    )
    assert generation.first_token_s == pytest.approx(0.3)
    assert generation.queue_wait_s == 0.0
    assert not generation.stopped
    assert list(model.stats.first_token_ms) == [(pytest.approx(300.0), 100)]
    assert list(model.stats.tokens_per_s) == [21.5]


async def test_short_generations_do_not_count_towards_the_token_rate(harness: Harness) -> None:
    model = harness.model(FakeBackend(["a", timings_chunk(predicted_n=3)]))

    await collect(model.chat(ask(), lane="A"))

    assert list(model.stats.tokens_per_s) == []


async def test_closing_the_consumer_stops_generation_and_frees_the_model(
    harness: Harness,
) -> None:
    backend = FakeBackend()
    after_close = backend.gate()
    backend.scripts = [
        ["one", "two", after_close, "three", "four", timings_chunk()],
        ["next", timings_chunk()],
    ]
    model = harness.model(backend)
    generation = Generation(lane="A")

    stream = model.chat(ask(), lane="A", generation=generation)
    assert [await anext(stream), await anext(stream)] == ["one", "two"]
    await stream.aclose()
    after_close.event.set()  # type: ignore[attr-defined]

    assert await collect(model.chat(ask("again"), lane="B")) == ["next"]
    assert backend.sent[0] == ["one", "two", "three"]  # "three" was answered with "stop"
    assert backend.stopped[0] is True
    assert generation.stopped
    assert model.stats.stopped_early == 1


async def test_a_request_closed_while_waiting_never_reaches_the_backend(
    harness: Harness,
) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["first", hold, timings_chunk()], ["third"]]
    model = harness.model(backend)

    first = model.chat(ask("1"), lane="A")
    assert await anext(first) == "first"
    waiting = model.chat(ask("2"), lane="B")
    pending = asyncio.create_task(anext(waiting))
    await until(lambda: len(model._queue) == 1, "the second request to queue")
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await waiting.aclose()
    assert len(model._queue) == 0

    hold.event.set()  # type: ignore[attr-defined]
    assert await collect(first) == []
    assert await collect(model.chat(ask("3"), lane="C")) == ["third"]
    assert [p["messages"][0]["content"] for p in backend.payloads] == ["1", "3"]


# ---------------------------------------------------------------- the queue in front


async def test_a_second_lane_waits_for_the_first_and_its_wait_is_recorded(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold, "a2", timings_chunk()], ["b1", timings_chunk()]]
    model = harness.model(backend)
    second_generation = Generation(lane="B")

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    second = asyncio.create_task(
        collect(model.chat(ask("B"), lane="B", generation=second_generation))
    )
    await until(lambda: len(model._queue) == 1, "B to queue")
    clock.advance(2.5)
    assert len(backend.payloads) == 1  # B has not started while A runs

    hold.event.set()  # type: ignore[attr-defined]
    assert await collect(first) == ["a2"]
    assert await second == ["b1"]

    assert list(model.stats.queue_waits_ms) == [0.0, 2500.0]
    assert second_generation.queue_wait_s == 2.5


async def test_a_request_whose_start_deadline_passes_while_the_model_is_busy_times_out(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold, timings_chunk()], ["never"]]
    model = harness.model(backend)

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    late = asyncio.create_task(collect(model.chat(ask("B"), lane="B", start_deadline_s=1.0)))
    await until(lambda: len(model._queue) == 1, "B to queue")
    clock.advance(5.0)
    hold.event.set()  # type: ignore[attr-defined]

    with pytest.raises(PluginTimeout) as caught:
        await late
    assert caught.value.retryable
    assert await collect(first) == []
    assert len(backend.payloads) == 1
    await until(lambda: model.stats.expired == 1, "the expiry to be counted")


async def test_a_waiting_request_times_out_at_its_deadline_while_a_long_generation_runs(
    harness: Harness,
) -> None:
    # chat() bounds its own wait too: the request fails without waiting for the model to be
    # free. That wait runs on the loop's clock (50 real ms here), not the virtual one.
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold, "a2"], ["never"]]
    model = harness.model(backend)

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    with pytest.raises(PluginTimeout):
        await collect(model.chat(ask("B"), lane="B", start_deadline_s=0.05))

    assert backend.running.is_set()  # A is still generating
    assert len(model._queue) == 0
    assert model.stats.expired == 1
    hold.event.set()  # type: ignore[attr-defined]
    assert await collect(first) == ["a2"]
    assert len(backend.payloads) == 1


async def test_every_expired_request_is_counted(harness: Harness, clock: VirtualClock) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold], ["d"]]  # B and C never reach the backend
    model = harness.model(backend)

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    with pytest.raises(PluginTimeout):  # expired by chat() while A runs
        await collect(model.chat(ask("B"), lane="B", start_deadline_s=0.05))
    late = asyncio.create_task(collect(model.chat(ask("C"), lane="C", start_deadline_s=1.0)))
    await until(lambda: len(model._queue) == 1, "C to queue")
    clock.advance(5.0)
    hold.event.set()  # type: ignore[attr-defined]
    with pytest.raises(PluginTimeout):  # expired by the queue when A is done
        await late
    await collect(first)
    # The worker runs D only after it has handled C's expiry: the count is final by then.
    assert await collect(model.chat(ask("D"), lane="D")) == ["d"]

    assert model.stats.expired == 2


async def test_the_settings_start_deadline_applies_when_none_is_given(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold], ["never"]]
    model = harness.model(backend, start_deadline_s=3.0)

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    late = asyncio.create_task(collect(model.chat(ask("B"), lane="B")))
    await until(lambda: len(model._queue) == 1, "B to queue")
    clock.advance(3.5)
    hold.event.set()  # type: ignore[attr-defined]

    with pytest.raises(PluginTimeout):
        await late
    await collect(first)


async def test_a_lane_over_its_bound_is_refused_with_model_busy(harness: Harness) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold], ["x"]]
    model = harness.model(backend, max_per_lane=1)

    first = model.chat(ask(), lane="A")
    assert await anext(first) == "a1"
    queued = asyncio.create_task(collect(model.chat(ask(), lane="A")))
    await until(lambda: len(model._queue) == 1, "the second request to queue")

    with pytest.raises(ModelQueueFull) as caught:
        await collect(model.chat(ask(), lane="A"))
    assert caught.value.retryable

    hold.event.set()  # type: ignore[attr-defined]
    await collect(first)
    assert await queued == ["x"]


# ---------------------------------------------------------------- faults


async def test_a_backend_that_raises_gives_a_provider_error_and_the_model_keeps_serving(
    harness: Harness,
) -> None:
    backend = FakeBackend(["partial", RuntimeError("llama.cpp exploded")], ["fine"])
    model = harness.model(backend)

    pieces: list[str] = []
    with pytest.raises(ProviderError) as caught:
        async for piece in model.chat(ask(), lane="A"):
            pieces.append(piece)

    assert pieces == ["partial"]
    assert caught.value.retryable
    assert "RuntimeError" in str(caught.value)
    assert "exploded" not in str(caught.value)  # the runtime's message is not passed on
    assert await collect(model.chat(ask(), lane="A")) == ["fine"]


async def test_an_error_chunk_becomes_a_provider_error(harness: Harness) -> None:
    error = {"error": {"code": 500, "message": "oops", "type": "server_error"}}
    backend = FakeBackend(["a", error, "never sent"], ["fine"])
    model = harness.model(backend)

    with pytest.raises(ProviderError) as caught:
        await collect(model.chat(ask(), lane="A"))

    assert "server_error" in str(caught.value)
    assert not caught.value.retryable
    # The next request runs after the worker has finished this one: only then is its account
    # of the stop complete (the consumer may see the error first).
    assert await collect(model.chat(ask(), lane="A")) == ["fine"]
    assert backend.stopped[0] and backend.sent[0] == ["a"]


async def test_a_bare_error_chunk_with_a_message_is_an_error_too(harness: Harness) -> None:
    model = harness.model(FakeBackend([{"message": "context too long", "code": 400}]))

    with pytest.raises(ProviderError):
        await collect(model.chat(ask(), lane="A"))


async def test_max_generation_s_stops_a_runaway_generation(
    harness: Harness, clock: VirtualClock
) -> None:
    def tick() -> None:
        clock.advance(0.4)

    runaway: list[Step] = [step for i in range(100) for step in (tick, f"t{i}")]
    backend = FakeBackend(runaway, ["fine"])
    model = harness.model(backend, max_generation_s=1.0)
    generation = Generation(lane="A")

    pieces: list[str] = []
    with pytest.raises(PluginTimeout):
        async for piece in model.chat(ask(), lane="A", generation=generation):
            pieces.append(piece)

    # 0.4 s and 0.8 s are within the bound; the token at 1.2 s is the last one sent.
    assert pieces == ["t0", "t1", "t2"]
    # The next request runs only once the worker is done with the first one.
    assert await collect(model.chat(ask(), lane="A")) == ["fine"]
    assert backend.sent[0] == ["t0", "t1", "t2"] and backend.stopped[0]
    assert generation.stopped


async def test_aclose_fails_waiting_requests_with_plugin_unavailable(harness: Harness) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["a1", hold, "a2"], ["never"]]
    model = harness.model(backend)

    first = model.chat(ask("A"), lane="A")
    assert await anext(first) == "a1"
    waiting = asyncio.create_task(collect(model.chat(ask("B"), lane="B")))
    await until(lambda: len(model._queue) == 1, "B to queue")

    closing = asyncio.create_task(model.aclose())
    with pytest.raises(PluginUnavailable):
        await waiting

    hold.event.set()  # type: ignore[attr-defined]
    assert await collect(first) == ["a2"]  # the running request finishes
    await asyncio.wait_for(closing, GATE_TIMEOUT)
    assert backend.closed and not model.loaded
    assert len(backend.payloads) == 1


async def test_warm_up_runs_one_tiny_request_once(harness: Harness) -> None:
    backend = FakeBackend(["x"])
    model = harness.model(backend)

    await model.warm_up()
    await model.warm_up()

    assert len(backend.payloads) == 1
    assert backend.payloads[0]["max_tokens"] == 1


async def test_a_request_after_aclose_does_not_load_the_model_again(harness: Harness) -> None:
    backend = FakeBackend(["x"])
    model = harness.model(backend)
    assert await collect(model.chat(ask(), lane="A")) == ["x"]
    await model.aclose()
    backend.closed = False

    with pytest.raises((PluginUnavailable, ModelQueueFull)):
        await collect(model.chat(ask(), lane="A"))

    assert len(harness.factory_calls) == 1
    assert not model.loaded


# ---------------------------------------------------------------- the model file


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelFile]:
    """A two-part model whose parts are files served by fake part modules."""
    contents = [b"GGUF-part-one|", b"part-two-end"]
    names = []
    for i, data in enumerate(contents, start=1):
        path = tmp_path / "wheels" / f"part{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        name = f"fake_model_part{i}_for_tests"
        module = types.ModuleType(name)
        module.get_part_path = lambda path=path: str(path)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
        names.append(name)
    whole = b"".join(contents)
    yield ModelFile(
        name="tiny test model",
        filename="tiny.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        part_modules=tuple(names),
        licence="test",
    )


def test_ensure_model_file_writes_the_concatenated_parts(parts: ModelFile, tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    path = ensure_model_file(cache, parts)

    assert path == cache / "tiny.gguf"
    assert path.read_bytes() == b"GGUF-part-one|part-two-end"
    assert [p.name for p in cache.iterdir()] == ["tiny.gguf"]  # no temporary file left


def test_a_wrong_pinned_sha256_raises_and_leaves_no_file(parts: ModelFile, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pinned_elsewhere = ModelFile(
        name=parts.name,
        filename=parts.filename,
        size=parts.size,
        sha256="0" * 64,
        part_modules=parts.part_modules,
        licence=parts.licence,
    )

    with pytest.raises(PluginUnavailable, match="SHA-256"):
        ensure_model_file(cache, pinned_elsewhere)

    assert list(cache.iterdir()) == []


def test_a_corrupted_cached_file_is_assembled_again(parts: ModelFile, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / parts.filename
    target.write_bytes(b"X" * parts.size)  # right size, wrong bytes

    path = ensure_model_file(cache, parts)

    assert path.read_bytes() == b"GGUF-part-one|part-two-end"


def test_a_cached_file_of_the_wrong_size_is_assembled_again(
    parts: ModelFile, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / parts.filename).write_bytes(b"truncated")

    assert ensure_model_file(cache, parts).read_bytes() == b"GGUF-part-one|part-two-end"


def test_a_good_cached_file_is_reused_without_reading_the_parts(
    parts: ModelFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = ensure_model_file(cache, parts)
    mtime = first.stat().st_mtime_ns

    def no_parts(model: ModelFile) -> list[Path]:
        raise AssertionError("the parts were read although the cached file is good")

    monkeypatch.setattr(model_files, "part_paths", no_parts)

    assert ensure_model_file(cache, parts) == first
    assert first.stat().st_mtime_ns == mtime


def test_a_missing_part_package_is_unavailable(parts: ModelFile, tmp_path: Path) -> None:
    missing = ModelFile(
        name=parts.name,
        filename=parts.filename,
        size=parts.size,
        sha256=parts.sha256,
        part_modules=(*parts.part_modules, "no_such_model_part_module_for_tests"),
        licence=parts.licence,
    )

    with pytest.raises(PluginUnavailable, match="no_such_model_part_module_for_tests"):
        ensure_model_file(tmp_path / "cache", missing)


# ---------------------------------------------------------------- foreground first (RT-11)

PROGRESS = {"choices": [], "prompt_progress": {"total": 900, "processed": 64}}
"""A prompt batch done (llama.cpp sends one per batch when ``return_progress`` is set)."""
NOW = {"background": BackgroundPolicy(idle_before_s=0.0)}
"""Background work may start as soon as the model is free (no pause needed in these tests)."""


async def test_background_work_waits_for_foreground_work_submitted_after_it(
    harness: Harness,
) -> None:
    backend = FakeBackend()
    hold = backend.gate()
    backend.scripts = [["f1", hold, timings_chunk()], ["f2", timings_chunk()], ["{}"]]
    model = harness.model(backend, **NOW)

    first = model.chat(ask("F1"), lane="A")
    assert await anext(first) == "f1"
    learning = asyncio.create_task(collect(model.chat(ask("BG"), lane="t", background=True)))
    await until(lambda: len(model.queue) == 1, "the background request to queue")
    second = asyncio.create_task(collect(model.chat(ask("F2"), lane="B")))
    await until(lambda: len(model.queue) == 2, "the second foreground request to queue")
    hold.event.set()  # type: ignore[attr-defined]

    assert await collect(first) == []
    assert await second == ["f2"]
    assert await learning == ["{}"]
    assert [p["messages"][0]["content"] for p in backend.payloads] == ["F1", "F2", "BG"]
    assert "return_progress" not in backend.payloads[0]
    assert backend.payloads[2]["return_progress"] is True


async def test_foreground_work_stops_a_running_background_request_which_runs_again_whole(
    harness: Harness,
) -> None:
    backend = FakeBackend()
    in_prefill = backend.gate()
    backend.scripts = [
        [PROGRESS, in_prefill, PROGRESS, "half", "done"],  # preempted after its batch
        ["answer", timings_chunk()],
        ["whole", " answer", timings_chunk()],  # the background request, run again
    ]
    model = harness.model(backend, **NOW)

    learning = asyncio.create_task(collect(model.chat(ask("BG"), lane="t", background=True)))
    await until(lambda: backend.running.is_set(), "the background request to run")
    answer = asyncio.create_task(collect(model.chat(ask("F"), lane="A")))
    await until(lambda: model.queue.foreground_waiting == 1, "the answer to queue")
    in_prefill.event.set()  # type: ignore[attr-defined]

    assert await answer == ["answer"]
    assert await learning == ["whole answer"]  # one piece, none of the stopped run's text
    assert backend.stopped[0] is True and backend.sent[0] == []
    assert [p["messages"][0]["content"] for p in backend.payloads] == ["BG", "F", "BG"]
    stats = model.stats
    assert (stats.background_started, stats.background_completed) == (1, 1)
    assert stats.background_preempted == 1 and model.queue.preempted == 1
    assert list(stats.queue_waits_ms) == [0.0]  # foreground waits only


async def test_no_background_work_starts_while_a_session_is_mid_turn(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend(["{}"])
    model = harness.model(backend, background=BackgroundPolicy(idle_before_s=0.5))
    model.hold("A")  # a person is speaking

    learning = asyncio.create_task(collect(model.chat(ask("BG"), lane="t", background=True)))
    await until(lambda: len(model.queue) == 1, "the background request to queue")
    clock.advance(5.0)
    await asyncio.sleep(0.12)  # the worker looks again every 50 ms
    assert backend.payloads == []

    model.release("A")  # the answer is generated; background waits for a pause
    clock.advance(0.2)
    await asyncio.sleep(0.12)
    assert backend.payloads == []
    clock.advance(0.4)
    assert await learning == ["{}"]


def preemptable(harness: Harness) -> tuple[FakeBackend, LocalModel]:
    """A model whose first request stops in prefill until ``hold_during_prefill``; the next
    request answers "{}"."""
    backend = FakeBackend()
    backend.scripts = [[PROGRESS, backend.gate(), PROGRESS, "x"], ["{}"]]
    return backend, harness.model(backend, **NOW)


async def hold_during_prefill(backend: FakeBackend, model: LocalModel) -> None:
    """A person starts speaking while the background request is in prefill: it is stopped
    after its prompt batch and waits (checked a little past the worker's 50 ms look)."""
    await until(lambda: backend.running.is_set(), "the background request to run")
    model.hold("A")  # the person started speaking: the model must be free when they finish
    backend.gates[0].set()
    await until(lambda: model.stats.background_preempted == 1, "the preemption")
    await asyncio.sleep(0.12)


async def test_a_hold_stops_a_running_background_request_before_any_request_arrives(
    harness: Harness,
) -> None:
    backend, model = preemptable(harness)

    learning = asyncio.create_task(collect(model.chat(ask("BG"), lane="t", background=True)))
    await hold_during_prefill(backend, model)
    assert len(backend.payloads) == 1  # not run again while the person is mid-turn

    model.release("A")
    assert await learning == ["{}"]


async def test_the_owners_run_bound_starts_when_its_request_runs_again_after_a_preemption(
    harness: Harness,
) -> None:
    backend, model = preemptable(harness)
    loop = asyncio.get_running_loop()

    bounds: list[asyncio.Timeout] = []

    async def learn() -> tuple[list[str], float | None]:
        async with asyncio.timeout(None) as bound:
            bounds.append(bound)
            with bound_runs(bound, 60.0):
                text = await collect(model.chat(ask("BG"), lane="t", background=True))
            return text, bound.when()

    learning = asyncio.create_task(learn())
    await hold_during_prefill(backend, model)  # the request waits, its bound does not run
    for _ in range(500):  # the stop reaches the owner's task: its bound waits for a pause
        when = bounds[0].when() if bounds else None
        if when is not None and when >= loop.time() + BACKGROUND_WAIT_S - 60:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the owner's bound kept running while its request waited for a pause")
    released = loop.time()
    model.release("A")
    text, when = await learning
    assert text == ["{}"]
    assert when is not None and when >= released + 60.0  # restarted at the second run


# ---------------------------------------------------------------- computed ahead (Rule 8)

PROMPT = [{"role": "system", "content": "S"}, {"role": "user", "content": ""}]


async def test_a_prompt_computed_ahead_runs_one_token_and_counts_as_no_request(
    harness: Harness,
) -> None:
    backend = FakeBackend(["x", timings_chunk()])
    model = harness.model(backend)
    await model.load()

    await model.prepare(PROMPT, lane="A")

    (payload,) = backend.payloads
    assert payload["messages"] == PROMPT and payload["max_tokens"] == 1
    assert payload["return_progress"] is True  # it can be stopped after each prompt batch
    assert model.calls("A") == 0 and model.stats.requests == 0  # a turn's "no model" stands
    assert model.stats.prepares == 1 and list(model.stats.first_token_ms) == []


async def test_a_prompt_computed_ahead_never_loads_the_model(harness: Harness) -> None:
    model = harness.model(FakeBackend())
    await model.prepare(PROMPT, lane="A")
    assert not model.loaded and harness.factory_calls == []


async def ahead_then_asked(harness: Harness, asking_lane: str) -> tuple[FakeBackend, LocalModel]:
    """Lane A's prompt is computed ahead; while it is in prefill, ``asking_lane`` asks."""
    backend = FakeBackend()
    in_prefill = backend.gate()
    backend.scripts = [[PROGRESS, in_prefill, PROGRESS, "x"], ["answer", timings_chunk()]]
    model = harness.model(backend)
    await model.load()
    ahead = asyncio.create_task(model.prepare(PROMPT, lane="A"))
    await until(lambda: backend.running.is_set(), "the prompt computed ahead to run")
    answer = asyncio.create_task(collect(model.chat(ask("F"), lane=asking_lane)))
    await until(lambda: model.queue.foreground_waiting == 1, "the answer to queue")
    in_prefill.event.set()  # type: ignore[attr-defined]
    assert await answer == ["answer"]
    await ahead
    return backend, model


async def test_another_sessions_request_stops_a_prompt_computed_ahead(harness: Harness) -> None:
    backend, model = await ahead_then_asked(harness, "B")
    assert backend.stopped[0] is True and backend.sent[0] == []  # stopped after its batch
    assert len(backend.payloads) == 2  # never put back
    assert model.stats.prepares_stopped == 1 and model.stats.prepares == 0


async def test_its_own_sessions_request_waits_for_a_prompt_computed_ahead(
    harness: Harness,
) -> None:
    """The question needs the same prompt start: stopping it would throw the work away."""
    backend, model = await ahead_then_asked(harness, "A")
    assert backend.stopped[0] is False and model.stats.prepares == 1


async def test_a_prompt_computed_ahead_is_dropped_when_the_model_stays_busy(
    harness: Harness, clock: VirtualClock
) -> None:
    backend = FakeBackend()
    busy = backend.gate()
    backend.scripts = [["f", busy, timings_chunk()], ["x"]]
    model = harness.model(backend)
    await model.load()

    first = model.chat(ask("F"), lane="B")
    assert await anext(first) == "f"
    ahead = asyncio.create_task(model.prepare(PROMPT, lane="A"))
    await until(lambda: len(model.queue) == 1, "the prompt computed ahead to queue")
    clock.advance(local_model_module.PREPARE_START_S + 0.1)
    await ahead  # dropped at its deadline, no error
    busy.event.set()  # type: ignore[attr-defined]
    assert await collect(first) == []

    assert len(backend.payloads) == 1
    assert model.stats.prepares_skipped == 1 and model.stats.expired == 0
