"""Runs scenarios against a server (SPEC EVAL-1): a URL and token, or one embedded here.

Theory of operation
-------------------
Rule 1. A target is a running OpenRealtime server: ``url_target`` (anyone's, by URL and a
        bearer token with admin rights in its tenant, since a scenario creates a role) or
        ``embedded_target`` (``runtime.server.running_server`` in this process, on the default
        stack as ``make run`` builds it unless plugins are given; memory storage in a temporary
        directory unless told otherwise, so a run starts from nothing and leaves nothing).
Rule 2. Setup per run: each distinct document is created once (``POST /api/documents``); per
        scenario a role is created (or ``role_id`` used as it is), the documents bound, manual
        memory entries added. On a URL target what the run created is deleted at the end
        (``keep`` leaves it for inspection).
Rule 3. Each session is a new realtime session (``runtime.client.RealtimeClient``, the GA
        protocol with our extensions) on a new thread of the same user and role; the
        scenario's function tools are set with ``session.update``. A typed turn is
        ``conversation.item.create`` + ``response.create``; a spoken one is synthesized with
        the embedded TTS and streamed at real time for the server's VAD, turn detection and
        ASR, and then, like a microphone left open, silence at real time until the turn's
        answer is done (at most ``MIC_OPEN_S``): a server that heard a pause inside the words
        as the end, or holds for more, is never left waiting for audio that never comes. What
        the server heard is reported beside what was said.
Rule 4. A response that ends with function calls gets each call's ``function_call_output``
        (the turn's ``tool_output``) and a new ``response.create``, at most ``MAX_TOOL_ROUNDS``
        times; the turn's answer is the text of its last response. A response that fails, or
        none within ``turn_timeout_s``, fails the turn (its error is reported) and the session
        goes on — on a new connection if the old one closed.
Rule 5. Latency: ``first_ms`` from the turn's end (a typed turn: sent; a spoken one: the last
        voiced 10 ms of the speech) to the first answer audio or text; ``done_ms`` to the last
        ``response.done``.
Rule 6. Between sessions the runner waits ``session_gap_s`` (memory extraction runs after a
        turn, on the server's time) — the only fixed wait; everything else waits on events.
        On an embedded server it also waits, up to ``MEMORY_SETTLE_S``, until the memory
        reads handed to the background (``memory.fact_reader``) are done: a next session
        comes after a pause, and background work runs in pauses (SPEC RT-11).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from evals.checks import CheckResult, Judge, ToolCall, judge_check, text_checks
from evals.scenario import Document, Scenario, Turn
from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample, rms_dbfs
from runtime.client import ClientClosed, RealtimeClient, Received

MAX_TOOL_ROUNDS = 3
MIC_OPEN_S = 30.0
"""How long silence goes on after a spoken turn's words at most (Rule 3)."""
LATE_TRANSCRIPT_S = 10.0
"""How long a spoken turn's transcript is waited for after its answer."""
FRAME = INPUT_SAMPLE_RATE // 50  # 20 ms
ANSWER_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
    }
)


@dataclass(frozen=True, slots=True)
class Target:
    http_url: str
    ws_url: str
    token: str
    embedded: Any = None
    """The ``RunningServer`` of an embedded target (None for a URL)."""


@dataclass(slots=True)
class TurnResult:
    session: int
    index: int
    text: str
    spoken: bool
    tags: tuple[str, ...] = ()
    heard: str | None = None
    answer: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    first_ms: float | None = None
    done_ms: float | None = None
    error: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    """The server's latency marks of the answer (``openrealtime.turn.latency``), when sent."""

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.status != "failed" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "turn": self.index,
            "spoken": self.spoken,
            "tags": list(self.tags),
            "said": self.text,
            "heard": self.heard,
            "answer": self.answer,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls],
            "first_ms": None if self.first_ms is None else round(self.first_ms, 1),
            "done_ms": None if self.done_ms is None else round(self.done_ms, 1),
            "error": self.error,
            "checks": [c.as_dict() for c in self.checks],
            "marks_ms": self.marks,
            "passed": self.passed,
        }


