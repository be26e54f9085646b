"""LLMBrain under code's decisions, with a scripted fake of the process's LocalModel."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from pipeline.content import TurnContent
from plugins.brain.answer_check import Support, drawn_from
from plugins.brain.grounding import (
    ACKNOWLEDGED,
    NOT_IN_DOCUMENTS,
    NOT_REMEMBERED,
    NOTHING_EARLIER,
    Passage,
)
from plugins.brain.llm import (
    CAUSES,
    LLMBrain,
    chat_messages,
    lacks_the_kind,
    of_the_kind_asked,
)
from plugins.brain.local_model import Generation, LocalModelSettings
from plugins.brain.tool_loop import run_brain_with_tools
from plugins.contracts import BrainDelta, BrainInput, HistoryTurn, ToolCall, ToolResult, ToolSpec
from plugins.errors import PluginTimeout

KNOWLEDGE = ToolSpec(
    "knowledge_search",
    "Search the documents.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
ORDER_STATUS = ToolSpec(
    "order_status",
    "Look up an order.",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)
ZH_HISTORY = (
    HistoryTurn("user", "我是因为商品质量问题退货。"),
    HistoryTurn("assistant", "好的，明白了。"),
)
ZH_EVIDENCE = (
    "[source: 售后政策]\n<untrusted_knowledge>退货期限为签收后 7 天。"
    "质量问题退货的运费由商店承担。会员可以免费换货。</untrusted_knowledge>"
)
EN_EVIDENCE = (
    "[source: Shop returns]\n<untrusted_knowledge>Returns are accepted within 7 days of "
    "delivery. Opened items can be returned too.</untrusted_knowledge>"
)


class FakeModel:
    """What LLMBrain needs of LocalModel: ``settings`` and a streaming ``chat``.

    Each call plays the next script (the last one repeats); an exception in a script is raised
    at that point of the stream, an ``asyncio.Event`` is waited for (a stalling model)."""

    def __init__(self, *scripts: list[str | BaseException | asyncio.Event]) -> None:
        self.settings = LocalModelSettings()
        self.scripts = list(scripts) or [["ok"]]
        self.calls: list[dict[str, Any]] = []
        self.closed_early = 0
        self.prepared: list[tuple[list[dict[str, str]], str]] = []

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [call["payload"] for call in self.calls]

    async def chat(
        self,
        payload: dict[str, Any],
        *,
        lane: str,
        generation: Generation | None = None,
        start_deadline_s: float | None = None,
    ) -> AsyncGenerator[str, None]:
        index = len(self.calls)
        self.calls.append(
            {
                "payload": payload,
                "lane": lane,
                "generation": generation,
                "start_deadline_s": start_deadline_s,
            }
        )
        finished = False
        try:
            for piece in self.scripts[min(index, len(self.scripts) - 1)]:
                if isinstance(piece, BaseException):
                    raise piece
                if isinstance(piece, asyncio.Event):
                    await piece.wait()
                    continue
                yield piece
            finished = True
        finally:
            if not finished:
                self.closed_early += 1

    async def prepare(self, messages: list[dict[str, str]], *, lane: str) -> None:
        self.prepared.append((messages, lane))

    async def warm_up(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def turn(
    text: str,
    history: tuple[HistoryTurn, ...] = (),
    *,
    language: str | None = "zh",
    instructions: str = "你是星河商店的客服。",
    memory: str | None = None,
    tools: tuple[ToolSpec, ...] = (),
    results: tuple[str, ...] = (),
) -> BrainInput:
    request = TurnContent(
        instructions,
        "",
        text,
        language=language,
        memory_data=memory,
        tools=tools,
        history=history,
    ).to_brain_input(session="session-1")
    if not results:
        return request
    calls = tuple(
        ToolCall(f"call_{i}", "knowledge_search", {"query": text}) for i in range(len(results))
    )
    answers = tuple(
        ToolResult(f"call_{i}", "knowledge_search", content) for i, content in enumerate(results)
    )
    return dataclasses.replace(request, tool_calls=calls, tool_results=answers)


async def deltas(brain: LLMBrain, request: BrainInput) -> list[BrainDelta]:
    return [delta async for delta in brain.stream(request)]


async def spoken(brain: LLMBrain, request: BrainInput) -> str:
    return "".join(delta.text for delta in await deltas(brain, request))


def causes(brain: LLMBrain) -> list[str]:
    """Rule 12's trail of the turns so far, of session-1 (every turn here is that session's)."""
    assert {session for session, _ in brain.decisions} <= {"session-1"}
    return [cause for _, cause in brain.decisions]


# ---------------------------------------------------------------- code answers (Rules 1, 3)


@pytest.mark.parametrize(
    ("text", "language", "answer"),
    [
        ("你好", "zh", "你好！有什么可以帮你？"),
        ("hello", "en", "Hello! How can I help you?"),
        ("谢谢", "zh", "不客气。"),
    ],
)
async def test_social_turns_never_call_the_model(text: str, language: str, answer: str) -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    assert await spoken(brain, turn(text, language=language, tools=(KNOWLEDGE,))) == answer
    assert model.calls == []


async def test_recall_answers_from_the_history_without_the_model() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    assert await spoken(brain, turn("我刚才说了什么", ZH_HISTORY)) == (
        "你刚才说：“我是因为商品质量问题退货。”"
    )
    assert (
        await spoken(brain, turn("what did I just say?", language="en")) == (NOTHING_EARLIER["en"])
    )
    assert model.calls == []


@pytest.mark.parametrize(
    "results", [(), ("No documents matched.",), ("<untrusted_knowledge> </untrusted_knowledge>",)]
)
async def test_a_question_without_passages_gets_the_fixed_answer_and_no_model_call(
    results: tuple[str, ...],
) -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    zh = turn("星河商店的退货期限是多少?", results=results)
    en = turn("what is the return window?", language="en", results=results)

    assert await spoken(brain, zh) == NOT_IN_DOCUMENTS["zh"]
    assert await spoken(brain, en) == NOT_IN_DOCUMENTS["en"]
    assert model.calls == []
    assert causes(brain) == ["no_passage", "no_passage"]  # Rule 12: why, in no words


async def test_a_failed_knowledge_search_is_not_evidence() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("星河商店的退货期限是多少?")
    request = dataclasses.replace(
        request,
        tool_calls=(ToolCall("c1", "knowledge_search", {"query": "q"}),),
        tool_results=(ToolResult("c1", "knowledge_search", ZH_EVIDENCE, is_error=True),),
    )

    assert await spoken(brain, request) == NOT_IN_DOCUMENTS["zh"]
    assert model.calls == []


async def test_a_memory_question_without_memory_data_is_not_remembered_without_the_model() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    assert await spoken(brain, turn("我之前说过的学习目标是什么?")) == NOT_REMEMBERED["zh"]
    assert await spoken(brain, turn("what's my name?", language="en")) == NOT_REMEMBERED["en"]
    assert model.calls == []
    assert causes(brain) == ["memory_none", "memory_none"]


async def test_each_decision_is_logged_at_debug_with_its_session_and_never_the_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    brain = LLMBrain(FakeModel())  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger="openrealtime.brain.decision"):
        await spoken(brain, turn("星河商店的退货期限是多少?", results=("No documents matched.",)))
    (record,) = [r for r in caplog.records if r.name == "openrealtime.brain.decision"]
    assert record.getMessage() == "session-1: no_passage"
    assert set(CAUSES) >= set(causes(brain))


# ---------------------------------------------------------------- tool routing (Rule 2)


async def test_with_only_knowledge_search_offered_code_searches_with_the_context_aware_query() -> (
    None
):
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    out = await deltas(brain, turn("那运费谁承担?", ZH_HISTORY, tools=(KNOWLEDGE,)))

    assert out == [
        BrainDelta(
            tool_call=ToolCall(
                "llm_knowledge_search_1",
                "knowledge_search",
                {"query": "我是因为商品质量问题退货。 那运费谁承担?", "focus": "那运费谁承担?"},
            )
        )
    ]
    assert model.calls == []


async def test_a_statement_is_not_searched_even_when_search_is_offered() -> None:
    model = FakeModel(["明白。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    out = await deltas(brain, turn("我是因为商品质量问题退货。", tools=(KNOWLEDGE,)))

    assert all(delta.tool_call is None for delta in out)


async def test_with_a_function_offered_the_model_decides_in_its_own_call_format() -> None:
    start = ["<tool_call>\n", '{"name": "order_status", ', '"arguments": {"order_id"']
    arguments = ['{"name": "order_status", "arguments": {"order_id": "123"}}']
    model = FakeModel(start, arguments)
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("where is my order 123?", language="en", tools=(KNOWLEDGE, ORDER_STATUS))

    out = await deltas(brain, request)

    (delta,) = out
    assert delta.tool_call is not None
    assert (delta.tool_call.name, delta.tool_call.arguments) == (
        "order_status",
        {"order_id": "123"},
    )
    assert delta.tool_call.call_id.startswith("call_")  # unique: clients match outputs by it
    decision, filling = model.calls
    assert model.closed_early == 1  # the free start is stopped once the name is read
    assert decision["lane"] == "session-1"
    assert "response_format" not in decision["payload"]
    system = decision["payload"]["messages"][0]["content"]
    assert "<tools>" in system and '"name": "order_status"' in system
    assert "knowledge_search" not in system  # the knowledge search is code's, never offered
    assert decision["payload"]["messages"][-1] == {
        "role": "user",
        "content": "where is my order 123?",
    }
    schema = filling["payload"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["name"] == {"const": "order_status"}
    assert schema["properties"]["arguments"] == ORDER_STATUS.parameters
    assert filling["payload"]["messages"] == decision["payload"]["messages"]  # cached prefix
    assert json.loads(json.dumps(schema)) == schema


async def test_when_no_function_fits_the_knowledge_search_uses_codes_query() -> None:
    model = FakeModel(["运费", "由买家承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("那运费谁承担?", ZH_HISTORY, tools=(KNOWLEDGE, ORDER_STATUS))

    (delta,) = await deltas(brain, request)

    assert delta.tool_call == ToolCall(
        "llm_knowledge_search_1",
        "knowledge_search",
        {"query": "我是因为商品质量问题退货。 那运费谁承担?", "focus": "那运费谁承担?"},
    )
    assert model.closed_early == 1  # a reply in words is no call: stopped at once
    # The decision saw the person's previous message (a follow-up's subject is there).
    assert "我是因为商品质量问题退货。" in model.payloads[0]["messages"][-1]["content"]


@pytest.mark.parametrize("start", [["Sure, "], ["", " \n", "I can't"], []])
async def test_a_reply_in_words_makes_no_call(start: list[str]) -> None:
    model = FakeModel(start)
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("where is my order 123?", language="en", tools=(ORDER_STATUS,))

    assert await spoken(brain, request) == NOT_IN_DOCUMENTS["en"]
    assert len(model.calls) == 1  # only the decision


CONFIDE = ToolSpec(
    "confide",
    "A quiet place to say how the work is going.",
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


async def test_with_confide_offered_an_ordinary_question_is_still_searched_by_code() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    out = await deltas(brain, turn("那运费谁承担?", ZH_HISTORY, tools=(KNOWLEDGE, CONFIDE)))

    assert [d.tool_call.name for d in out if d.tool_call is not None] == ["knowledge_search"]
    assert model.calls == []  # no router call: confide costs an ordinary question nothing


async def test_the_model_is_never_offered_confide() -> None:
    model = FakeModel(["Sorry"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn(
        "where is my order 123?", language="en", tools=(KNOWLEDGE, ORDER_STATUS, CONFIDE)
    )

    out = await deltas(brain, request)

    assert all(d.tool_call is None or d.tool_call.name != "confide" for d in out)
    system = model.payloads[0]["messages"][0]["content"]
    assert '"name": "order_status"' in system and "confide" not in system


@pytest.mark.parametrize(
    ("text", "language"),
    [("No, that's wrong: my budget is 2000 euros.", "en"), ("不对，我说的是周三。", "zh")],
)
async def test_a_correction_confides_once_then_the_turn_is_answered(
    text: str, language: str
) -> None:
    model = FakeModel(["noted."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    tools = {"confide": _answered("Mistakes are part of the work.")}
    request = turn(text, language=language, tools=(KNOWLEDGE, CONFIDE))

    out = [d async for d in run_brain_with_tools(brain, request, tools)]

    calls = [d.tool_call for d in out if d.tool_call is not None]
    assert [c.name for c in calls] == ["confide"]
    assert calls[0].arguments["text"]
    assert "".join(d.text for d in out).strip()  # the person still gets an answer


@pytest.mark.parametrize(
    "text", ["What is the return period?", "退货期限是几天，对不对?", "I think I was wrong."]
)
def test_ordinary_turns_are_no_corrections(text: str) -> None:
    from plugins.brain.llm import is_correction

    assert not is_correction(text)


def _answered(answer: str):  # type: ignore[no-untyped-def]
    async def handler(arguments: dict[str, Any]) -> str:
        return answer

    return handler


async def test_no_routing_once_the_tool_round_has_results() -> None:
    model = FakeModel(["退货期限为签收后 7 天。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", tools=(KNOWLEDGE, ORDER_STATUS), results=(ZH_EVIDENCE,))

    out = await deltas(brain, request)

    assert all(delta.tool_call is None for delta in out)
    assert "response_format" not in model.payloads[0]


async def test_a_request_in_the_imperative_is_routed_to_the_roles_tools() -> None:
    model = FakeModel(
        ['{"name": "order_status"'],
        ['{"name": "order_status", "arguments": {"order_id": "123"}}'],
    )
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("Check the status of order 123.", language="en", tools=(KNOWLEDGE, ORDER_STATUS))

    out = await deltas(brain, request)

    assert [d.tool_call.name for d in out if d.tool_call] == ["order_status"]


# ---------------------------------------------------------------- answers from evidence (Rule 4)


async def test_with_passages_the_prompt_is_laid_out_for_the_prefix_cache() -> None:
    model = FakeModel(["质量问题退货的运费", "由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    history = (
        *ZH_HISTORY,
        HistoryTurn("tool_call", "{}", tool="knowledge_search"),
        HistoryTurn("tool_result", "x", tool="knowledge_search"),
    )
    request = turn(
        "运费由谁承担?",
        history,
        memory="<memory_data>\n- 我买的是耳机\n</memory_data>",
        tools=(KNOWLEDGE,),
        results=(ZH_EVIDENCE,),
    )

    await deltas(brain, request)

    (call,) = model.calls
    assert call["lane"] == "session-1"
    assert call["generation"] is brain.last_generation
    messages = call["payload"]["messages"]
    system = messages[0]
    assert system["role"] == "system"
    assert system["content"].startswith("你是语音助手")
    assert "你是星河商店的客服。" in system["content"]
    assert "<memory_data>\n- 我买的是耳机\n</memory_data>" in system["content"]
    assert "untrusted_knowledge>质量" not in system["content"]  # evidence is not in the system
    assert messages[1:3] == [
        {"role": "user", "content": "我是因为商品质量问题退货。"},
        {"role": "assistant", "content": "好的，明白了。"},
    ]
    last_user = messages[3]
    assert last_user["role"] == "user"
    question, *evidence = last_user["content"].split("\n")
    assert question == "运费由谁承担?"
    assert evidence
    assert all(
        line.startswith("[source: 售后政策] <untrusted_knowledge>")
        and line.endswith("</untrusted_knowledge>")
        for line in evidence
    )
    assert "质量问题退货的运费由商店承担。" in last_user["content"]
    assert "会员可以免费换货" not in last_user["content"]  # only the best sentences
    assert messages[4] == {"role": "assistant", "content": "根据《售后政策》，"}
    assert len(messages) == 5
    assert call["payload"]["max_tokens"] == brain.max_answer_tokens
    assert call["payload"]["temperature"] == brain.temperature


async def test_the_spoken_answer_starts_with_the_source() -> None:
    model = FakeModel(["质量问题退货的运费", "由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("运费由谁承担?", ZH_HISTORY, results=(ZH_EVIDENCE,))

    out = await deltas(brain, request)

    assert out[0] == BrainDelta(text="根据《售后政策》，", speak_now=True)
    assert "".join(d.text for d in out) == "根据《售后政策》，质量问题退货的运费由商店承担。"


async def test_the_english_answer_starts_with_the_source_too() -> None:
    model = FakeModel(["returns are accepted ", "within 7 days ", "of delivery."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("how many days do I have for returns?", language="en", results=(EN_EVIDENCE,))

    text = await spoken(brain, request)

    assert text == ("According to Shop returns, returns are accepted within 7 days of delivery.")
    assert model.payloads[0]["messages"][-1] == {
        "role": "assistant",
        "content": "According to Shop returns, ",
    }


async def test_a_sentence_with_a_number_not_in_the_evidence_is_dropped() -> None:
    model = FakeModel(["退货期限为签收后 7 天。", "运费是 15 元。", "请保留收据。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", results=(ZH_EVIDENCE,))

    text = await spoken(brain, request)

    # 15 is in no evidence; "请保留收据" is not in the evidence either (unsupported words).
    assert text == "根据《售后政策》，退货期限为签收后 7 天。"


def test_support_keeps_faithful_sentences_and_drops_inventions_and_echoes() -> None:
    support = Support("Wipe the ear cushions with a slightly damp cloth.", "How do I clean them?")
    assert support.faithful("Wipe the ear cushions with a damp cloth.")
    assert not support.faithful(
        "Cleaning the cushions is the recommended way to maintain the battery's performance."
    )
    echo = Support("年度累计消费满 3000 元升级为银卡会员。", "怎样才能成为银卡会员?")
    assert not echo.faithful("你可以成为银卡会员。")  # says nothing the question did not
    assert echo.faithful("年度累计消费满 3000 元可以升级为银卡会员。")
    # An answer in the other language than the evidence: only its numbers are checked.
    cross = Support("Returns are accepted within 7 days.", "退货期限是多久?")
    assert cross.faithful("可以在 7 天内退货。")
    assert not cross.faithful("可以在 30 天内退货。")
    # A question is no answer: an FAQ's question line, copied, says nothing.
    faq = Support("用超了怎么收费？超出的流量每 GB 5 元。", "流量超了要多交多少？")
    assert not faq.faithful("用超了怎么收费？")
    assert faq.faithful("超出的流量每 GB 5 元。")


async def test_an_faq_question_line_is_never_the_answer() -> None:
    model = FakeModel(["用超了怎么收费？"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    evidence = (
        "[source: 套餐问答]\n<untrusted_knowledge>用超了怎么收费？超出的流量每 GB 5 元，"
        "每月最多收 60 元。</untrusted_knowledge>"
    )

    said = await spoken(brain, turn("用超了怎么收费？", results=(evidence,)))

    assert said.startswith("根据《套餐问答》，") and "？" not in said


async def test_the_prompt_s_markup_copied_with_the_evidence_is_never_spoken() -> None:
    # Found in the second dev set: the model copied the passage with its tags around it.
    model = FakeModel(["<untrusted_knowledge>退货期限为签收后 7 天。", "</untrusted_knowledge>"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    said = await spoken(brain, turn("退货期限是几天?", results=(ZH_EVIDENCE,)))

    assert said == "根据《售后政策》，退货期限为签收后 7 天。"


async def test_a_bare_none_is_no_answer_and_code_reads_the_evidence() -> None:
    # "According to 松间小馆用餐须知,无。" was said for an English question about a Chinese
    # document: the model's "nothing" is dropped like any unsupported sentence.
    model = FakeModel(["无。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    out = await deltas(brain, turn("退货期限是几天?", results=(ZH_EVIDENCE,)))

    assert [d.text for d in out] == ["根据《售后政策》，", "退货期限为签收后 7 天。"]
    assert not Support("Returns are accepted within 7 days.", "Returns?").faithful("None.")


def test_only_sentences_holding_the_kind_of_answer_asked_are_shown() -> None:
    hours = Passage("Inn", "Breakfast is served from 7:00 to 10:30 am.")
    prices = Passage("Inn", "Breakfast costs $18 per adult and $9 per child.")
    asked = "My kids are 3 and 8. What do they pay for breakfast?"
    assert of_the_kind_asked(asked, [hours, prices]) == [prices]
    assert of_the_kind_asked("When is breakfast?", [hours, prices]) == [hours, prices]
    assert of_the_kind_asked("What time does it open?", [prices]) == [prices]  # none fits


async def test_a_number_from_the_question_may_be_repeated() -> None:
    model = FakeModel(["returns after 10 days are not accepted."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("can I return it after 10 days?", language="en", results=(EN_EVIDENCE,))

    assert await spoken(brain, request) == (
        "According to Shop returns, returns after 10 days are not accepted."
    )


async def test_when_every_sentence_is_dropped_the_best_evidence_sentence_is_spoken() -> None:
    model = FakeModel(["退货期限是 30 天。", "过了 30 天就不行"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", results=(ZH_EVIDENCE,))

    out = await deltas(brain, request)

    assert [d.text for d in out] == ["根据《售后政策》，", "退货期限为签收后 7 天。"]


async def test_the_first_sentence_is_released_before_the_model_finishes() -> None:
    # The model fails after its first sentence: what was checked has already gone out.
    model = FakeModel(["退货期限为签收后 7 天。", "还", PluginTimeout("too long")])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", results=(ZH_EVIDENCE,))
    seen: list[str] = []

    with pytest.raises(PluginTimeout):
        async for delta in brain.stream(request):
            seen.append(delta.text)

    assert seen == ["根据《售后政策》，", "退货期限为签收后 7 天。"]


async def test_a_question_in_another_language_than_the_role_is_answered_in_its_own() -> None:
    model = FakeModel(["returns are accepted within 7 days."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("what is the return window?", language="zh", results=(EN_EVIDENCE,))

    await deltas(brain, request)

    assert len(model.calls) == 1  # evidence in another language is not quote-checked
    messages = model.payloads[0]["messages"]
    assert messages[0]["content"].startswith("你是语音助手")  # the system stays the role's
    assert messages[-2]["content"].endswith("(Answer in English.)")


async def test_the_next_turns_prompt_starts_with_this_turns_prompt_up_to_the_input() -> None:
    model = FakeModel(["质量问题退货的运费由商店承担。"], ["退货期限为签收后 7 天。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    first = turn("运费由谁承担?", ZH_HISTORY, results=(ZH_EVIDENCE,))
    answer = await spoken(brain, first)
    later_history = (
        *ZH_HISTORY,
        HistoryTurn("user", "运费由谁承担?"),
        HistoryTurn("assistant", answer),
    )
    second = turn("退货期限是几天?", later_history, results=(ZH_EVIDENCE,))

    await deltas(brain, second)

    before, after = (payload["messages"] for payload in model.payloads)
    shared = len(before) - 2  # everything before this turn's input message
    assert after[:shared] == before[:shared]
    assert after[shared]["role"] == "user"
    assert before[shared]["content"].startswith(after[shared]["content"])


# ---------------------------------------------------------------- weak evidence is quote-checked


async def test_weak_evidence_is_quote_checked_before_the_answer() -> None:
    # The passage answers, but covers under half the question's words (a paraphrase).
    model = FakeModel(["退货期限为签收后 7 天"], ["退货期限为签收后 7 天。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("买的东西几天内能退?", results=(ZH_EVIDENCE,))

    text = await spoken(brain, request)

    assert text == "根据《售后政策》，退货期限为签收后 7 天。"
    assert causes(brain) == ["answered"]
    check, answer = model.payloads
    assert check["temperature"] == 0
    assert "Question: 买的东西几天内能退?" in check["messages"][-1]["content"]
    # Shown once how: a rule that decides the question is copied; a text silent on it, NONE.
    assert [m["content"] for m in check["messages"][1:-1]][1::2] == [
        "Swimmers under 16 must come with an adult.",
        "NONE",
    ]
    assert "退货期限为签收后 7 天。" in check["messages"][-1]["content"]
    assert answer["messages"][-1] == {"role": "assistant", "content": "根据《售后政策》，"}


@pytest.mark.parametrize("quote", ["NONE", "", "营业时间是周一到周五上午九点"])
async def test_weak_evidence_the_model_cannot_quote_gets_the_fixed_answer(quote: str) -> None:
    model = FakeModel([quote], ["never spoken"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("买的东西几天内能退?", results=(ZH_EVIDENCE,))

    assert await spoken(brain, request) == NOT_IN_DOCUMENTS["zh"]
    assert len(model.calls) == 1  # the answer was never generated
    assert causes(brain) == ["weak_evidence"]


@pytest.mark.parametrize("verdict", ["否", "可以。", "Yes"])
async def test_a_yes_or_no_instead_of_a_quote_says_the_text_answers(verdict: str) -> None:
    # "开车过去停车要钱吗?" → "否": the model answered the yes/no question from the text.
    model = FakeModel([verdict], ["质量问题退货的运费由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("我退货的话要自己出钱寄回去吗?", results=(ZH_EVIDENCE,))

    assert await spoken(brain, request) == "根据《售后政策》，质量问题退货的运费由商店承担。"
    assert causes(brain) == ["answered"]
    assert len(model.calls) == 2


async def test_strong_evidence_is_answered_without_a_quote_check() -> None:
    model = FakeModel(["质量问题退货的运费由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    await deltas(brain, turn("运费由谁承担?", results=(ZH_EVIDENCE,)))

    assert len(model.calls) == 1


async def test_the_check_judges_two_sentences_though_the_model_is_shown_one() -> None:
    # Each sentence covers under half the question's words, the two together over half.
    rules = (
        "[source: Gym rules]\n<untrusted_knowledge>Guests get a locker. The sauna and pool "
        "are open until nine.</untrusted_knowledge>"
    )
    model = FakeModel(["guests get a locker."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    question = "Can guests use the lockers, towels, sauna and pool?"

    await deltas(brain, turn(question, language="en", results=(rules,)))

    assert len(model.calls) == 1  # no quote check, only the answer


# ---------------------------------------------------------------- memory and statements (Rule 5)


async def test_a_memory_question_is_answered_by_code_from_the_entry_that_answers_it() -> None:
    # Said back in the second person, without the model: it chose the wrong one of two
    # entries and copied "I" for "you".
    model = FakeModel(["我住在上海。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn(
        "我之前说过的学习目标是什么?",
        memory="<memory_data>\n- 我的学习目标是通过 HSK 四级\n- 我住在上海\n</memory_data>",
    )

    assert await spoken(brain, request) == "你跟我说过，你的学习目标是通过 HSK 四级。"
    assert model.calls == []


async def test_a_memory_question_gets_the_entry_with_its_attribute_not_one_sharing_a_word() -> None:
    brain = LLMBrain(FakeModel([]))  # type: ignore[arg-type]
    memory = "<memory_data>\n- I live in Lyon\n- I work as a pastry chef\n</memory_data>"
    request = turn("What do I do for a living?", language="en", memory=memory)

    assert await spoken(brain, request) == "You told me that you work as a pastry chef."


@pytest.mark.parametrize(
    ("text", "language"),
    [("我是因为商品质量问题退货。", "zh"), ("My name is Marco.", "en")],
)
async def test_a_statement_is_acknowledged_by_code(text: str, language: str) -> None:
    # The model, asked to acknowledge, answered "My name is Marco." with "Okay, 10 minutes!".
    model = FakeModel(["10 minutes!"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    out = await deltas(brain, turn(text, language=language))

    assert "".join(d.text for d in out) == ACKNOWLEDGED[language]
    assert model.calls == []


@pytest.mark.parametrize(
    ("memory", "cap"),
    [
        ("<memory_data>\n- 我喜欢简洁的回答\n</memory_data>", 48),
        ("<memory_data>\n- I prefer short answers\n</memory_data>", 48),
        ("<memory_data>\n- I live in Berlin\n</memory_data>", 80),
        (None, 80),
    ],
)
async def test_max_tokens_is_the_brief_cap_when_memory_asks_for_brevity(
    memory: str | None, cap: int
) -> None:
    model = FakeModel(["ok"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    await deltas(brain, turn("运费由谁承担?", results=(ZH_EVIDENCE,), memory=memory))

    assert model.payloads[0]["max_tokens"] == cap


# ---------------------------------------------------------------- the chat layout


def test_chat_messages_leave_out_tool_turns_and_the_summary() -> None:
    history = (
        HistoryTurn("summary", "earlier"),
        HistoryTurn("user", "a"),
        HistoryTurn("tool_call", "{}", tool="knowledge_search"),
        HistoryTurn("tool_result", "x", tool="knowledge_search"),
        HistoryTurn("assistant", "b"),
        HistoryTurn("user", "c"),
        HistoryTurn("assistant", "d", interrupted=True),
    )

    messages = chat_messages(turn("问题?", history), "zh", "FINAL")

    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
        ("assistant", "d …"),  # an interrupted output as it was heard
        ("user", "FINAL"),
    ]


def test_chat_messages_alternate_roles_even_when_the_history_does_not() -> None:
    said = [("user", "a"), ("assistant", "b"), ("assistant", "c"), ("user", "d")]
    request = turn("问题?", tuple(HistoryTurn(role, text) for role, text in said))  # type: ignore[arg-type]

    messages = chat_messages(request, "zh", "FINAL")

    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == "b\nc"
    assert messages[4]["content"] == "…"  # a placeholder keeps user turns apart
    assert messages[-1] == {"role": "user", "content": "FINAL"}


# ---------------------------------------------------------------- through the tool loop


async def test_a_question_runs_through_the_tool_loop_search_then_answer() -> None:
    model = FakeModel(["质量问题退货的运费", "由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    queries: list[str] = []

    async def knowledge_search(arguments: dict[str, Any]) -> str:
        queries.append(arguments["query"])
        return ZH_EVIDENCE

    request = turn("运费由谁承担?", ZH_HISTORY, tools=(KNOWLEDGE,))
    out = [
        delta
        async for delta in run_brain_with_tools(
            brain, request, {"knowledge_search": knowledge_search}
        )
    ]

    assert queries == ["运费由谁承担?"]
    assert out[0].tool_call is not None and out[0].tool_call.name == "knowledge_search"
    assert out[1].tool_result is not None and out[1].tool_result.content == ZH_EVIDENCE
    assert "".join(d.text for d in out) == "根据《售后政策》，质量问题退货的运费由商店承担。"
    assert len(model.calls) == 1  # the search round needed no model


@pytest.mark.parametrize("rewrite", [False, True])
async def test_a_question_with_nothing_found_through_the_tool_loop_is_admitted(
    rewrite: bool,
) -> None:
    model = FakeModel(['{"english": "return period", "chinese": "退货期限"}'])
    brain = LLMBrain(model, rewrite_queries=rewrite)  # type: ignore[arg-type]
    searched: list[str] = []

    async def knowledge_search(arguments: dict[str, Any]) -> str:
        searched.append(arguments["query"])
        return "No documents matched."

    request = turn("what is the return window?", language="en", tools=(KNOWLEDGE,))
    out: AsyncIterator[BrainDelta] = run_brain_with_tools(
        brain, request, {"knowledge_search": knowledge_search}
    )
    text = "".join([d.text async for d in out])

    assert text == NOT_IN_DOCUMENTS["en"]
    if rewrite:  # Rule 9: searched again, rewritten, once
        assert searched == ["what is the return window?", "return period", "退货期限"]
        assert len(model.calls) == 1
    else:
        assert searched == ["what is the return window?"]
        assert model.calls == []


async def test_closing_the_tool_loop_closes_the_models_stream_at_once() -> None:
    model = FakeModel(["退货期限为签收后 7 天。", "会员可以免费换货。", "还有"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", results=(ZH_EVIDENCE,))

    stream = run_brain_with_tools(brain, request, {})
    first = [await anext(stream), await anext(stream)]
    await stream.aclose()

    assert [d.text for d in first] == ["根据《售后政策》，", "退货期限为签收后 7 天。"]
    assert model.closed_early == 1


async def test_cancelling_the_consumer_closes_the_models_stream_at_once() -> None:
    stall = asyncio.Event()  # never set: the model stalls after its first sentence
    model = FakeModel(["退货期限为签收后 7 天。", stall, "never"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("退货期限是几天?", results=(ZH_EVIDENCE,))
    seen: list[str] = []

    async def consume() -> None:
        async for delta in run_brain_with_tools(brain, request, {}):
            seen.append(delta.text)

    task = asyncio.create_task(consume())
    for _ in range(100):  # a handful of loop turns bring both deltas
        if len(seen) == 2:
            break
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert seen == ["根据《售后政策》，", "退货期限为签收后 7 天。"]
    assert model.closed_early == 1


async def test_a_memory_answer_is_the_entry_never_what_the_model_would_say() -> None:
    model = FakeModel(["you live in Berlin."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn(
        "Do you remember my name?",
        language="en",
        memory="<memory_data>\n- my name is Ingrid\n- I live in Berlin\n</memory_data>",
    )

    assert await spoken(brain, request) == "You told me that your name is Ingrid."
    assert model.calls == []


# ---------------------------------------------------------------- memory in other words, by meaning

EN_MEMORY = "<memory_data>\n- I moved to Valencia\n- My name is Priya\n</memory_data>"


async def test_a_question_for_the_persons_name_in_other_words_is_answered_from_memory() -> None:
    model = FakeModel(["your name is Priya."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("What should you call me?", language="en", memory=EN_MEMORY)

    assert await spoken(brain, request) == "You told me that your name is Priya."


async def test_a_question_for_an_attribute_nobody_told_is_not_remembered_without_the_model() -> (
    None
):
    model = FakeModel(["your city is Valencia."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("What's my dog's name again?", language="en", memory=EN_MEMORY)

    assert await spoken(brain, request) == NOT_REMEMBERED["en"]
    assert model.calls == []


async def test_a_first_person_question_the_documents_do_not_answer_falls_back_to_memory() -> None:
    model = FakeModel(["you moved to Valencia."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn(
        "Is Valencia where I'm based now?", language="en", memory=EN_MEMORY, results=("",)
    )

    assert await spoken(brain, request) == "You told me that you moved to Valencia."


async def test_the_sentence_the_search_found_closest_in_meaning_is_evidence_first() -> None:
    hours = (
        "[source: 售后说明]\n<untrusted_knowledge>节假日期间请留言，客服会在下一个工作日回复。"
        "客户服务时间为工作日 09:00—18:00。</untrusted_knowledge>\n"
        "[closest: 客户服务时间为工作日 09:00—18:00。]"
    )
    model = FakeModel(["客户服务时间为工作日 09:00—18:00。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("客服几点开始上班?", results=(hours,))

    text = await spoken(brain, request)

    assert text == "根据《售后说明》，客户服务时间为工作日 09:00—18:00。"
    final = model.payloads[-1]["messages"][-2]["content"]
    # The closest sentence first; the holiday line, holding no clock time, is not shown at all
    # to a question for one (of_the_kind_asked).
    assert "服务时间" in final and "节假日" not in final


async def test_a_sentence_sharing_more_of_the_question_goes_before_the_closest_in_meaning() -> None:
    rules = (
        "[source: 星河商店售后说明]\n<untrusted_knowledge>星河商店售后说明\n退货期限\n"
        "星河商店的退货期限为签收后 7 天。</untrusted_knowledge>\n"
        "[closest: 星河商店的退货期限为签收后 7 天。]\n"
        "[source: 星河商店售后说明]\n<untrusted_knowledge>退货条件\n"
        "退货条件：商品未使用、包装完整，并提供订单号。</untrusted_knowledge>"
    )
    model = FakeModel(["商品未使用、包装完整，并提供订单号。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    await spoken(brain, turn("星河商店退货需要满足什么条件?", results=(rules,)))

    final = model.payloads[-1]["messages"][-2]["content"]
    # The shop's name is in both; the conditions are asked for.
    assert final.index("退货条件") < final.index("退货期限为")


async def test_the_model_sees_the_one_best_sentence_not_a_second_to_answer_with() -> None:
    meals = (
        "[source: Travel Expense Policy]\n<untrusted_knowledge>The daily meal allowance is 45 "
        "euros. Alcohol is never reimbursed.</untrusted_knowledge>"
    )
    model = FakeModel(["the daily meal allowance is 45 euros."])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    await spoken(brain, turn("What's the daily meal allowance?", language="en", results=(meals,)))

    final = model.payloads[-1]["messages"][-2]["content"]
    assert "45 euros" in final
    assert "Alcohol" not in final  # the 0.5B model answered with the second sentence


async def test_without_a_closest_line_evidence_is_chosen_by_shared_words_as_before() -> None:
    model = FakeModel(["质量问题退货的运费由商店承担。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn("运费由谁承担?", ZH_HISTORY, results=(ZH_EVIDENCE,))
    assert await spoken(brain, request) == "根据《售后政策》，质量问题退货的运费由商店承担。"


async def test_list_items_are_quoted_as_sentences_without_their_markers() -> None:
    fees = (
        "[source: 家长手册]\n<untrusted_knowledge>\n## 收费\n- 保育费：每月 2800 元\n"
        "- 伙食费：每天 22 元\n</untrusted_knowledge>"
    )
    model = FakeModel(["保育费是每月 9999 元。"])  # unsupported: code reads the evidence
    brain = LLMBrain(model)  # type: ignore[arg-type]

    text = await spoken(brain, turn("保育费每月多少钱?", results=(fees,)))

    assert text == "根据《家长手册》，保育费：每月 2800 元。"


async def test_when_nothing_the_model_said_holds_code_reads_one_sentence_not_a_passage() -> None:
    rules = (
        "[source: Library rules]\n<untrusted_knowledge>Renting costs 2 dollars a week. Cards are "
        "free for residents - the desk issues them. Fines stop at 10 dollars. Lost items are "
        "charged at list price.</untrusted_knowledge>"
    )
    # The quote check passes (Rule 4); the answer is unsupported: code reads the evidence.
    model = FakeModel(["Cards are free for residents"], ["It costs 99 dollars."])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    text = await spoken(
        brain,
        turn("how much is a card for someone who lives here?", language="en", results=(rules,)),
    )  # noqa: E501

    # The source's name, then one sentence of the passage. (Until Rule 12 named the cause,
    # this test passed on the don't-know sentence: the quote check had refused the evidence.)
    said = "According to Library rules, Cards are free for residents - the desk issues them."
    assert text == said
    assert causes(brain) == ["evidence_read"]


async def test_code_reads_the_evidence_sentence_the_model_s_dropped_answer_drew_on() -> None:
    policy = (
        "[source: Travel Policy]\n<untrusted_knowledge>Employees book economy class for flights "
        "shorter than six hours. Business class cabins are allowed for trips of six hours or "
        "more.</untrusted_knowledge>\n"
        "[closest: Employees book economy class for flights shorter than six hours.]"
    )
    business = "Business class cabins are allowed for trips of six hours or more."
    # The quote check passes; the answer holds a number the evidence does not (dropped), but
    # its words are the business-class sentence's, shown second.
    model = FakeModel([business], ["Yes, business class cabins are allowed for your 9-hour trip."])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    text = await spoken(
        brain,
        turn("Can I sit in a better cabin when I travel far?", language="en", results=(policy,)),
    )

    final = model.payloads[-1]["messages"][-2]["content"]
    assert final.index("economy") < final.index("Business")  # the closest in meaning first
    assert text == f"According to Travel Policy, {business}"
    assert causes(brain) == ["evidence_read"]


def test_the_sentence_drawn_on_is_the_first_when_the_dropped_answer_shares_no_word() -> None:
    said = ["Open at nine.", "Closed on Sundays."]
    assert drawn_from(said, ["Perhaps 99."], "when do you open?", "Shop") == "Open at nine."
    assert drawn_from(said, ["Sundays are 100 % closed."], "when?", "Shop") == "Closed on Sundays."
    # The question's and the source's words say nothing of which sentence it drew on.
    assert drawn_from(said, ["The shop is open on Sundays."], "open?", "Shop") == (
        "Closed on Sundays."
    )
    assert drawn_from([], ["x"], "q", "s") == ""


# ---------------------------------------------------------------- combination in code (Rule 8)

PLAN_EVIDENCE = (
    "[source: 云雀套餐]\n<untrusted_knowledge>畅享39元套餐每月含20G流量。"
    "副卡每张每月20元。</untrusted_knowledge>"
)


async def test_a_total_is_written_by_the_model_and_computed_by_code() -> None:
    model = FakeModel(['{"expression": "39 + 2*20", "unit": "元"}'])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    said = await spoken(
        brain, turn("39元的套餐加两张副卡，每月一共多少？", results=(PLAN_EVIDENCE,))
    )

    assert said == "根据《云雀套餐》，39 加 2 乘 20，等于79元。"
    (call,) = model.calls
    assert call["payload"]["response_format"]["type"] == "json_schema"
    assert "副卡每张每月20元" in call["payload"]["messages"][-1]["content"]


async def test_an_operand_the_evidence_does_not_state_falls_back_to_the_answer() -> None:
    model = FakeModel(['{"expression": "39 + 2*25", "unit": "元"}'], ["副卡每张每月20元。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    said = await spoken(
        brain, turn("39元的套餐加两张副卡，每月一共多少？", results=(PLAN_EVIDENCE,))
    )

    assert "89" not in said
    assert said == "根据《云雀套餐》，副卡每张每月20元。"
    assert len(model.calls) == 3  # the expression, the weak-evidence quote, the answer


async def test_a_single_lookup_makes_no_combination_call() -> None:
    model = FakeModel(["副卡每张每月20元。"])
    brain = LLMBrain(model)  # type: ignore[arg-type]

    await spoken(brain, turn("副卡多少钱？", results=(PLAN_EVIDENCE,)))

    assert all("response_format" not in payload for payload in model.payloads)


async def test_the_previous_message_s_numbers_count_as_stated() -> None:
    model = FakeModel(['{"expression": "99 + 2*20", "unit": "元"}'])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    history = (
        HistoryTurn("user", "如果换成99的套餐呢？"),
        HistoryTurn("assistant", "99元套餐每月含50G流量。"),
    )

    said = await spoken(brain, turn("同样加两张，一共多少？", history, results=(PLAN_EVIDENCE,)))

    assert said.endswith("等于139元。")


# ---------------------------------------------------------------- search with the previous message

HOURS_EVIDENCE = (
    "[source: 售后政策]\n<untrusted_knowledge>客服服务时间为工作日 09:00—18:00。"
    "</untrusted_knowledge>"
)
ASKED_HOURS = (
    HistoryTurn("user", "客服几点开始上班?"),
    HistoryTurn("assistant", "根据《售后政策》，客服服务时间为工作日 09:00—18:00。"),
)


async def _nothing_found(
    text: str, history: tuple[HistoryTurn, ...], language: str = "zh"
) -> tuple[LLMBrain, FakeModel, list[BrainDelta]]:
    """The brain's turn after its first search for ``text`` found nothing (Rule 3)."""
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    nothing = ("No documents matched.",)
    request = turn(text, history, language=language, tools=(KNOWLEDGE,), results=nothing)
    return brain, model, await deltas(brain, request)


