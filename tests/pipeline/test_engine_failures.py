"""A failed turn is one failed turn, and never silent (SPEC RT-11).

A failure is injected at every stage of turn N — the ASR, the brain before its first token and
in mid-stream, TTS, a tool, the journal's write — and turn N+1 must be answered and journaled.
Each failure ends its response with ``response.done`` failed (``status_details.error`` as GA
has it), the person hears the role's apology in voice (not in text only), and the engine tells
its owner once (stage, code, timings; never content). Virtual time throughout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

from journal.errors import JournalUnavailable
from journal.events import EventKind, NewEvent, ThreadRef
from pipeline.engine_config import FAILURE_MESSAGES, TurnFailure
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from plugins.fakes import FakeBrain, FakeTTS, Faults
from tests.conversation_harness import Conversation, conversation
from tests.virtual_time import in_virtual_time

SORRY = FAILURE_MESSAGES["en"]


class StageBrain:
    """Answers ``Answer N.``; told to, it fails mid-stream or calls a tool first."""

    def __init__(self) -> None:
        self.mid_stream_failure = False
        self.call_tool = False
        self.calls = 0

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.calls += 1
        if self.call_tool and not request.tool_results:
            yield BrainDelta(tool_call=ToolCall(f"call_{self.calls}", "lookup", {}))
            return
        yield BrainDelta(text="Answer ")
        if self.mid_stream_failure:
            raise RuntimeError("a bug in the brain")  # not a PluginError: an internal error
        yield BrainDelta(text=f"{self.calls}.")


class FlakyJournal:
    """Fails the next ``fail_next`` appends (of events of kind ``only``, if given) with the
    journal being unreachable."""

    def __init__(self, convo: Conversation, *, only: EventKind | None = None) -> None:
        self.store = convo.store
        self.fail_next = 0
        self.only = only

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent], **kw: Any) -> Any:
        if self.fail_next and (self.only is None or any(e.kind is self.only for e in events)):
            self.fail_next -= 1
            raise JournalUnavailable("the journal is down (scripted)")
        return await self.store.append(thread, events, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def failures_of(convo: Conversation) -> list[TurnFailure]:
    seen: list[TurnFailure] = []
    convo.engine.responder.on_turn_failed = seen.append
    return seen


async def spoken_turn(convo: Conversation, words: str) -> dict[str, Any]:
    await convo.say(words, ms=600)
    done = await convo.until("response.done")
    await convo.silence(ms=2_000)  # the answer plays out
    return done.wire


def journaled(events: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [
        (e["kind"], e["text"])
        for e in events
        if e["kind"] in (EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT)
    ]


def assert_failed_with_apology(done: dict[str, Any], code: str, *, said: str = SORRY) -> None:
    response = done["response"]
    assert response["status"] == "failed"
    assert response["status_details"]["error"]["code"] == code
    assert response["output_text"].endswith(said)


@in_virtual_time
async def test_a_failed_asr_is_apologised_for_and_the_next_spoken_turn_is_answered() -> None:
    asr_faults = Faults(fail=True)
    async with conversation(asr_faults=asr_faults, brain=FakeBrain(["Yes."])) as convo:
        seen = failures_of(convo)
        done = await spoken_turn(convo, "first question")
        assert_failed_with_apology(done, "plugin_error")
        assert [(f.stage, f.code) for f in seen] == [("asr", "plugin_error")]

        asr_faults.fail = False
        done = await spoken_turn(convo, "second question")
        assert done["response"]["status"] == "completed"
        assert journaled(await convo.journal()) == [
            (EventKind.USER_INPUT, "second question"),
            (EventKind.ASSISTANT_OUTPUT, "Yes."),
        ]


@in_virtual_time
async def test_a_brain_failing_before_its_first_token_then_the_next_turn() -> None:
    brain = FakeBrain(["Yes."], faults=Faults(fail=True))
    async with conversation(brain=brain) as convo:
        seen = failures_of(convo)
        done = await spoken_turn(convo, "first question")
        assert_failed_with_apology(done, "plugin_error")
        brain.faults.fail = False
        done = await spoken_turn(convo, "second question")
        assert done["response"]["status"] == "completed"
        assert [f.stage for f in seen] == ["brain"]
        assert journaled(await convo.journal())[-2:] == [
            (EventKind.USER_INPUT, "second question"),
            (EventKind.ASSISTANT_OUTPUT, "Yes."),
        ]


@in_virtual_time
async def test_a_brain_failing_mid_stream_is_an_internal_error_heard_after_its_words() -> None:
    brain = StageBrain()
    brain.mid_stream_failure = True
    async with conversation(brain=brain) as convo:
        seen = failures_of(convo)
        done = await spoken_turn(convo, "first question")
        assert_failed_with_apology(done, "internal_error")
        assert done["response"]["output_text"] == f"Answer {SORRY}"
        assert convo.events("error")[-1]["error"]["code"] == "internal_error"
        brain.mid_stream_failure = False
        done = await spoken_turn(convo, "second question")
        answer = done["response"]["output_text"]
        assert done["response"]["status"] == "completed" and answer.startswith("Answer ")
        assert [f.stage for f in seen] == ["brain_stream"]
        assert seen[0].elapsed_ms >= seen[0].waited_ms >= 0.0
        assert journaled(await convo.journal())[-1] == (EventKind.ASSISTANT_OUTPUT, answer)


@in_virtual_time
async def test_a_failed_tts_still_ends_the_response_and_the_next_turn_is_spoken() -> None:
    tts = FakeTTS(ms_per_char=40.0, faults=Faults(fail=True))
    async with conversation(tts=tts, brain=FakeBrain(["Yes."])) as convo:
        seen = failures_of(convo)
        done = await spoken_turn(convo, "first question")
        # The apology goes through the same TTS, which fails again: the error speaks alone.
        assert done["response"]["status"] == "failed"
        assert [f.stage for f in seen] == ["tts"]
        tts.faults.fail = False
        done = await spoken_turn(convo, "second question")
        assert done["response"]["status"] == "completed"
        assert journaled(await convo.journal())[-1] == (EventKind.ASSISTANT_OUTPUT, "Yes.")


@in_virtual_time
async def test_a_failing_tool_is_a_result_the_brain_reads_and_the_turn_is_answered() -> None:
    brain = StageBrain()
    brain.call_tool = True

    async def lookup(arguments: dict[str, Any]) -> str:
        raise RuntimeError("the tool broke")

    async with conversation(brain=brain) as convo:
        convo.engine.responder.tools = {"lookup": lookup}
        seen = failures_of(convo)
        done = await spoken_turn(convo, "first question")
        assert done["response"]["status"] == "completed"  # the brain answered from the error
        brain.call_tool = False
        done = await spoken_turn(convo, "second question")
        assert done["response"]["status"] == "completed"
        assert seen == []
        tools = [e for e in await convo.journal() if e["kind"] is EventKind.TOOL_RESULT]
        assert tools and tools[0]["is_error"] is True


@in_virtual_time
async def test_a_failed_journal_write_fails_the_turn_and_the_next_one_is_journaled() -> None:
    async with conversation(brain=FakeBrain(["Yes."])) as convo:
        journal = FlakyJournal(convo)
        convo.engine.conversation.journal = journal  # type: ignore[assignment]
        seen = failures_of(convo)
        journal.fail_next = 1
        done = await spoken_turn(convo, "first question")
        assert_failed_with_apology(done, "journal_unavailable")
        assert [f.stage for f in seen] == ["journal"]
        done = await spoken_turn(convo, "second question")
        assert done["response"]["status"] == "completed"
        assert journaled(await convo.journal()) == [
            (EventKind.USER_INPUT, "second question"),
            (EventKind.ASSISTANT_OUTPUT, "Yes."),
        ]


@in_virtual_time
async def test_text_only_responses_fail_without_an_apology() -> None:
    brain = FakeBrain(["Yes."], faults=Faults(fail=True))
    async with conversation(brain=brain) as convo:
        convo.engine.responder.defaults.audio_out = False
        convo.type("hello")
        done = await convo.until("response.done")
        assert done["response"]["status"] == "failed"
        assert done["response"]["output_text"] == ""


@in_virtual_time
async def test_a_role_that_says_nothing_on_failure_and_one_with_its_own_words() -> None:
    brain = FakeBrain(["Yes."], faults=Faults(fail=True))
    async with conversation(brain=brain) as convo:
        persona = convo.engine.responder.persona
        convo.engine.responder.persona = dataclasses.replace(persona, failure_message="")
        done = await spoken_turn(convo, "first question")
        assert done["response"]["output_text"] == ""
        convo.engine.responder.persona = dataclasses.replace(
            persona, failure_message="Oops, say again?"
        )
        done = await spoken_turn(convo, "second question")
        assert_failed_with_apology(done, "plugin_error", said="Oops, say again?")


def test_the_default_apologies_are_short_sentences_in_both_languages() -> None:
    assert set(FAILURE_MESSAGES) == {"en", "zh"}
    assert all(len(text) <= 60 for text in FAILURE_MESSAGES.values())


class HoldLog:
    """A ``ModelHold`` that records when the session held and released the model."""

    def __init__(self, convo: Conversation) -> None:
        self.convo = convo
        self.log: list[tuple[str, float]] = []

    def hold(self, lane: str) -> None:
        self.log.append(("hold", self.convo.now))

    def release(self, lane: str) -> None:
        self.log.append(("release", self.convo.now))


@in_virtual_time
async def test_the_model_is_held_from_speech_until_the_answer_is_generated_not_played() -> None:
    async with conversation(brain=FakeBrain(["A long enough answer to play."])) as convo:
        holds = HoldLog(convo)
        convo.engine.model_hold.hold = holds
        await convo.say("first question", ms=600)
        done = await convo.until("response.done")
        first_audio = convo.events("response.output_audio.delta")[0].at
        # Held once: from the person's first words (VAD, 60 ms in) to the answer's last
        # sentence handed to TTS — released before the answer has played out.
        assert [kind for kind, _ in holds.log] == ["hold", "release"]
        (_, held_at), (_, released_at) = holds.log
        assert held_at == 60.0
        assert released_at <= first_audio < done.at
        convo.type("and a typed one")
        await convo.until("response.done")
        assert [kind for kind, _ in holds.log] == ["hold", "release"] * 2


@in_virtual_time
async def test_an_answer_heard_whole_whose_record_fails_is_not_apologised_for() -> None:
    async with conversation(brain=FakeBrain(["Yes."])) as convo:
        journal = FlakyJournal(convo)
        convo.engine.conversation.journal = journal  # type: ignore[assignment]
        seen = failures_of(convo)
        convo.type("hello")
        await convo.until("response.created")  # the typed item is journaled by now
        journal.fail_next = 1  # the answer's own record
        done = await convo.until("response.done")
        assert done["response"]["status"] == "failed"
        assert done["response"]["output_text"] == "Yes."
        assert [f.stage for f in seen] == ["finalize"]


@in_virtual_time
async def test_an_interrupted_answer_whose_record_fails_still_gets_its_done() -> None:
    brain = FakeBrain(["A long answer that the person will cut short in the middle."])
    async with conversation(brain=brain) as convo:
        journal = FlakyJournal(convo)
        convo.engine.conversation.journal = journal  # type: ignore[assignment]
        convo.type("hello")
        await convo.until("response.output_audio.delta")
        journal.fail_next = 1  # the interrupted answer's record
        assert convo.cancel()
        done = await convo.until("response.done")
        assert done["response"]["status"] == "cancelled"
        assert convo.events("error")[-1]["error"]["code"] == "journal_unavailable"
        convo.type("again")
        done = await convo.until("response.done")
        assert done["response"]["status"] == "completed"