@dataclass(slots=True)
class ScenarioResult:
    id: str
    split: str
    source: str
    turns: list[TurnResult] = field(default_factory=list)
    error: str | None = None
    """Setup failed (nothing ran): the reason."""

    @property
    def passed(self) -> bool:
        return self.error is None and all(t.passed for t in self.turns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "split": self.split,
            "source": self.source,
            "error": self.error,
            "passed": self.passed,
            "turns": [t.as_dict() for t in self.turns],
        }


TurnObserver = Callable[[Scenario, Turn, TurnResult], Awaitable[None] | None]


@contextlib.asynccontextmanager
async def url_target(url: str, token: str) -> AsyncIterator[Target]:
    base = url.rstrip("/")
    ws = "ws" + base[len("http") :] if base.startswith("http") else base
    yield Target(http_url=base, ws_url=f"{ws}/v1/realtime", token=token)


@contextlib.asynccontextmanager
async def embedded_target(
    *, storage: str = "memory", plugins: Any = None, settings: Any = None
) -> AsyncIterator[Target]:
    """A server in this process on the default stack (Rule 1)."""
    from runtime.config import Settings
    from runtime.plugin_factory import build_plugins, warm_up
    from runtime.server import running_server

    with tempfile.TemporaryDirectory(prefix="openrealtime-eval-") as data_dir:
        if settings is None:
            settings = Settings.model_validate(
                {
                    "storage": storage,
                    "port": 0,
                    "host": "127.0.0.1",
                    "data_dir": Path(data_dir),
                    # One local user drives every scenario: sessions end as the next begins.
                    "max_live_sessions_per_user": 10_000,
                }
            )
        if plugins is None:
            plugins = build_plugins(settings)
        await warm_up(plugins)
        async with running_server(settings, plugins=plugins) as server:
            yield Target(server.http_url, server.ws_url, server.token, embedded=server)


class Speech:
    """Spoken turns: the embedded TTS at 16 kHz, each text synthesized once."""

    def __init__(self) -> None:
        self._tts: Any = None
        self._cache: dict[tuple[str, str], PCM] = {}

    async def pcm(self, text: str, language: str) -> PCM:
        key = (text, language)
        if key not in self._cache:
            if self._tts is None:
                from plugins.tts import create_tts

                self._tts = create_tts("piper")
            parts = [
                resample(c.pcm, c.sample_rate, INPUT_SAMPLE_RATE)
                async for c in self._tts.stream(text, voice=None, language=language)
            ]
            self._cache[key] = np.concatenate(parts) if parts else np.zeros(0, np.int16)
        return self._cache[key]


def last_voiced_sample(pcm: PCM, threshold_dbfs: float = -40.0) -> int:
    """The end of the last 10 ms louder than the energy VAD's threshold (the speech's end)."""
    window = INPUT_SAMPLE_RATE // 100
    end = pcm.size
    for start in range(0, pcm.size - window + 1, window):
        if rms_dbfs(pcm[start : start + window]) > threshold_dbfs:
            end = start + window
    return end


MEMORY_SETTLE_S = 120.0
"""The most the runner waits between sessions for an embedded server's memory reads."""