async def test_a_question_that_found_nothing_alone_is_searched_with_the_previous_message() -> None:
    brain, model, out = await _nothing_found("周末有人吗?", ASKED_HOURS)

    query = "客服几点开始上班? 周末有人吗?"
    assert [delta.tool_call for delta in out] == [
        ToolCall(
            "llm_knowledge_search_with_previous_2",
            "knowledge_search",
            {"query": query, "focus": "周末有人吗?"},  # the sentence named is its own
        )
    ]
    assert model.calls == [] and causes(brain) == ["search_with_previous"]


async def _said_after_previous(model: FakeModel, text: str) -> tuple[LLMBrain, str]:
    """What the brain says to ``text`` after its search alone found nothing and the search
    with the previous message ("客服几点开始上班?") found the hours (Rule 3)."""
    brain = LLMBrain(model)  # type: ignore[arg-type]
    query = f"客服几点开始上班? {text}"
    calls = (
        ToolCall("llm_knowledge_search_1", "knowledge_search", {"query": text}),
        ToolCall("llm_knowledge_search_with_previous_2", "knowledge_search", {"query": query}),
    )
    results = (
        ToolResult(calls[0].call_id, "knowledge_search", "No documents matched."),
        ToolResult(calls[1].call_id, "knowledge_search", HOURS_EVIDENCE),
    )
    request = turn(text, ASKED_HOURS, tools=(KNOWLEDGE,))
    request = dataclasses.replace(request, tool_calls=calls, tool_results=results)
    return brain, await spoken(brain, request)


