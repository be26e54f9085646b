"""A response's life (``pipeline/response.py`` Rule 1): the transition table, and through the
engine in virtual time, one ``response.done`` and one end of turn per response however it ends
— completed, interrupted, failed in the brain, failed writing its record, with nothing to
answer."""

from __future__ import annotations

from collections import Counter

import pytest

from journal.events import EventKind
from pipeline.response import RESPONSE_TRANSITIONS, Response, ResponseState, ResponseTrigger
from pipeline.response_events import ResponseEvents
from plugins.fakes import FakeBrain, Faults
from tests.conversation_harness import Conversation, conversation
from tests.pipeline.test_engine_failures import FlakyJournal
from tests.virtual_time import in_virtual_time

S, T = ResponseState, ResponseTrigger


def response() -> Response:
    return Response(
        1, 1, "resp_1", ResponseEvents(response_id="resp_1", item_id="item_1", generation=1)
    )


def test_finished_is_reached_from_every_state_once_and_left_never() -> None:
    for state in S:
        if state is S.FINISHED:
            assert not [t for (s, t) in RESPONSE_TRANSITIONS if s is state]
        else:
            assert RESPONSE_TRANSITIONS[(state, T.FINISH)] is S.FINISHED


def test_a_move_the_table_does_not_hold_is_an_error() -> None:
    r = response()
    assert r.state is S.RECORDING and r.recording and not r.created and not r.finalized
    with pytest.raises(RuntimeError, match="record_failed is not allowed in recording"):
        r.move(T.RECORD_FAILED)
    for trigger in (T.RECORDED, T.CREATED, T.FINALIZE, T.RECORD_FAILED):
        r.move(trigger)
    assert r.state is S.ANSWERING and r.created and not r.finalized  # the record failed
    r.move(T.FINISH)
    assert r.finalized and not r.created
    for trigger in T:
        with pytest.raises(RuntimeError):
            r.move(trigger)


def dones(convo: Conversation) -> Counter[str]:
    return Counter(r["response"]["id"] for r in convo.events("response.done"))


@in_virtual_time
async def test_every_response_has_one_done_and_one_end_of_turn_however_it_ends() -> None:
    brain = FakeBrain(
        ["Once upon a time there was a lighthouse keeper who kept the light.", "Sure.", "Yes."]
    )
    async with conversation(brain=brain, expect_errors=True) as convo:
        ended: list[float] = []
        convo.engine.responder.on_turn_end = lambda: ended.append(convo.now)
        # Completed, then interrupted by words over the answer (whose own turn completes).
        await convo.say("tell me a story", ms=800)
        await convo.until("response.output_audio.delta")
        await convo.silence(ms=1_000)
        await convo.say("wait stop", ms=600)
        await convo.until("response.done")
        await convo.until("response.done")
        await convo.silence(ms=3_000)
        # The answer's record fails: one failed done.
        journal = FlakyJournal(convo, only=EventKind.ASSISTANT_OUTPUT)
        journal.fail_next = 1
        convo.engine.conversation.journal = journal  # type: ignore[assignment]
        await convo.say("first question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=3_000)
        # The brain fails before its first token: one failed done.
        brain.faults = Faults(fail=True)
        await convo.say("second question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=3_000)
        statuses = [r["response"]["status"] for r in convo.events("response.done")]
        assert len(ended) == 4
        # Nothing to answer (create_response off): no done, one end of the turn.
        convo.engine.responder.defaults.auto_respond = False
        await convo.say("just noting", ms=600)
        await convo.until("conversation.item.input_audio_transcription.completed")
        await convo.silence(ms=2_000)
    assert statuses == ["cancelled", "completed", "failed", "failed"]
    assert [r["error"]["code"] for r in convo.events("error")] == [
        "journal_unavailable",  # the answer's record
        "plugin_error",  # the brain
    ]
    assert set(dones(convo).values()) == {1} and len(dones(convo)) == 4
    assert len(ended) == 5