class Runner:
    """Runs scenarios against one target (the module's rules)."""

    def __init__(
        self,
        target: Target,
        *,
        judge: Judge | None = None,
        progress: Callable[[str], None] = lambda line: None,
        session_gap_s: float = 0.3,
        turn_timeout_s: float = 90.0,
        keep: bool = False,
        on_turn: TurnObserver | None = None,
    ) -> None:
        self.target = target
        self.judge = judge
        self.progress = progress
        self.session_gap_s = session_gap_s
        self.turn_timeout_s = turn_timeout_s
        self.keep = keep
        self.on_turn = on_turn
        self.speech = Speech()
        self._documents: dict[tuple[str, str], str] = {}
        self._created_roles: list[str] = []

    async def run(self, scenarios: Sequence[Scenario]) -> list[ScenarioResult]:
        headers = {"Authorization": f"Bearer {self.target.token}"}
        async with httpx.AsyncClient(
            base_url=self.target.http_url, headers=headers, timeout=120
        ) as http:
            results = []
            try:
                for number, scenario in enumerate(scenarios, 1):
                    results.append(await self._scenario(http, scenario, number, len(scenarios)))
            finally:
                if self.target.embedded is None and not self.keep:
                    await self._clean_up(http)
        return results

    async def _scenario(
        self, http: httpx.AsyncClient, scenario: Scenario, number: int, total: int
    ) -> ScenarioResult:
        result = ScenarioResult(scenario.id, scenario.split, str(scenario.source))
        try:
            role_id = await self.setup(http, scenario)
        except (httpx.HTTPStatusError, KeyError, ValueError) as e:
            # A refusal is the scenario's failure; an unreachable server ends the run.
            result.error = f"setup failed: {_describe(e)}"
            self.progress(f"[{number}/{total}] {scenario.id}: {result.error}")
            return result
        for s, session in enumerate(scenario.sessions):
            try:
                client = await self._connect(role_id, scenario)
            except (ClientClosed, TimeoutError, OSError) as e:
                result.error = f"cannot open session {s + 1}: {_clip(str(e), 300)}"
                self.progress(f"[{number}/{total}] {scenario.id}: {result.error}")
                return result
            try:
                for t, turn in enumerate(session.turns):
                    outcome, client = await self._turn(client, role_id, scenario, turn, s, t)
                    result.turns.append(outcome)
                    mark = "ok " if outcome.passed else "FAIL"
                    self.progress(
                        f"[{number}/{total}] {scenario.id} s{s + 1}t{t + 1} {mark} "
                        f"{_clip(turn.text, 50)} → "
                        f"{_clip(outcome.answer or outcome.error or '', 60)}"
                    )
                    if self.on_turn is not None:
                        maybe = self.on_turn(scenario, turn, outcome)
                        if maybe is not None:
                            await maybe
            finally:
                await client.close()
            if s + 1 < len(scenario.sessions):
                await asyncio.sleep(self.session_gap_s)  # Rule 6
                await self._memory_settled()
        passed = sum(t.passed for t in result.turns)
        self.progress(
            f"[{number}/{total}] {scenario.id}: {passed}/{len(result.turns)} turns passed"
        )
        return result

    async def _memory_settled(self) -> None:
        """Rule 6: an embedded server's background memory reads are done (bounded)."""
        services = getattr(self.target.embedded, "services", None)
        reader = getattr(services, "fact_reader", None)
        if reader is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(MEMORY_SETTLE_S):
                    await reader.drained()

    # ------------------------------------------------------------ setup (Rule 2)

    async def setup(self, http: httpx.AsyncClient, scenario: Scenario) -> str:
        """The scenario's role, created with its documents and memory (Rule 2); its id."""
        doc_ids = [await self.document(http, d) for d in scenario.documents]
        role = scenario.role
        if role.role_id is not None:
            return role.role_id
        instructions = role.instructions or (
            "你是帮助助手，请依据资料回答。"
            if role.language == "zh"
            else "You are a helpful assistant. Answer from the documents."
        )
        response = await http.post(
            "/api/roles",
            json={
                "name": (role.name or f"eval {scenario.id}")[:100],
                "instructions": instructions,
                "language": role.language,
                "memory_enabled": role.memory,
            },
        )
        response.raise_for_status()
        role_id = str(response.json()["id"])
        self._created_roles.append(role_id)
        if doc_ids:
            bound = await http.put(
                f"/api/roles/{role_id}/documents", json={"document_ids": doc_ids}
            )
            bound.raise_for_status()
        for content in scenario.memory:
            added = await http.post(
                "/api/memory", json={"role_id": role_id, "kind": "preference", "content": content}
            )
            added.raise_for_status()
        return role_id

    async def document(self, http: httpx.AsyncClient, document: Document) -> str:
        """The id of ``document`` on the target, created on first use (Rule 2)."""
        key = (document.name, document.text)
        if key not in self._documents:
            response = await http.post(
                "/api/documents", json={"name": document.name, "text": document.text}
            )
            response.raise_for_status()
            self._documents[key] = str(response.json()["id"])
        return self._documents[key]

    async def _clean_up(self, http: httpx.AsyncClient) -> None:
        for role_id in self._created_roles:
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(f"/api/roles/{role_id}")
        for doc_id in self._documents.values():
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(f"/api/documents/{doc_id}")

    # ------------------------------------------------------------ sessions and turns

    async def _connect(self, role_id: str, scenario: Scenario) -> RealtimeClient:
        client = RealtimeClient(self.target.ws_url, self.target.token)
        await client.connect(role_id=role_id, timeout=30)
        if scenario.tools:
            await client.send_json(
                {
                    "type": "session.update",
                    "session": {"type": "realtime", "tools": list(scenario.tools),
                                "tool_choice": "auto"},
                }
            )  # fmt: skip
            await client.wait_type("session.updated", timeout=30)
        return client

    async def _turn(
        self,
        client: RealtimeClient,
        role_id: str,
        scenario: Scenario,
        turn: Turn,
        session: int,
        index: int,
    ) -> tuple[TurnResult, RealtimeClient]:
        result = TurnResult(session + 1, index + 1, turn.text, turn.spoken, turn.tags)
        mark = len(client.messages)
        try:
            await self._exchange(client, scenario, turn, result, mark)
        except (TimeoutError, ClientClosed) as e:
            what = (
                "no answer within the turn timeout"
                if isinstance(e, TimeoutError)
                else "the connection closed"
            )
            result.error = result.error or f"{what}; {_how_far(client.messages[mark:])}"
            await client.close()
            client = await self._connect(role_id, scenario)  # Rule 4: the session goes on
        result.checks = text_checks(turn.expect, result.answer, result.calls, result.first_ms)
        if turn.expect.judge is not None:
            result.checks.append(
                await judge_check(turn.expect.judge, turn.text, result.answer, self.judge)
            )
        return result, client

    async def _exchange(
        self,
        client: RealtimeClient,
        scenario: Scenario,
        turn: Turn,
        result: TurnResult,
        mark: int,
    ) -> None:
        if turn.spoken:
            ended = await self._speak(client, turn.text, scenario.role.language)
            microphone = asyncio.ensure_future(_silence(client))
            try:
                await self._answers(client, turn, result, mark, ended)
            finally:
                microphone.cancel()
                with contextlib.suppress(asyncio.CancelledError, ClientClosed):
                    await microphone
            return
        ended = client.clock()
        await client.send_text(turn.text)
        await self._answers(client, turn, result, mark, ended)

    async def _answers(
        self, client: RealtimeClient, turn: Turn, result: TurnResult, mark: int, ended: float
    ) -> None:
        """The turn's responses, the tool rounds included (Rules 4–5)."""
        for _ in range(MAX_TOOL_ROUNDS + 1):
            done = await self._response_done(client)
            response = done["response"]
            if result.first_ms is None:
                first = _first_answer(client.messages[mark:])
                if first is not None:
                    result.first_ms = (first - ended) * 1000
            result.done_ms = (client.clock() - ended) * 1000
            if turn.spoken and result.heard is None:
                result.heard = _heard(client.messages[mark:])
            if response.get("status") == "failed":
                error = (response.get("status_details") or {}).get("error") or {}
                result.error = f"response failed: {error.get('code') or 'unknown'}"
                return
            calls = [o for o in response.get("output") or () if o.get("type") == "function_call"]
            if not calls:
                result.answer = _answer_text(response)
                result.marks = await _latency_marks(client, mark)
                if turn.spoken and result.heard is None:
                    result.heard = await _late_transcript(client)
                return
            for call in calls:
                result.calls.append(
                    ToolCall(str(call.get("name")), str(call.get("arguments") or ""))
                )
                await client.send_json(
                    {
                        "type": "conversation.item.create",
                        "item": {"type": "function_call_output", "call_id": call.get("call_id"),
                                 "output": turn.tool_output},
                    }
                )  # fmt: skip
            await client.send_json({"type": "response.create"})
        result.error = f"more than {MAX_TOOL_ROUNDS} rounds of tool calls"

    async def _response_done(self, client: RealtimeClient) -> dict[str, Any]:
        """The next ``response.done`` that is not a cancelled one (Rule 4)."""
        message = await client.wait_for(
            lambda m: (
                m.type == "response.done"
                and m.event is not None
                and m.event["response"].get("status") != "cancelled"
            ),
            self.turn_timeout_s,
        )
        assert message.event is not None
        return message.event

    async def _speak(self, client: RealtimeClient, text: str, language: str) -> float:
        """Stream the spoken turn's words at real time; the time its speech ended (Rule 5)."""
        voice = await self.speech.pcm(text, language)
        end = last_voiced_sample(voice)
        ended = client.clock()

        async def frame(offset: int) -> None:
            nonlocal ended
            await client.send_audio(voice[offset : offset + FRAME].tobytes())
            if offset < end <= offset + FRAME:
                ended = client.clock()

        await _at_real_time(range(0, voice.size, FRAME), frame)
        return ended