async def test_the_search_with_the_previous_message_is_checked_on_the_persons_words() -> None:
    model = FakeModel(
        ["客服服务时间为工作日 09:00—18:00"], ["周末不上班，客服服务时间为工作日 09:00—18:00。"]
    )
    brain, said = await _said_after_previous(model, "周末有人吗?")

    # Short, but its words do not point back: Rule 4 judges the person's own question, not the
    # previous one in front of it (whose answer the evidence holds).
    assert model.payloads[0]["messages"][-1]["content"].endswith("Question: 周末有人吗?")
    assert said.startswith("根据《售后政策》，") and "09:00—18:00" in said
    assert len(model.calls) == 2 and causes(brain) == ["answered"]


async def test_a_short_question_naming_its_own_subject_is_refused_on_a_none() -> None:
    model = FakeModel(["NONE"])
    brain, said = await _said_after_previous(model, "可以寄到国外吗?")

    assert said == "抱歉,我不知道:资料里没有提到这一点。"
    assert len(model.calls) == 1 and causes(brain) == ["weak_evidence"]


async def test_a_follow_up_whose_words_point_back_is_left_to_the_retrieval() -> None:
    model = FakeModel(["周末不上班，客服服务时间为工作日 09:00—18:00。"])
    brain, said = await _said_after_previous(model, "那周末呢?")

    # No quote check (「那…呢」 points back; too partial to be judged alone): one model call.
    assert said.startswith("根据《售后政策》，") and "09:00—18:00" in said
    assert len(model.calls) == 1 and causes(brain) == ["answered"]


