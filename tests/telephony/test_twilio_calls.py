"""Phone calls through Twilio Media Streams against the real server (fake plugins), driven by
a client that follows Twilio's documented message sequence (``runtime/telephony/twilio_client``):
the signed webhook and its TwiML, the stream's audio both ways, marks as the heard prefix,
``clear`` on barge-in, keypad entries, ``stop``, and a dropped stream that continues the call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from journal.events import EventKind, ThreadRef
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.telephony.sip_client import SipPhone
from runtime.telephony.twilio_client import RATE, TwilioCall
from runtime.telephony.twilio_protocol import twilio_signature
from tests.runtime.conftest import fake_plugins
from tests.waiting import until

AUTH_TOKEN = "twilio-auth-token-for-tests"
LINE_TOKEN = "phone-line-token-for-tests"
LONG_ANSWER = " ".join(["This answer goes on for quite a while so it can be interrupted."] * 8)


def phone_settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "port": 0, "data_dir": tmp_path / "data", "silence_ms": 300, "min_interrupt_ms": 300,
        "storage": "memory", "false_interruption_ms": 0, "twilio_auth_token": AUTH_TOKEN,
        "telephony_token": LINE_TOKEN, "telephony_keypad_gap_s": 0.5,
    }  # fmt: skip
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def phone_server(
    tmp_path: Path,
    *answers: str,
    heard: tuple[str, ...] = (),
    brain: object = None,
    **overrides: object,
) -> AsyncIterator[RunningServer]:
    """The server with fake plugins: the brain says ``answers`` in turn (or is ``brain``), the
    ASR hears ``heard`` (one text per transcription, the last repeating)."""
    plugins = fake_plugins(
        tts=FakeTTS(ms_per_char=10.0, tone_hz=440.0),
        brain=brain or FakeBrain(list(answers) or ["Sure. Here is the answer. Anything else?"]),
        asr=FakeASR(list(heard) or ["what is the weather", "stop please", "and then"]),
    )
    async with running_server(phone_settings(tmp_path, **overrides), plugins=plugins) as server:
        owner = await server.services.accounts.authenticate(server.token)
        assert owner is not None
        await server.services.accounts.add_token(owner, LINE_TOKEN)  # the line's owner
        try:
            yield server
        finally:
            for call in OPEN_CALLS:
                await call.close()
            OPEN_CALLS.clear()


OPEN_CALLS: list[TwilioCall] = []


def twilio_call(server: RunningServer, **kwargs: str) -> TwilioCall:
    """A call that is closed with its server, whatever the test did."""
    call = TwilioCall(server.http_url, AUTH_TOKEN, **kwargs)
    OPEN_CALLS.append(call)
    return call


def tone(seconds: float, level: int = 6000) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (level * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)


async def journal_of(server: RunningServer, call: TwilioCall | SipPhone) -> list[tuple[str, dict]]:
    """The journal of a Twilio or SIP call's thread."""
    key = call.call_sid if isinstance(call, TwilioCall) else f"sip:{call.call_id}"
    phone = server.services.phone.get(key)
    assert phone is not None and phone.thread_id is not None
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    ref = ThreadRef(owner.tenant, owner.user, phone.thread_id)
    return [(e.kind, dict(e.payload)) for e in await server.services.journal.read(ref)]


async def journaled(
    server: RunningServer, call: TwilioCall | SipPhone, count: int
) -> list[tuple[str, dict]]:
    """The call's journal once it holds ``count`` events."""
    async with asyncio.timeout(20):
        while len(events := await journal_of(server, call)) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the journal announces nothing
    return events