async def _at_real_time(offsets: Iterable[int], send: Callable[[int], Awaitable[None]]) -> None:
    """``send`` each frame offset 20 ms after the one before (no drift)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, offset in enumerate(offsets):
        await send(offset)
        delay = start + (i + 1) * FRAME / INPUT_SAMPLE_RATE - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


async def _silence(client: RealtimeClient) -> None:
    """The open microphone after a spoken turn's words (Rule 3), until cancelled."""
    quiet = np.zeros(FRAME, dtype=np.int16).tobytes()

    async def frame(_: int) -> None:
        await client.send_audio(quiet)

    frames = int(MIC_OPEN_S * INPUT_SAMPLE_RATE / FRAME)
    await _at_real_time(range(frames), frame)


async def _latency_marks(client: RealtimeClient, mark: int) -> dict[str, float]:
    """The answer's ``openrealtime.turn.latency`` marks: sent about when its ``response.done``
    is (before or after it), so looked for from the turn's start, then waited for briefly."""

    def latency(m: Received) -> bool:
        return m.type == "openrealtime.turn.latency"

    found = next((m for m in reversed(client.messages[mark:]) if latency(m)), None)
    if found is None:
        with contextlib.suppress(TimeoutError, ClientClosed):
            found = await client.wait_for(latency, 1.0)
    marks = (found.event or {}).get("latency_ms") if found is not None else None
    if not isinstance(marks, dict):
        return {}
    return {str(k): float(v) for k, v in marks.items() if isinstance(v, int | float)}