@pytest.mark.parametrize(
    ("text", "history", "tools"),
    [
        ("周末有人吗?", (), (KNOWLEDGE,)),  # nothing said before
        ("那周末呢?", ASKED_HOURS, (KNOWLEDGE,)),  # a follow-up: searched so already
        ("阳光健身中心有游泳池吗?", ASKED_HOURS, (KNOWLEDGE,)),  # names its own subject
        ("周末有人吗?", ASKED_HOURS, ()),  # the last round: it must answer in words
    ],
)
async def test_no_search_with_the_previous_message_when_it_cannot_add_anything(
    text: str, history: tuple[HistoryTurn, ...], tools: tuple[ToolSpec, ...]
) -> None:
    brain = LLMBrain(FakeModel())  # type: ignore[arg-type]
    request = turn(text, history, tools=tools, results=("No documents matched.",))
    assert await spoken(brain, request) == NOT_IN_DOCUMENTS["zh"]
    assert causes(brain) == ["no_passage"]


# ---------------------------------------------------------------- search again (Rule 9)

TRIAL_EVIDENCE = (
    "[source: Nimbus FAQ]\n<untrusted_knowledge>Every plan starts with a free trial of 21 "
    "days.</untrusted_knowledge>"
)


async def test_a_question_the_search_missed_is_searched_again_in_both_languages() -> None:
    rewrite = '{"english": "free trial period", "chinese": "免费试用期"}'
    model = FakeModel([rewrite])
    brain = LLMBrain(model, rewrite_queries=True)  # type: ignore[arg-type]
    question = "Can I test-drive it before I pay?"
    request = turn(question, language="en", tools=(KNOWLEDGE,), results=("No documents matched.",))

    out = await deltas(brain, request)

    assert [delta.tool_call for delta in out] == [
        ToolCall("llm_knowledge_search_2", "knowledge_search", {"query": "free trial period"}),
        ToolCall("llm_knowledge_search_3", "knowledge_search", {"query": "免费试用期"}),
    ]
    (call,) = model.calls
    assert call["payload"]["response_format"]["type"] == "json_schema"
    assert call["payload"]["messages"][-1]["content"] == question


