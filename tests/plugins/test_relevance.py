"""The relevance judge (plugins/brain/relevance.py): Rule 2's reading of the first token's
probabilities through the real ``LocalModel`` queue (a scripted backend), and the real 1.5B
model on two plain cases."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from plugins.brain import local_model as local_model_module
from plugins.brain.local_model import LocalModel, LocalModelSettings
from plugins.brain.model_files import QWEN_15B
from plugins.brain.relevance import (
    ANSWERS_AT,
    EXAMPLES,
    RelevanceJudge,
    judge_messages,
    yes_share,
)
from plugins.errors import PluginUnavailable
from tests.plugins.test_local_model import FakeBackend, timings_chunk


def logprob_chunk(top: dict[str, float]) -> dict[str, Any]:
    first = next(iter(top))
    return {
        "choices": [
            {
                "delta": {"content": first},
                "logprobs": {
                    "content": [
                        {
                            "token": first,
                            "logprob": top[first],
                            "top_logprobs": [{"token": t, "logprob": p} for t, p in top.items()],
                        }
                    ]
                },
            }
        ]
    }


def test_the_share_of_yes_sums_the_spellings_of_each_answer() -> None:
    top = {"No": math.log(0.3), "Yes": math.log(0.5), "yes": math.log(0.1), "The": -2.0}
    assert yes_share(top) == pytest.approx(0.6 / 0.9)
    assert yes_share({" 是": math.log(0.2), "否": math.log(0.2)}) == pytest.approx(0.5)


def test_without_yes_or_no_among_the_alternatives_there_is_no_share() -> None:
    assert yes_share({"The": -0.1, "I": -3.0}) is None
    assert yes_share({}) is None


def test_the_prompt_shows_the_examples_then_the_text_and_question() -> None:
    messages = judge_messages("Check-in starts at 3:00 pm.", "When can I get into my room?")

    assert messages[0]["role"] == "system"
    assert [m["content"] for m in messages[2 : 2 * len(EXAMPLES) + 1 : 2]] == ["yes", "no"]
    assert messages[-1] == {
        "role": "user",
        "content": "Text: Check-in starts at 3:00 pm.\nQuestion: When can I get into my room?\n"
        "Does the text answer the question?",
    }


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(
        local_model_module, "ensure_model_file", lambda cache_dir, model: Path("/fake/model.gguf")
    )

    def judge(backend: FakeBackend) -> RelevanceJudge:
        model = LocalModel(
            LocalModelSettings(), model=QWEN_15B, backend_factory=lambda path, s: backend
        )
        return RelevanceJudge(model)

    return judge


@pytest.mark.parametrize(("yes", "no", "answers"), [(0.7, 0.3, True), (0.2, 0.6, False)])
async def test_the_judge_reads_the_first_tokens_probabilities(
    scripted: Any, yes: float, no: float, answers: bool
) -> None:
    backend = FakeBackend(
        [logprob_chunk({"yes": math.log(yes), "no": math.log(no)}), timings_chunk()]
    )
    judge = scripted(backend)
    try:
        share = await judge.probability("A text.", "A question?", lane="s1")
        assert share == pytest.approx(yes / (yes + no))
        assert await judge.answers("A text.", "A question?", lane="s1") is answers
    finally:
        await judge.aclose()
    (payload, _) = backend.payloads
    assert payload["max_tokens"] == 1 and payload["logprobs"] is True
    assert payload["temperature"] == 0 and payload["top_logprobs"] >= 2


async def test_a_judge_that_says_neither_yes_nor_no_is_unavailable(scripted: Any) -> None:
    judge = scripted(FakeBackend([logprob_chunk({"Maybe": -0.1}), timings_chunk()]))
    try:
        with pytest.raises(PluginUnavailable):
            await judge.probability("A text.", "A question?", lane="s1")
    finally:
        await judge.aclose()


@pytest.mark.skipif(
    RelevanceJudge.unavailable_reason() is not None, reason="the 1.5B model's wheels"
)
async def test_the_real_judge_tells_an_answering_text_from_a_silent_one() -> None:
    judge = RelevanceJudge.local(LocalModelSettings(context_tokens=1024, start_deadline_s=120))
    text = (
        "Check-in starts at 3:00 pm and check-out is at 11:00 am. Guests arriving after "
        "11:00 pm use the kiosk in the lobby."
    )
    try:
        answering = await judge.probability(text, "What time is check-out?", lane="t")
        silent = await judge.probability(text, "Is there a swimming pool?", lane="t")
    finally:
        await judge.aclose()
    assert answering >= ANSWERS_AT > silent
