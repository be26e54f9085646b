from __future__ import annotations

from pipeline.content import TurnContent
from plugins.brain.local import LocalBrain
from plugins.contracts import HistoryTurn


async def answer(
    text: str, history: tuple[HistoryTurn, ...] = (), language: str | None = None
) -> str:
    content = TurnContent("be brief", "", text, language=language, history=history)
    return "".join([d.text async for d in LocalBrain().stream(content.to_brain_input())])


async def test_social_turns_in_both_languages() -> None:
    assert "Hello" in await answer("hi there")
    assert await answer("谢谢你") == "不客气。"


async def test_unknown_questions_are_admitted() -> None:
    assert "do not know" in await answer("what is the capital of Peru?")
    assert "不知道" in await answer("秘鲁的首都是哪里?")


async def test_recall_reads_the_history_it_was_given() -> None:
    history = (HistoryTurn("user", "my dog is called Rex"), HistoryTurn("assistant", "Nice."))
    assert await answer("what did I say?", history) == 'You said: "my dog is called Rex"'
    assert "not said anything" in await answer("what did I say?")
    zh = (HistoryTurn("user", "我住在上海"), HistoryTurn("assistant", "好的。"))
    assert await answer("我刚才说了什么", zh, language="zh") == "你刚才说:“我住在上海”"


async def test_answers_about_the_user_from_memory_data() -> None:
    content = TurnContent(
        "be brief",
        "",
        "What do you know about me?",
        memory_data="<memory_data>\n- I prefer short answers\n- I live in Berlin\n</memory_data>",
    )
    text = "".join([d.text async for d in LocalBrain().stream(content.to_brain_input())])
    assert text == ("You told me: you prefer short answers; you live in Berlin")
    assert "do not remember" in await answer("what do you remember about me?")
    zh = TurnContent(
        "", "", "你记得我什么", memory_data="<memory_data>我喜欢简洁回答</memory_data>"
    )
    text = "".join([d.text async for d in LocalBrain().stream(zh.to_brain_input())])
    assert text == "你跟我说过:你喜欢简洁回答"