@pytest.mark.parametrize(
    ("rewrite", "admitted"),
    [("free trial period", True), ("money back guarantee refund", False)],
)
async def test_what_the_second_search_finds_must_cover_the_rewritten_query(
    rewrite: str, admitted: bool
) -> None:
    model = FakeModel(["You can try it free for 21 days."])
    brain = LLMBrain(model, rewrite_queries=True)  # type: ignore[arg-type]
    request = turn("Can I test-drive it before I pay?", language="en", tools=(KNOWLEDGE,))
    calls = (
        ToolCall("c1", "knowledge_search", {"query": "test-drive"}),
        ToolCall("c2", "knowledge_search", {"query": rewrite}),
    )
    results = (
        ToolResult("c1", "knowledge_search", "No documents matched."),
        ToolResult("c2", "knowledge_search", TRIAL_EVIDENCE),
    )
    request = dataclasses.replace(request, tool_calls=calls, tool_results=results)

    said = await spoken(brain, request)

    if admitted:
        assert said.startswith("According to Nimbus FAQ, ") and "21 days" in said
    else:
        assert said == NOT_IN_DOCUMENTS["en"]
        assert model.calls == []  # not searched a third time, no quote asked


async def test_the_last_round_is_never_searched_again() -> None:
    model = FakeModel()
    brain = LLMBrain(model, rewrite_queries=True)  # type: ignore[arg-type]
    request = turn("Can I test-drive it?", language="en", results=("No documents matched.",))

    assert await spoken(brain, request) == NOT_IN_DOCUMENTS["en"]
    assert model.calls == []


