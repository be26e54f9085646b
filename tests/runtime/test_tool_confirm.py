"""Asking the person (``runtime/tool_confirm.py``): the bilingual answer classifier, the
question's phrasing and the confirmation's one-way lifecycle."""

from __future__ import annotations

import pytest

from plugins.contracts import ToolCall
from runtime.tool_confirm import (
    Confirmation,
    ConfirmState,
    classify_answer,
    question_for,
)
from tools.capability import Capability
from tools.errors import InvalidTool
from tools.registry import ClientTool, HttpTool, ToolRegistry

ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}},
         "required": ["order_id"]}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("yes", "once"), ("Yes, please.", "once"), ("ok", "once"), ("Sure, go ahead", "once"),
        ("go ahead", "once"), ("是的", "once"), ("好的。", "once"), ("可以", "once"),
        ("always", "lifetime"), ("Yes, always.", "lifetime"), ("from now on, yes", "lifetime"),
        ("以后都可以", "lifetime"), ("好，总是可以", "lifetime"),
        ("no", "deny"), ("No, don't.", "deny"), ("don't do that", "deny"),
        ("no, not always", "deny"), ("不", "deny"), ("不要", "deny"), ("别取消", "deny"),
        ("不可以", "deny"),
    ],
)  # fmt: skip
def test_short_answers_in_english_and_chinese_are_read(text: str, answer: str) -> None:
    assert classify_answer(text) == answer


@pytest.mark.parametrize(
    "text",
    ["", "What time do you open?", "I don't know", "is it raining", "今天天气怎么样",
     "yes I would like to know about the weather in Paris and in London tomorrow morning"],
)  # fmt: skip
def test_anything_else_is_no_answer(text: str) -> None:
    assert classify_answer(text) is None


def order_tool(confirm: str | None = "cancel order {order_id}") -> HttpTool:
    return HttpTool(name="cancel_order", description="", parameters=ORDER, method="POST",
                    url_template="https://shop.example/orders/{order_id}/cancel",
                    target="order_id", confirm=confirm)  # fmt: skip


def test_the_question_uses_the_tools_phrase_in_the_sessions_language() -> None:
    capability = Capability("cancel_order", "A10086", {"order_id": "A10086"})
    assert question_for(order_tool(), capability, "en") == "May I cancel order A10086?"
    assert question_for(order_tool(), capability, "zh") == "可以帮您cancel order A10086吗？"
    plain = order_tool(confirm=None)
    assert question_for(plain, capability, None) == "May I use cancel_order for A10086?"
    assert question_for(plain, capability, "zh") == "可以帮您用cancel_order处理A10086吗？"
    anything = Capability("take_photo", "*", {})
    photo = ClientTool(name="take_photo", description="", parameters={"type": "object"})
    assert question_for(photo, anything, "en") == "May I use take_photo?"


def test_a_confirm_phrase_may_only_name_parameters() -> None:
    registry = ToolRegistry(frozenset({"shop.example"}))
    with pytest.raises(InvalidTool, match="no parameter"):
        registry.add_http(order_tool(confirm="refund {amount}"))
    with pytest.raises(InvalidTool, match="one line"):
        registry.add_http(order_tool(confirm="a\nb"))
    assert registry.add_http(order_tool()).confirm == "cancel order {order_id}"


def test_a_confirmation_ends_once() -> None:
    confirmation = Confirmation(
        request_id="mcpr_1", call=ToolCall("c1", "cancel_order", {"order_id": "A1"}),
        tool=order_tool(), capability=Capability("cancel_order", "A1"), generation=3,
        input="cancel order A1", input_seq=None, question="May I cancel order A1?",
    )  # fmt: skip
    assert confirmation.settle(ConfirmState.TIMED_OUT)
    assert not confirmation.settle(ConfirmState.ANSWERED, "once")
    assert confirmation.state is ConfirmState.TIMED_OUT and confirmation.answer is None
