"""A real SIP phone — Debian's baresip — calls the server's SIP endpoint on 127.0.0.1 (SPEC TEL-2,
issue 35's "real parts"): a recorded WAV question in, a spoken answer back over RTP, barge-in,
keypad tones, hold, and BYE from either side, over UDP and TCP, with and without a trunk's
digest credentials. The server runs fake plugins: the tone TTS makes what the phone heard
measurable (10 ms a character)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from benchmarks.common import free_udp_and_tcp_port
from journal.events import EventKind, ThreadRef
from runtime.server import RunningServer
from runtime.telephony.sip_server import Dialog
from tests.telephony.baresip import RATE, baresip, loud_spans, write_wav
from tests.telephony.test_twilio_calls import LONG_ANSWER, ToolBrain, phone_server, tone
from tests.waiting import until


def microphone(path: Path, *speech_at: float, seconds: float = 30.0) -> Path:
    """A WAV of silence with 0.8 s of speech (a tone) starting at each of ``speech_at``."""
    pcm = np.zeros(int(RATE * seconds), np.int16)
    for at in speech_at:
        start = int(RATE * at)
        pcm[start : start + int(RATE * 0.8)] = tone(0.8)
    write_wav(path, pcm)
    return path


async def journal(server: RunningServer) -> list[tuple[str, dict]]:
    calls = [c for c in server.services.phone._calls.values() if c.thread_id is not None]
    assert len(calls) == 1
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    ref = ThreadRef(owner.tenant, owner.user, calls[0].thread_id or "")
    return [(e.kind, dict(e.payload)) for e in await server.services.journal.read(ref)]


async def answered(server: RunningServer, count: int) -> None:
    """Until the call's journal holds ``count`` answers (the journal announces nothing)."""
    async with asyncio.timeout(30):
        while True:
            events = await journal(server)
            if sum(kind == EventKind.ASSISTANT_OUTPUT for kind, _ in events) >= count:
                return
            await asyncio.sleep(0.05)


def uri(server: RunningServer, number: str = "+15550002222", transport: str = "") -> str:
    assert server.sip is not None
    tail = f";transport={transport}" if transport else ""
    return f"sip:{number}@127.0.0.1:{server.sip.port}{tail}"


async def test_a_real_phone_converses_barges_in_presses_keys_and_hangs_up(
    tmp_path: Path,
) -> None:
    answers = (LONG_ANSWER, "Second answer.", "Order found.")
    async with phone_server(tmp_path, *answers, sip_listen="127.0.0.1:0") as server:
        wav = microphone(tmp_path / "question.wav", 0.5, 3.5)
        async with baresip(tmp_path / "baresip", wav) as phone:
            await phone.command("dial", uri(server))
            await phone.event("CALL_ESTABLISHED")
            await until(lambda: len(server.services.live_sessions) == 1)

            await answered(server, 2)
            await phone.command("sndcode", "42#")
            await answered(server, 3)
            events = await journal(server)
            await phone.command("hangup")
            await phone.event("CALL_CLOSED")
            await until(lambda: len(server.services.live_sessions) == 0)
        heard = phone.heard()
    kinds = [kind for kind, _ in events]
    assert kinds == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT] * 3
    assert events[0][1]["text"] == "what is the weather"
    first = events[1][1]
    assert first["interrupted"] is True and LONG_ANSWER.startswith(first["heard_text"])
    assert events[3][1]["text"] == "Second answer."
    assert events[4][1]["text"] == "(keypad: 42)" and events[5][1]["text"] == "Order found."
    # What the phone heard: the first answer after the question, cut by the barge-in at
    # 3.5 s (+ min_interrupt_ms 300), and its length matches the journal's heard prefix.
    spans = loud_spans(heard)
    first_span = next(s for s in spans if s[0] > 1.3)
    assert first_span[1] < 3.5 + 0.3 + 0.5
    assert abs((first_span[1] - first_span[0]) * 1000 - len(first["heard_text"]) * 10) < 500
    assert any(s[0] > first_span[1] for s in spans)  # the answers after it were heard
    call = next(iter(server.services.phone._calls.values()))
    assert call.ended == "caller"