END_CALL = ToolSpec("end_call", "Hang up this phone call.", {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("text", "language", "goodbye"),
    [("Okay, bye!", "en", "Goodbye! Talk to you soon."), ("好的，再见", "zh", "再见！")],
)
async def test_on_a_phone_call_a_goodbye_hangs_up_by_code_then_says_goodbye(
    text: str, language: str, goodbye: str
) -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    tools = {"end_call": _answered("The call ends once the caller has heard your next words.")}
    request = turn(text, language=language, tools=(KNOWLEDGE, CONFIDE, END_CALL))

    out = [d async for d in run_brain_with_tools(brain, request, tools)]

    assert [d.tool_call.name for d in out if d.tool_call is not None] == ["end_call"]
    assert "".join(d.text for d in out) == goodbye
    assert model.calls == []  # no model: neither for the hang-up nor for the goodbye


@pytest.mark.parametrize(
    "text", ["Thank you very much.", "My name is Sam and I live in Berlin.", "Don't hang up yet."]
)
async def test_the_model_is_never_offered_end_call_and_other_turns_do_not_hang_up(
    text: str,
) -> None:
    model = FakeModel(["Sure."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = turn(text, language="en", tools=(KNOWLEDGE, CONFIDE, END_CALL))

    out = await deltas(brain, request)

    assert all(d.tool_call is None or d.tool_call.name != "end_call" for d in out)
    assert all("end_call" not in str(payload) for payload in model.payloads)


# ---------------------------------------------------------------- computed ahead (Rule 11)


async def test_the_prompts_computed_ahead_are_the_starts_of_the_turns_prompts() -> None:
    model = FakeModel(["好的，"], ["质量问题退货的运费", "由商店承担。"])  # no call; the answer
    brain = LLMBrain(model)  # type: ignore[arg-type]
    memory = "<memory_data>\n- 我买的是耳机\n</memory_data>"
    offered = (KNOWLEDGE, ORDER_STATUS)

    await brain.prepare(turn("", ZH_HISTORY, memory=memory, tools=offered))
    await deltas(brain, turn("运费由谁承担?", ZH_HISTORY, memory=memory, tools=offered))
    await deltas(
        brain,
        turn("运费由谁承担?", ZH_HISTORY, memory=memory, tools=offered, results=(ZH_EVIDENCE,)),
    )

    (decision_start, lane), (answer_start, _) = model.prepared
    assert lane == "session-1"
    decision, answer = (call["payload"]["messages"] for call in model.calls)
    assert decision_start[-1] == answer_start[-1] == {"role": "user", "content": ""}
    assert decision[:-1] == decision_start[:-1]  # the functions' system message
    assert answer[: len(answer_start) - 1] == answer_start[:-1]  # system, memory and history
    assert len(answer_start) == 4


async def test_without_functions_or_with_more_than_a_shortlist_only_the_answer_is_ahead() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    many = tuple(dataclasses.replace(ORDER_STATUS, name=f"order_status_{i}") for i in range(5))

    await brain.prepare(turn("", tools=(KNOWLEDGE,)))
    await brain.prepare(turn("", tools=(KNOWLEDGE, *many)))

    assert ["<tools>" in messages[0]["content"] for messages, _ in model.prepared] == [
        False,
        False,
    ]
    assert model.calls == []


# ---------------------------------------------------------------- a phone line's call control


def phone_tools(*targets: str) -> tuple[ToolSpec, ...]:
    from runtime.telephony.phone import END_CALL, SEND_DTMF, transfer_call_spec

    line = (END_CALL, transfer_call_spec(targets)) if targets else (END_CALL,)
    return (KNOWLEDGE, *line, SEND_DTMF)


@pytest.mark.parametrize(
    "text",
    ["My name is Sam and I live in Berlin.", "What is my name?", "我叫小王。", "退货运费谁出？"],
)
async def test_a_phone_lines_tools_are_never_the_models_decision(text: str) -> None:
    """Offered to the model, they were called for these (keys pressed, a transfer)."""
    model = FakeModel(["<tool_call>\n", '{"name": "send_dtmf"'])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    out = await deltas(brain, turn(text, tools=phone_tools("+15550150")))
    assert all(d.tool_call is None or d.tool_call.name == "knowledge_search" for d in out)
    assert all("<tools>" not in str(call["payload"]["messages"][0]) for call in model.calls)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("Can I speak to a person, please?", "+15550150"),
        ("Please put me through to sales.", "sip:sales@pbx.example.com"),
        ("我想转人工。", "+15550150"),
        ("Transfer me to 5550177 please.", "+15550177"),
    ],
)
async def test_asked_for_a_person_code_transfers_the_call_to_the_target_named(
    text: str, target: str
) -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    tools = phone_tools("+15550150", "sip:sales@pbx.example.com", "+15550177")
    (delta,) = await deltas(brain, turn(text, tools=tools))
    assert delta.tool_call is not None and delta.tool_call.name == "transfer_call"
    assert delta.tool_call.arguments["target"] == target
    assert model.calls == []


async def test_told_which_keys_to_press_code_presses_them() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    (delta,) = await deltas(brain, turn("Press one, then four seven pound.", tools=phone_tools()))
    assert delta.tool_call is not None
    assert (delta.tool_call.name, delta.tool_call.arguments) == ("send_dtmf", {"digits": "147#"})


async def test_no_transfer_without_a_target_or_when_the_caller_says_not_to() -> None:
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    for text, tools in (
        ("Can I speak to a person?", phone_tools()),  # this line allows no transfer
        ("I don't want to talk to a person.", phone_tools("+15550150")),
    ):
        out = await deltas(brain, turn(text, language="en", tools=tools))
        assert not any(d.tool_call and d.tool_call.name == "transfer_call" for d in out)


FERRY_EVIDENCE = (
    "[source: Northline Ferries]\n<untrusted_knowledge>A car with its driver costs £38 each "
    "way. Vehicles must be in the check-in lane 30 minutes before departure, or the space may "
    "be given away.</untrusted_knowledge>"
)


async def test_a_time_before_a_clock_time_is_computed_by_code_without_the_model() -> None:
    # The new ferry guide: the answer (10:30) is in no passage, and the model copied the rule.
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]

    said = await spoken(
        brain,
        turn("If the boat leaves at 11:00, by when must I be in the lane?", language="en",
             results=(FERRY_EVIDENCE,)),
    )  # fmt: skip

    assert said == "According to Northline Ferries, it is 30 minutes before 11:00, so 10:30."
    assert model.calls == [] and causes(brain)[-1] == "computed"