async def test_a_call_is_answered_heard_and_hung_up(tmp_path: Path) -> None:
    async with phone_server(tmp_path) as server:
        call = twilio_call(server)
        twiml = await call.webhook()
        url, params = call.stream_target()
        assert url.endswith("/v1/telephony/twilio/stream") and url.startswith("ws://")
        assert set(params) == {"token"} and params["token"] not in url
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        answer = "Sure. Here is the answer. Anything else?"
        # The whole answer is played (10 ms a character) and every audio mark comes back.
        await until(lambda: call.played.speech_ms() >= len(answer) * 10 * 0.95, 20)
        sent_marks = [m["mark"]["name"] for m in call.events("mark")]
        await until(lambda: set(sent_marks) <= set(call.played.marks), 10)
        media = call.events("media")
        assert all(set(m) == {"event", "streamSid", "media"} for m in media)
        assert {m["streamSid"] for m in media + call.events("mark")} == {call.stream_sid}
        assert len(sent_marks) == len(media)  # a mark after each piece of audio
        await until(lambda: len(server.services.live_sessions) == 1)
        session = next(iter(server.services.live_sessions.values()))
        events = await journal_of(server, call)
        await call.hang_up()
        await until(lambda: len(server.services.live_sessions) == 0)
        # Twilio asks the action URL when the stream ends: the call ended for good.
        after = await call.webhook()
    assert "<Connect" in twiml
    assert [kind for kind, _ in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
    assert events[0][1]["text"] == "what is the weather"
    assert events[1][1]["text"] == answer and not events[1][1].get("interrupted")
    assert session.config.output_format.kind == "audio/pcmu"
    assert "<Hangup/>" in after
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.ended == "caller"
    assert call.played.clears == 0


async def test_barge_in_clears_twilios_buffer_and_the_heard_prefix_is_what_played(
    tmp_path: Path,
) -> None:
    async with phone_server(tmp_path, LONG_ANSWER, "Second answer.") as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.speech_ms() >= 1500, 20)  # the answer plays a while
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.clears >= 1, 10)
        played_at_clear = call.played.speech_ms()
        events = await journaled(server, call, 4)
        await call.hang_up()
    first = events[1][1]
    assert first["interrupted"] is True
    heard = first["heard_text"]
    assert heard and LONG_ANSWER.startswith(heard) and len(heard) < len(LONG_ANSWER) / 2
    # The heard prefix is what the phone played before the clear (10 ms a character), to
    # one piece between marks (100 ms) and a word.
    assert abs(len(heard) * 10 - played_at_clear) < 400
    # After the clear, a fence mark; marks Twilio flushed were not counted as heard.
    clear_at = next(i for i, m in enumerate(call.received) if m.get("event") == "clear")
    fence = call.received[clear_at + 1]
    assert fence["event"] == "mark" and fence["mark"]["name"].startswith("c")
    assert events[3][1]["text"] == "Second answer."


async def test_a_keypad_entry_reaches_the_agent_as_the_callers_words(tmp_path: Path) -> None:
    async with phone_server(tmp_path, "Thank you, I found order 4711.") as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        for digit in "4711#":
            await call.press(digit)
        await until(lambda: call.played.speech_ms() > 250, 20)
        for digit in "99":  # no '#': the pause ends the entry
            await call.press(digit)
        await until(lambda: len(server.services.live_sessions) == 1)
        events = await journaled(server, call, 4)
        await call.hang_up()
    inputs = [p["text"] for kind, p in events if kind == EventKind.USER_INPUT]
    assert inputs == ["(keypad: 4711)", "(keypad: 99)"]


async def test_a_dropped_stream_continues_the_calls_thread(tmp_path: Path) -> None:
    async with phone_server(tmp_path, "First answer.", "Second answer.") as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.speech_ms() >= 100, 20)
        await until(lambda: len(call.played.marks) > 0)
        phone = server.services.phone.get(call.call_sid)
        assert phone is not None
        first_thread, first_session = phone.thread_id, phone.session_id
        await call.drop()  # no stop: the network failed
        await until(lambda: len(server.services.live_sessions) == 0)
        assert phone.ended is None
        again = await call.webhook()  # Twilio asks the <Connect> action URL
        assert "<Connect" in again
        call.played.pcm.clear()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.speech_ms() >= len("Second answer.") * 10 * 0.9, 20)
        events = await journal_of(server, call)
        await call.hang_up()
    assert phone.thread_id == first_thread and phone.session_id != first_session
    assert phone.streams == 2
    texts = [p["text"] for _, p in events]
    assert texts[:4] == ["what is the weather", "First answer.", "stop please", "Second answer."]