async def test_the_agent_hangs_up_a_real_phone_over_tcp(tmp_path: Path) -> None:
    async with phone_server(
        tmp_path, "Goodbye!", heard=("thank you, bye",), sip_listen="127.0.0.1:0"
    ) as server:
        wav = microphone(tmp_path / "bye.wav", 0.5)
        async with baresip(tmp_path / "baresip", wav) as phone:
            await phone.command("dial", uri(server, transport="tcp"))
            await phone.event("CALL_ESTABLISHED")
            await phone.event("CALL_CLOSED", 30)  # the server's BYE
            await until(lambda: len(server.services.live_sessions) == 0)
        heard = phone.heard()
    call = next(iter(server.services.phone._calls.values()))
    assert call.ended == "agent"
    spans = loud_spans(heard)
    assert spans and abs(sum(e - s for s, e in spans) - len("Goodbye!") * 0.010) < 0.1


async def test_a_real_phone_with_a_trunks_credentials_and_on_hold(tmp_path: Path) -> None:
    async with phone_server(
        tmp_path, LONG_ANSWER, sip_listen="127.0.0.1:0", sip_trunks="pbx:trunk-secret"
    ) as server:
        wav = microphone(tmp_path / "q.wav", 0.5)
        account = ";auth_user=pbx;auth_pass=trunk-secret"
        async with baresip(tmp_path / "baresip", wav, account=account) as phone:
            await phone.command("dial", uri(server))
            await phone.event("CALL_ESTABLISHED")
            await until(lambda: len(server.services.live_sessions) == 1)
            await until(lambda: _dialog(server).link.voice.sent_frames > 10, 20)  # answering
            await phone.command("hold")  # a re-INVITE with a=sendonly: the server stops sending
            await until(lambda: _dialog(server).rtp.sending is False, 10)
            await phone.command("resume")
            await until(lambda: _dialog(server).rtp.sending is True, 10)
            await phone.command("hangup")
            await phone.event("CALL_CLOSED")
        await until(lambda: len(server.services.live_sessions) == 0)
    wrong = ";auth_user=pbx;auth_pass=not-the-secret"
    async with phone_server(
        tmp_path / "again", sip_listen="127.0.0.1:0", sip_trunks="pbx:trunk-secret"
    ) as server:
        async with baresip(tmp_path / "baresip2", wav, account=wrong) as phone:
            await phone.command("dial", uri(server))
            closed = await phone.event("CALL_CLOSED")
        assert "403" in closed.get("param", "") and not server.services.live_sessions


def _dialog(server: RunningServer) -> Dialog:
    assert server.sip is not None and len(server.sip.dialogs) == 1
    return next(iter(server.sip.dialogs.values()))


async def test_the_agent_transfers_a_real_phone_to_another_line(tmp_path: Path) -> None:
    """baresip follows the REFER: it calls the target — here the server's own other number,
    whose role is ``Sales`` — reports it up (NOTIFY), and the first call is hung up."""
    port = free_udp_and_tcp_port()
    target = f"sip:+15550160@127.0.0.1:{port}"
    brain = ToolBrain("person", "transfer_call", {"target": target}, "Putting you through.")
    async with phone_server(
        tmp_path,
        heard=("a person please", "hello sales"),
        brain=brain,
        sip_listen=f"127.0.0.1:{port}",
        telephony_transfer_targets=f"Assistant={target}",
        telephony_numbers="+15550160=Sales",
    ) as server:
        owner = await server.services.accounts.authenticate(server.token)
        assert owner is not None
        sales = await server.services.roles.create(
            owner.tenant, name="Sales", instructions="Sell.", voice=None, language=None,
            memory_enabled=False,
        )  # fmt: skip
        wav = microphone(tmp_path / "q.wav", 0.5)
        async with baresip(tmp_path / "baresip", wav) as phone:
            await phone.command("dial", uri(server))
            await phone.event("CALL_ESTABLISHED")
            transfer = await phone.event("TRANSFER", 30)
            assert transfer["param"] == f"<{target}>"
            calls = server.services.phone._calls
            await until(lambda: any(c.called == "+15550160" for c in calls.values()), 30)
            await until(lambda: any(c.transfer_target == target for c in calls.values()), 30)
            await phone.command("hangup")
    first = next(c for c in calls.values() if c.called == "+15550002222")
    second = next(c for c in calls.values() if c.called == "+15550160")
    assert first.ended == "agent" and first.transfer_target == target
    assert second.role_id == sales.id