async def test_one_clock_time_against_a_rules_time_is_said_by_code_with_the_rule() -> None:
    # The new ferry guide: the quote check refused "Can I catch a 7 am boat in January?"
    # (the rule shares no word with it).
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    winter = (
        "[source: Northline Ferries]\n<untrusted_knowledge>The crossing takes 50 minutes. From "
        "November to March there is no sailing before 8:00 am.</untrusted_knowledge>"
    )

    said = await spoken(
        brain, turn("Can I catch a 7 am boat in January?", language="en", results=(winter,))
    )

    assert said == (
        "According to Northline Ferries, 7:00 am is before 8:00 am. From November to March "
        "there is no sailing before 8:00 am."
    )
    assert model.calls == [] and causes(brain)[-1] == "computed"


async def test_a_kind_of_answer_no_sentence_holds_is_not_known() -> None:
    # The near-miss dev set: the document names the fee, not its amount; the model read
    # "paid by the family" as the answer.
    model = FakeModel()
    brain = LLMBrain(model)  # type: ignore[arg-type]
    exams = (
        "[source: Evergreen Piano School]\n<untrusted_knowledge>The school prepares students "
        "for graded exams; the exam board's entry fee is paid by the family. Every enrolled "
        "student may perform at the recital.</untrusted_knowledge>"
    )

    said = await spoken(
        brain, turn("How much is the exam board's entry fee?", language="en", results=(exams,))
    )

    assert said == "I am sorry, I do not know: my documents do not say."
    assert model.calls == [] and causes(brain)[-1] == "no_kind"