async def test_the_webhook_needs_twilios_signature_and_the_stream_its_token(
    tmp_path: Path,
) -> None:
    async with phone_server(tmp_path) as server:
        url = f"{server.http_url}/v1/telephony/twilio/voice"
        params = {"CallSid": "CA1", "From": "+1", "To": "+2"}
        async with httpx.AsyncClient() as http:
            unsigned = await http.post(url, data=params)
            forged = await http.post(
                url, data=params, headers={"X-Twilio-Signature": twilio_signature("x", url, params)}
            )
            signed = await http.post(
                url,
                data=params,
                headers={"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, url, params)},
            )
            huge = await http.post(url, content=b"a=" + b"x" * 100_000, headers={
                "Content-Type": "application/x-www-form-urlencoded"
            })  # fmt: skip
        assert (huge.status_code, huge.json()["code"]) == (413, "payload_too_large")
        assert (unsigned.status_code, unsigned.json()["code"]) == (403, "invalid_signature")
        assert (forged.status_code, forged.json()["code"]) == (403, "invalid_signature")
        assert signed.status_code == 200 and signed.headers["content-type"].startswith("text/xml")
        # A stream token opens one stream of its own call only.
        call = twilio_call(server)
        await call.webhook()
        thief = twilio_call(server)
        thief.twiml = call.twiml  # another call SID with this call's token
        await thief.connect()
        await until(lambda: thief.closed.is_set(), 10)
        await call.connect()
        await until(lambda: len(server.services.live_sessions) == 1)
        await call.hang_up()
        replay = twilio_call(server, call_sid=call.call_sid)
        replay.twiml = call.twiml  # the same token again
        await replay.connect()
        await until(lambda: replay.closed.is_set(), 10)
        await thief.close()
        await replay.close()
        assert len(server.services.live_sessions) == 0


async def test_without_an_auth_token_the_phone_routes_are_not_there(tmp_path: Path) -> None:
    async with phone_server(tmp_path, twilio_auth_token="") as server:
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{server.http_url}/v1/telephony/twilio/voice", data={"CallSid": "CA1"}
            )
    assert (response.status_code, response.json()["code"]) == (404, "telephony_disabled")


@pytest.mark.parametrize("number", ["+15550002222"])
async def test_the_called_number_chooses_the_role(tmp_path: Path, number: str) -> None:
    async with phone_server(tmp_path, telephony_numbers=f"{number}=Support") as server:
        async with httpx.AsyncClient() as http:
            created = await http.post(
                f"{server.http_url}/api/roles",
                json={"name": "Support"},
                headers={"Authorization": f"Bearer {server.token}"},
            )
        role_id = created.json()["id"]
        call = twilio_call(server, called=number)
        await call.webhook()
        await call.connect()
        await until(lambda: len(server.services.live_sessions) == 1)
        session = next(iter(server.services.live_sessions.values()))
        other = twilio_call(server, called="+15559999999")
        await other.webhook()
        await call.hang_up()
    assert session.role.id == role_id
    assert "<Connect" in other.twiml  # an unlisted number: the default role


