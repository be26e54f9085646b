"""Computed ahead (``pipeline.responder`` Rule 7): when the person starts to speak, a brain with
``prepare`` is given the coming turn's context without its words, so a shared model computes
the prompt's start while they speak. Virtual time."""

from __future__ import annotations

from plugins.contracts import BrainInput
from plugins.fakes import FakeBrain
from tests.conversation_harness import Conversation, conversation
from tests.virtual_time import in_virtual_time


class PreparingBrain(FakeBrain):
    """FakeBrain that records what it was given ahead, and when."""

    def __init__(self, convo_clock: list[Conversation], *, fail: bool = False) -> None:
        super().__init__(["Answer one.", "Answer two.", "Answer three."])
        self.clock = convo_clock
        self.fail = fail
        self.prepared: list[tuple[BrainInput, float]] = []

    async def prepare(self, request: BrainInput) -> None:
        self.prepared.append((request, self.clock[0].now))
        if self.fail:
            raise RuntimeError("a bug in the brain's preparation")


class Holds:
    """A shared model's ``ModelHold`` (a session has one only with the local model)."""

    def hold(self, lane: str) -> None:
        pass

    def release(self, lane: str) -> None:
        pass


async def spoken(convo: Conversation, words: str) -> None:
    await convo.say(words, ms=600)
    await convo.until("response.done")  # the next one after the cursor
    await convo.silence(ms=2_000)


@in_virtual_time
async def test_the_brain_is_given_the_coming_turn_without_its_words_when_speech_starts() -> None:
    clock: list[Conversation] = []
    brain = PreparingBrain(clock)
    async with conversation(brain=brain) as convo:
        clock.append(convo)
        convo.engine.model_hold.hold = Holds()
        await spoken(convo, "first question")
        await spoken(convo, "second question")

        (first, first_at), (second, second_at) = brain.prepared
        assert first_at == 60.0  # the VAD's start of speech, not the commit
        assert first.current_input == "" and first.history == ()
        assert first.session == convo.engine.voice_session_id
        assert [(t.role, t.line_text) for t in second.history] == [
            ("user", "first question"),
            ("assistant", "Answer one."),
        ]
        assert second.current_input == ""
        assert second.system == brain.requests[1].system  # the turn's own system message
        assert second_at < convo.events("input_audio_buffer.committed")[1].at


@in_virtual_time
async def test_nothing_is_computed_ahead_without_a_shared_model_or_for_typed_turns() -> None:
    clock: list[Conversation] = []
    brain = PreparingBrain(clock)
    async with conversation(brain=brain) as convo:
        clock.append(convo)
        await spoken(convo, "first question")  # no ModelHold: no shared model
        convo.engine.model_hold.hold = Holds()
        convo.type("a typed question")
        await convo.until("response.done")
        assert brain.prepared == []


@in_virtual_time
async def test_a_failure_computing_ahead_fails_nothing() -> None:
    clock: list[Conversation] = []
    brain = PreparingBrain(clock, fail=True)
    async with conversation(brain=brain) as convo:
        clock.append(convo)
        convo.engine.model_hold.hold = Holds()
        await spoken(convo, "first question")
        done = convo.events("response.done")[0]
        assert done.wire["response"]["status"] == "completed"
        assert len(brain.prepared) == 1