def _answer_text(response: dict[str, Any]) -> str:
    if response.get("output_text"):
        return str(response["output_text"])
    parts = []
    for item in response.get("output") or ():
        for content in item.get("content") or ():
            parts.append(str(content.get("text") or content.get("transcript") or ""))
    return "".join(parts)


def _first_answer(messages: list[Received]) -> float | None:
    """When the first answer audio or text of the turn arrived."""
    for m in messages:
        if m.audio is not None or m.type in ANSWER_DELTAS:
            return m.at
    return None


async def _late_transcript(client: RealtimeClient) -> str | None:
    """A spoken turn's transcript that comes after its answer (GA servers may send it late),
    waited for a bounded while; None if it never comes."""
    try:
        message = await client.wait_for(
            lambda m: m.type == "conversation.item.input_audio_transcription.completed",
            LATE_TRANSCRIPT_S,
        )
    except TimeoutError:
        return None
    return str((message.event or {}).get("transcript") or "")


def _heard(messages: list[Received]) -> str | None:
    """What the server's ASR made of a spoken turn."""
    for m in messages:
        if (
            m.event is not None
            and m.type == "conversation.item.input_audio_transcription.completed"
        ):
            return str(m.event.get("transcript") or "")
    return None


def _how_far(messages: list[Received]) -> str:
    """What the server sent during a turn that went wrong, for its report: each kind of
    message once, in order, with its count ('nothing' if it sent nothing)."""
    counts: dict[str, int] = {}
    for m in messages:
        counts[m.type] = counts.get(m.type, 0) + 1
    if not counts:
        return "the server sent nothing"
    return "the server sent: " + ", ".join(
        kind if n == 1 else f"{kind} ×{n}" for kind, n in counts.items()
    )


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _describe(e: Exception) -> str:
    if isinstance(e, httpx.HTTPStatusError):
        try:
            detail = e.response.json()
        except ValueError:
            detail = e.response.text[:200]
        request = e.request
        return (
            f"{request.method} {request.url.path} → {e.response.status_code} "
            f"{json.dumps(detail)[:200]}"
        )
    return f"{type(e).__name__}: {e}"