async def test_a_noise_pauses_the_answer_and_it_goes_on_from_what_was_heard(
    tmp_path: Path,
) -> None:
    """A possible false interruption (SPEC TT-1): the answer is held — the server clears
    Twilio's buffer at once — the sound is a backchannel, no turn follows, and the answer is sent
    again from the last heard mark: nothing lost."""
    answer = " ".join(["This answer keeps going after a mm-hmm."] * 6)
    heard = ("mm-hmm",)  # every utterance (FakeASR scripts by call, speculations too)
    async with phone_server(tmp_path, answer, heard=heard, false_interruption_ms=1500) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.speech_ms() >= 800, 20)
        await call.say(tone(0.5))  # a backchannel: held, then judged not a turn
        await until(lambda: call.played.clears >= 1, 10)
        events = await journaled(server, call, 2)
        await until(lambda: call.played.speech_ms() >= len(answer) * 10 * 0.97, 20)
        await call.hang_up()
    assert events[1][1]["text"] == answer and not events[1][1].get("interrupted")
    # Played once: what was cleared unheard was sent again, what was heard was not.
    assert call.played.speech_ms() <= len(answer) * 10 + 150
    fence = call.received.index(next(m for m in call.received if m.get("event") == "clear")) + 1
    assert call.events("media")[-1] in call.received[fence:]  # sent again after the clear


GOODBYE = "Goodbye, and thank you for calling."


class HangingUpBrain:
    """Hangs up when the caller says goodbye, then says goodbye (the tool loop's second round)."""

    def __init__(self) -> None:
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if request.tool_results:
            yield BrainDelta(text=GOODBYE)
        elif "bye" in request.current_input.lower() or "sam" in request.current_input.lower():
            reason = {"reason": "the caller said goodbye"}
            yield BrainDelta(tool_call=ToolCall("call_1", "end_call", reason))
        else:
            yield BrainDelta(text="Hello, how can I help?")


async def test_the_agent_ends_the_call_after_its_goodbye_was_heard(tmp_path: Path) -> None:
    brain = HangingUpBrain()
    async with phone_server(tmp_path, heard=("bye now",), brain=brain) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.closed.is_set(), 20)  # the server closed the stream
        heard_ms = call.played.speech_ms()
        sent_marks = {m["mark"]["name"] for m in call.events("mark")}
        echoed = set(call.played.marks)
        events = await journal_of(server, call)
        after = await call.webhook()  # Twilio asks the <Connect> action URL
        await until(lambda: len(server.services.live_sessions) == 0)
    assert "end_call" in [t.name for t in brain.requests[0].tools]
    kinds = [kind for kind, _ in events]
    assert kinds == [
        EventKind.USER_INPUT, EventKind.TOOL_CALL, EventKind.TOOL_RESULT, EventKind.ASSISTANT_OUTPUT
    ]  # fmt: skip
    assert events[1][1]["name"] == "end_call" and events[-1][1]["text"] == GOODBYE
    # The goodbye was heard to its end before the line closed: every mark came back.
    assert sent_marks <= echoed and heard_ms >= len(GOODBYE) * 10 * 0.9
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.ended == "agent"
    assert "<Hangup/>" in after


async def test_only_phone_sessions_offer_end_call(tmp_path: Path) -> None:
    brain = HangingUpBrain()
    async with phone_server(tmp_path, heard=("hello",), brain=brain) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            await client.send_json(
                {"type": "conversation.item.create", "item": {
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "hello"}],
                }}
            )  # fmt: skip
            await client.send_json({"type": "response.create"})
            await client.wait_for(lambda m: m.type == "response.done", 10)
    assert "end_call" not in [t.name for t in brain.requests[0].tools]


async def test_end_call_is_refused_unless_the_caller_took_leave(tmp_path: Path) -> None:
    """A small model calls tools it should not: a statement is no goodbye, the call goes on."""
    brain = HangingUpBrain()  # proposes end_call on "my name is Sam" too
    async with phone_server(tmp_path, heard=("my name is sam",), brain=brain) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        events = await journaled(server, call, 4)
        await call.say(np.zeros(RATE, np.int16))  # a second of the line after the answer
        still_open = not call.closed.is_set()
        await call.hang_up()
    assert still_open
    assert events[1][1]["name"] == "end_call"
    assert events[2][1]["content"].startswith("Not ended")
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.ended == "caller"


