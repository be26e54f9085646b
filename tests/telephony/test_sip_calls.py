"""SIP calls against the real server's SIP endpoint (UDP, fake plugins), driven by a phone that
speaks SIP and RTP in real time (``runtime/telephony/sip_client.py``): the call's audio both
ways, barge-in, keypad tones, hang-ups from either side, re-INVITE, CANCEL, and the refusals
a user agent server owes (``runtime/telephony/sip_server.py`` rules 3 and 4)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from journal.events import EventKind
from runtime.server import RunningServer
from runtime.telephony import sip_server
from runtime.telephony.sip_client import RATE, SipPhone
from runtime.telephony.sip_message import PCMA, SipMessage, header_param
from tests.telephony.test_twilio_calls import (
    LONG_ANSWER,
    TARGETS,
    ToolBrain,
    journaled,
    phone_server,
    tone,
)
from tests.waiting import until

ANSWER = "Sure. Here is the answer. Anything else?"


@contextlib.asynccontextmanager
async def sip_server_running(
    tmp_path: Path, *answers: str, **overrides: object
) -> AsyncIterator[RunningServer]:
    overrides.setdefault("sip_listen", "127.0.0.1:0")
    async with phone_server(tmp_path, *answers, **overrides) as server:
        yield server


@contextlib.asynccontextmanager
async def phone(server: RunningServer, **kwargs: object) -> AsyncIterator[SipPhone]:
    assert server.sip is not None
    async with SipPhone(("127.0.0.1", server.sip.port), **kwargs) as p:  # type: ignore[arg-type]
        yield p


def question() -> np.ndarray:
    return np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)])


def speech_ms(p: SipPhone) -> float:
    return len(p.played.pcm) * 20.0


async def test_a_call_is_answered_heard_and_hung_up_by_the_caller(tmp_path: Path) -> None:
    async with sip_server_running(tmp_path, ANSWER) as server, phone(server) as p:
        answer = await p.call()
        assert answer.status == 200
        assert [a.status for a in p.answers][:2] == [100, 200]
        sdp = answer.body.decode()
        assert "m=audio" in sdp and "RTP/AVP 0 101" in sdp and "telephone-event/8000" in sdp
        assert answer.get("Contact").startswith("<sip:openrealtime@127.0.0.1:")
        await p.say(question())
        await until(lambda: speech_ms(p) >= len(ANSWER) * 10 * 0.95, 20)
        events = await journaled(server, p, 2)
        session = next(iter(server.services.live_sessions.values()))
        bye = await p.hang_up()
        await until(lambda: len(server.services.live_sessions) == 0)
    assert bye.status == 200
    assert [kind for kind, _ in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
    assert events[0][1]["text"] == "what is the weather"
    assert events[1][1]["text"] == ANSWER and not events[1][1].get("interrupted")
    assert session.config.output_format.kind == "audio/pcmu"
    call = server.services.phone.get(f"sip:{p.call_id}")
    assert call is not None and call.ended == "caller" and call.called == "+15550002222"
    # The answer was heard as it was spoken: about 10 ms a character, never in a burst.
    assert abs(speech_ms(p) - len(ANSWER) * 10) <= 60
    span = p.arrivals[-1] - p.arrivals[0]
    assert span >= 0.8 * (len(p.arrivals) - 1) * 0.020


async def test_barge_in_stops_the_answer_and_the_heard_prefix_is_what_was_sent(
    tmp_path: Path,
) -> None:
    async with (
        sip_server_running(tmp_path, LONG_ANSWER, "Second answer.") as server,
        phone(server) as p,
    ):
        await p.call()
        await p.say(question())
        await until(lambda: speech_ms(p) >= 1500, 20)
        sent = await p.say(question())
        barged_at = sent[int(0.3 / 0.02)]  # min_interrupt_ms: 300 ms of speech
        events = await journaled(server, p, 4)
        await p.hang_up()
    first = events[1][1]
    assert first["interrupted"] is True
    heard = first["heard_text"]
    assert heard and LONG_ANSWER.startswith(heard) and len(heard) < len(LONG_ANSWER) / 2
    # What arrived of the first answer ends soon after the barge-in, and matches the
    # heard prefix (10 ms a character) to a word and the line's few frames.
    gaps = [i for i in range(len(p.arrivals) - 1) if p.arrivals[i + 1] - p.arrivals[i] > 0.1]
    first_answer = p.arrivals[: gaps[0] + 1]
    assert first_answer[-1] - barged_at < 0.3
    assert abs(len(heard) * 10 - len(first_answer) * 20) < 400
    assert events[3][1]["text"] == "Second answer."


async def test_keypad_tones_and_sip_info_reach_the_agent_as_the_callers_words(
    tmp_path: Path,
) -> None:
    async with (
        sip_server_running(tmp_path, "Order found.", "Thanks.") as server,
        phone(server) as p,
    ):
        await p.call()
        for digit in "4711#":
            p.press(digit)
        await until(lambda: speech_ms(p) > 100, 20)
        info = p.build("INFO", headers={"Content-Type": "application/dtmf-relay"})
        info.body = b"Signal=9\r\nDuration=160\r\n"
        assert (await p.send(info)).status == 200
        info = p.build("INFO", headers={"Content-Type": "application/dtmf-relay"})
        info.body = b"Signal=#\r\nDuration=160\r\n"
        assert (await p.send(info)).status == 200
        events = await journaled(server, p, 4)
        await p.hang_up()
    inputs = [e["text"] for kind, e in events if kind == EventKind.USER_INPUT]
    assert inputs == ["(keypad: 4711)", "(keypad: 9)"]


async def test_the_agent_hangs_up_after_its_goodbye_was_sent(tmp_path: Path) -> None:
    async with (
        sip_server_running(tmp_path, "Goodbye, have a nice day.", heard=("thanks, bye",)) as server,
        phone(server) as p,
    ):
        await p.call()
        await p.say(question())
        async with asyncio.timeout(20):
            await p.hung_up.wait()
        await until(lambda: len(server.services.live_sessions) == 0)
    call = server.services.phone.get(f"sip:{p.call_id}")
    assert call is not None and call.ended == "agent"
    assert abs(speech_ms(p) - len("Goodbye, have a nice day.") * 10) <= 60  # all of it heard
    bye = next(r for r in p.requests if r.method == "BYE")
    assert header_param(bye.get("From"), "tag") == p.to_tag
    assert header_param(bye.get("To"), "tag") == p.from_tag


async def test_an_a_law_call_and_a_re_invite_that_holds_and_resumes(tmp_path: Path) -> None:
    async with (
        sip_server_running(tmp_path, LONG_ANSWER) as server,
        phone(server, codec=PCMA) as p,
    ):
        answer = await p.call()
        assert "RTP/AVP 8 101" in answer.body.decode()
        await p.say(question())
        await until(lambda: speech_ms(p) >= 200, 20)
        hold = await p.send(p.build("INVITE", body=p.offer(direction="sendonly")))
        p._ack(hold)
        assert hold.status == 200 and "a=recvonly" in hold.body.decode()
        await asyncio.sleep(0.1)  # frames already on their way
        held_at = speech_ms(p)
        await asyncio.sleep(0.5)
        assert speech_ms(p) == held_at  # on hold: nothing is sent
        resume = await p.send(p.build("INVITE", body=p.offer()))
        p._ack(resume)
        assert resume.status == 200 and "a=sendrecv" in resume.body.decode()
        await until(lambda: speech_ms(p) > held_at + 200, 10)
        session = next(iter(server.services.live_sessions.values()))
        assert session.config.output_format.kind == "audio/pcma"
        await p.hang_up()


async def test_requests_it_does_not_serve_get_the_right_answers(tmp_path: Path) -> None:
    async with (
        sip_server_running(tmp_path, telephony_numbers="+15550009999=nosuchrole") as server,
        phone(server) as p,
    ):
        options = await p.send(p.build("OPTIONS"))
        assert options.status == 200 and "INVITE" in options.get("Allow")
        register = await p.send(p.build("REGISTER"))
        assert register.status == 405 and "BYE" in register.get("Allow")
        assert (await p.send(p.build("FROBNICATE"))).status == 501
        assert (await p.send(p.build("BYE"))).status == 481
        assert (await p.send(p.build("INVITE"))).status == 488  # no offer
        g729 = p.offer(codecs="18")
        assert (await p.send(p.build("INVITE", body=g729))).status == 488
        needs = p.build("INVITE", body=p.offer(), headers={"Require": "100rel"})
        answer = await p.send(needs)
        assert answer.status == 420 and answer.get("Unsupported") == "100rel"
        loop = p.build("INVITE", body=p.offer(), headers={"Max-Forwards": "0"})
        assert (await p.send(loop)).status == 483
        text = p.build("INVITE", body=b"hello", headers={"Content-Type": "text/plain"})
        text.set("Content-Type", "text/plain")
        assert (await p.send(text)).status == 415
        p.called = "+15550009999"  # its role does not exist
        assert (await p.send(p.build("INVITE", body=p.offer()))).status == 404
        assert len(server.services.live_sessions) == 0


async def test_a_retransmitted_invite_gets_the_same_answer_and_one_session(
    tmp_path: Path,
) -> None:
    async with sip_server_running(tmp_path) as server, phone(server) as p:
        invite = p.build("INVITE", body=p.offer())
        first = await p.send(invite)
        again = await p.send(invite)  # the ACK was lost: the phone sends the INVITE again
        p._ack(first)
        assert first.status == again.status == 200
        assert first.get("To") == again.get("To") and first.body == again.body
        await until(lambda: len(server.services.live_sessions) == 1)
        await asyncio.sleep(0.2)
        assert len(server.services.live_sessions) == 1
        p.to_tag = header_param(first.get("To"), "tag")
        await p.hang_up()


async def test_cancel_before_the_answer_ends_the_invite_with_487(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opening = asyncio.Event()
    real_open = sip_server.open_phone_session

    async def slow_open(*args: object, **kwargs: object) -> object:
        opening.set()
        await asyncio.sleep(30)
        return await real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sip_server, "open_phone_session", slow_open)
    async with sip_server_running(tmp_path) as server, phone(server) as p:
        invite = p.build("INVITE", body=p.offer())
        pending = asyncio.ensure_future(p.send(invite))
        await asyncio.wait_for(opening.wait(), 10)
        cancel = p.build("CANCEL")
        cancel.set("Via", invite.get("Via"))  # the INVITE's branch
        cancel.set("CSeq", f"{invite.cseq[0]} CANCEL")
        assert (await p.send(cancel)).status == 200
        assert (await pending).status == 487
        await until(lambda: len(server.sip.dialogs) == 0 if server.sip else False)
        assert len(server.services.active_sessions) == 0


async def test_who_may_call_source_networks_and_trunk_credentials(tmp_path: Path) -> None:
    async with sip_server_running(tmp_path, sip_allow_networks="10.0.0.0/8") as server:
        async with phone(server) as p:
            assert (await p.send(p.build("INVITE", body=p.offer()))).status == 403
    trunks = {"sip_trunks": "pbx:s3cret-trunk", "sip_realm": "tests"}
    async with sip_server_running(tmp_path, **trunks) as server:
        async with phone(server) as p:
            challenge = await p.send(p.build("INVITE", body=p.offer()))
            assert challenge.status == 401
            assert 'realm="tests"' in challenge.get("WWW-Authenticate")
        async with phone(server, auth=("pbx", "wrong")) as p:
            assert (await p.call()).status == 403
        async with phone(server, auth=("pbx", "s3cret-trunk")) as p:
            assert (await p.call()).status == 200
            await p.hang_up()


async def test_at_capacity_a_call_is_busy(tmp_path: Path) -> None:
    async with sip_server_running(tmp_path, max_sessions=1) as server:
        async with phone(server) as first, phone(server) as second:
            assert (await first.call()).status == 200
            busy: SipMessage = await second.send(second.build("INVITE", body=second.offer()))
            assert busy.status == 486
            await first.hang_up()


async def test_the_agent_transfers_a_sip_call_by_refer(tmp_path: Path) -> None:
    brain = ToolBrain("person", "transfer_call", {"target": "+15550150"}, "Putting you through.")
    async with (
        phone_server(tmp_path, heard=("a person please",), brain=brain, sip_listen="127.0.0.1:0",
                     telephony_transfer_targets=TARGETS) as server,
        phone(server) as p,
    ):  # fmt: skip
        await p.call()
        await p.say(question())
        async with asyncio.timeout(20):
            await p.hung_up.wait()  # REFER, the phone's NOTIFY (200), then BYE
    host, port = p.local
    assert p.referred_to == f"sip:+15550150@{host}:{port}"  # a number: at the caller's trunk
    refer = next(r for r in p.requests if r.method == "REFER")
    assert refer.get("Referred-By").startswith("<sip:openrealtime@")
    assert speech_ms(p) >= len("Putting you through.") * 10 * 0.9  # announced, then moved
    call = server.services.phone.get(f"sip:{p.call_id}")
    assert call is not None and call.ended == "agent" and call.transfer_target == "+15550150"


async def test_send_dtmf_on_a_sip_call_is_rfc_4733_events(tmp_path: Path) -> None:
    brain = ToolBrain("menu", "send_dtmf", {"digits": "42#"}, "Done.")
    async with (
        phone_server(tmp_path, heard=("the menu asks",), brain=brain,
                     sip_listen="127.0.0.1:0") as server,
        phone(server) as p,
    ):  # fmt: skip
        await p.call()
        await p.say(question())
        await until(lambda: len(p.tones) == 3, 20)
        await p.hang_up()
    assert p.tones == ["4", "2", "#"]


async def test_a_caller_whose_rtp_stops_is_hung_up(tmp_path: Path) -> None:
    """A phone that vanished without BYE: the server's comfort silence must not keep the
    session alive; after ``sip_rtp_timeout_s`` it hangs up."""
    async with sip_server_running(tmp_path, sip_rtp_timeout_s=1.0) as server, phone(server) as p:
        await p.call()
        await until(lambda: len(server.services.live_sessions) == 1)
        assert p._clock is not None
        p._clock.cancel()  # the phone's RTP stops; its SIP socket still answers
        async with asyncio.timeout(10):
            await p.hung_up.wait()
        await until(lambda: len(server.services.live_sessions) == 0)
    call = server.services.phone.get(f"sip:{p.call_id}")
    assert call is not None and call.ended == "caller"