def test_a_clock_time_may_be_said_as_a_time_before_another() -> None:
    showers = [Passage("健身中心", "淋浴间在闭馆前 30 分钟停止使用。")]
    assert not lacks_the_kind("淋浴间开到几点?", showers, showers)
    assert lacks_the_kind("淋浴间几点开?", [Passage("健身中心", "淋浴间免费。")], showers[:0])
    assert not lacks_the_kind("淋浴间收费吗?", showers, showers)  # no kind asked


ASKED_REFUND = (
    HistoryTurn("user", "How long do I have to ask for a refund?"),
    HistoryTurn("assistant", "According to Northline Ferries, within 14 days of the journey."),
)


async def test_a_short_question_searched_with_the_previous_message_is_searched_alone() -> None:
    # The new ferry guide: "Can I vape on the deck?" is short, so it was searched with the
    # refund question in front, found nothing, and was never searched as it was asked.
    brain, model, out = await _nothing_found("Can I vape on the deck?", ASKED_REFUND, "en")

    assert [delta.tool_call for delta in out] == [
        ToolCall("llm_knowledge_search_alone_2", "knowledge_search",
                 {"query": "Can I vape on the deck?"})
    ]  # fmt: skip
    assert model.calls == [] and causes(brain) == ["search_alone"]


async def test_a_question_pointing_back_is_not_searched_alone() -> None:
    brain, _, out = await _nothing_found("What about on the deck?", ASKED_REFUND, "en")

    said = "".join(delta.text for delta in out)
    assert said == "I am sorry, I do not know: my documents do not say."
    assert causes(brain) == ["no_passage"]


class _MeaningEmbedder:
    """Stands in for e5 in Rule 6c: a text is near another when they share a listed idea."""

    dim = 3
    IDEAS = (("arrive", "roll in", "get there"), ("cycle", "spare time"), ("birthday",))

    def _vector(self, text: str) -> Any:
        import numpy as np

        lowered = text.lower()
        vector = np.array(
            [float(any(w in lowered for w in idea)) for idea in self.IDEAS], dtype=np.float32
        )
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    async def reference(self) -> Any:
        import numpy as np

        return np.full((1, self.dim), 0.1, dtype=np.float32)

    async def passages(self, texts: Any) -> Any:
        import numpy as np

        return np.stack([self._vector(t) for t in texts])

    async def query(self, text: str) -> Any:
        return self._vector(text)


async def test_a_question_about_the_person_gets_the_entry_closest_in_meaning() -> None:
    # memory_match Rule 6c: no attribute or word of "get there" is in the entry.
    brain = LLMBrain(FakeModel([]), embedder=_MeaningEmbedder())  # type: ignore[arg-type]
    memory = (
        "<memory_data>\n- My name is Ana\n"
        "- I'm driving down from Leeds and should roll in around six\n</memory_data>"
    )
    request = turn("What time did I say I'd get there?", language="en", memory=memory)

    answer = await spoken(brain, request)

    assert "six" in answer and "Ana" not in answer
    # Asking for a birthday no entry has is not answered by the closest one.
    answer = await spoken(brain, turn("When's my birthday?", language="en", memory=memory))
    assert "six" not in answer and answer.startswith("I am sorry, I do not")


class _BrokenEmbedder(_MeaningEmbedder):
    async def query(self, text: str) -> Any:
        raise RuntimeError("no e5 here")


async def test_memory_by_meaning_without_an_embedder_leaves_the_rules_answer() -> None:
    brain = LLMBrain(FakeModel([]), embedder=_BrokenEmbedder())  # type: ignore[arg-type]
    memory = "<memory_data>\n- I'm driving down and should roll in around six\n</memory_data>"
    answer = await spoken(brain, turn("What time did I say I'd get there?", language="en",
                                      memory=memory))  # fmt: skip
    assert answer.startswith("I am sorry, I do not")


# ---------------------------------------------------------------- Rule 4 by the relevance judge


class FakeJudge:
    """What LLMBrain needs of ``RelevanceJudge``: ``answers`` (a verdict or an error)."""

    def __init__(self, verdict: bool | BaseException) -> None:
        self.verdict = verdict
        self.asked: list[tuple[str, str, str]] = []

    async def answers(self, text: str, question: str, *, lane: str) -> bool:
        self.asked.append((text, question, lane))
        if isinstance(self.verdict, BaseException):
            raise self.verdict
        return self.verdict


@pytest.mark.parametrize("verdict", [True, False])
async def test_with_a_judge_weak_evidence_is_judged_by_it_not_quoted(verdict: bool) -> None:
    model = FakeModel(["退货期限为签收后 7 天。"])
    judge = FakeJudge(verdict)
    brain = LLMBrain(model, judge=judge)  # type: ignore[arg-type]
    request = turn("买的东西几天内能退?", results=(ZH_EVIDENCE,))

    text = await spoken(brain, request)

    ((shown, question, lane),) = judge.asked
    assert "退货期限为签收后 7 天。" in shown
    assert (question, lane) == ("买的东西几天内能退?", "session-1")
    if verdict:
        assert text == "根据《售后政策》，退货期限为签收后 7 天。"
        assert len(model.calls) == 1  # the answer only: no quote asked of the brain's model
        assert causes(brain) == ["answered"]
    else:
        assert text == NOT_IN_DOCUMENTS["zh"]
        assert model.calls == []
        assert causes(brain) == ["weak_evidence"]


async def test_a_failing_judge_leaves_rule_4_to_the_quote_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = FakeModel(["NONE"], ["never spoken"])
    judge = FakeJudge(PluginTimeout("the judge was busy"))
    brain = LLMBrain(model, judge=judge)  # type: ignore[arg-type]
    request = turn("买的东西几天内能退?", results=(ZH_EVIDENCE,))

    with caplog.at_level(logging.WARNING, logger="plugins.brain.llm"):
        assert await spoken(brain, request) == NOT_IN_DOCUMENTS["zh"]

    assert len(judge.asked) == 1 and len(model.calls) == 1  # the quote check decided
    assert causes(brain) == ["weak_evidence"]
    assert "relevance judge failed (PluginTimeout)" in caplog.text
    assert "退货" not in caplog.text


async def test_strong_evidence_is_not_judged() -> None:
    model = FakeModel(["质量问题退货的运费由商店承担。"])
    judge = FakeJudge(False)
    brain = LLMBrain(model, judge=judge)  # type: ignore[arg-type]
    await deltas(brain, turn("运费由谁承担?", results=(ZH_EVIDENCE,)))

    assert judge.asked == [] and len(model.calls) == 1