async def test_a_goodbye_ends_the_call_after_the_answer_without_any_tool(tmp_path: Path) -> None:
    """The default brain answers a goodbye in code, with no model and no tool (the fake brain
    stands in for it here): the call ends once that answer has been heard."""
    goodbye = "Goodbye! Talk to you soon."
    async with phone_server(tmp_path, goodbye, heard=("okay, bye!",)) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.closed.is_set(), 20)
        heard_ms = call.played.speech_ms()
    assert call.close_code == (1000, "the agent ended the call")
    assert heard_ms >= len(goodbye) * 10 * 0.9
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.ended == "agent"


class ToolBrain:
    """Calls ``tool`` with ``arguments`` when the caller's words hold ``when``; after the
    result, says ``then``; otherwise a short answer."""

    def __init__(self, when: str, tool: str, arguments: dict, then: str) -> None:
        self.when, self.tool, self.arguments, self.then = when, tool, arguments, then
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if request.tool_results:
            yield BrainDelta(text=self.then)
        elif self.when in request.current_input.lower():
            yield BrainDelta(tool_call=ToolCall("call_1", self.tool, dict(self.arguments)))
        else:
            yield BrainDelta(text="Hello, how can I help?")


TARGETS = "Assistant=+15550150|sip:desk@pbx.example.com"


async def test_the_agent_transfers_a_call_and_twilio_dials_the_target(tmp_path: Path) -> None:
    brain = ToolBrain("person", "transfer_call", {"target": "+15550150"}, "Putting you through.")
    async with phone_server(
        tmp_path, heard=("a person please",), brain=brain, telephony_transfer_targets=TARGETS
    ) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.closed.is_set(), 20)  # after the announcement was heard
        heard_ms = call.played.speech_ms()
        after = await call.webhook()  # Twilio asks the <Connect> action URL
    offered = {t.name: t for t in brain.requests[0].tools}
    assert offered["transfer_call"].parameters["properties"]["target"]["enum"] == [
        "+15550150", "sip:desk@pbx.example.com"
    ]  # fmt: skip
    assert "send_dtmf" in offered and "end_call" in offered
    assert heard_ms >= len("Putting you through.") * 10 * 0.9
    assert "<Dial><Number>+15550150</Number></Dial>" in after
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.ended == "agent" and phone.transfer_target == "+15550150"


async def test_a_transfer_to_a_target_the_role_does_not_allow_is_refused(tmp_path: Path) -> None:
    brain = ToolBrain("person", "transfer_call", {"target": "+19990000"}, "Sorry, I cannot.")
    async with phone_server(
        tmp_path, heard=("a person please",), brain=brain, telephony_transfer_targets=TARGETS
    ) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        events = await journaled(server, call, 4)
        await call.say(np.zeros(RATE, np.int16))
        still_open = not call.closed.is_set()
        await call.hang_up()
    assert still_open and events[2][1]["content"].startswith("Not transferred")
    phone = server.services.phone.get(call.call_sid)
    assert phone is not None and phone.transfer_target is None and phone.ended == "caller"


def _tone_power(pcm: np.ndarray, hz: float) -> float:
    """Goertzel-style power of one frequency in ``pcm`` (8 kHz)."""
    t = np.arange(pcm.size) / RATE
    return float(abs(np.dot(pcm.astype(np.float64), np.exp(-2j * np.pi * hz * t))) / pcm.size)


async def test_send_dtmf_plays_keypad_tones_on_a_twilio_call(tmp_path: Path) -> None:
    brain = ToolBrain("menu", "send_dtmf", {"digits": "1"}, "Done.")
    async with phone_server(tmp_path, heard=("the menu asks for one",), brain=brain) as server:
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        events = await journaled(server, call, 4)
        await until(lambda: call.played.speech_ms() >= 160, 10)
        await call.hang_up()
    assert events[2][1]["content"] == "Pressed 1."
    played = np.concatenate(call.played.pcm)[: int(RATE * 0.1)]  # the tones come first
    # '1' is 697 Hz + 1209 Hz; a neighbour's frequencies are absent.
    assert _tone_power(played, 697) > 10 * _tone_power(played, 770)
    assert _tone_power(played, 1209) > 10 * _tone_power(played, 1336)
