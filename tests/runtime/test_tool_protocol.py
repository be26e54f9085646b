"""The approval items on the wire: the parser takes GA ``mcp_approval_response`` with our two
optional fields, bounded; the server's approval items validate against the ``openai`` package."""

from __future__ import annotations

import json

import pytest

from pipeline import events as ev
from runtime.errors import ProtocolError
from runtime.realtime.protocol import (
    MAX_APPROVAL_TEXT_CHARS,
    ErrorCode,
    ItemCreate,
    Limits,
    McpApprovalResponseIn,
    parse_client_message,
)
from tests.runtime.ga import strict


def parse(item: dict[str, object]) -> McpApprovalResponseIn:
    message = parse_client_message(
        json.dumps({"type": "conversation.item.create", "item": item}), Limits()
    )
    assert isinstance(message, ItemCreate)
    assert isinstance(message.item, McpApprovalResponseIn)
    return message.item


def test_a_ga_approval_response_parses_with_scope_and_rule() -> None:
    item = parse({"type": "mcp_approval_response", "id": "mcpa_1",
                  "approval_request_id": "mcpr_1", "approve": True})  # fmt: skip
    assert (item.approve, item.scope, item.rule) == (True, None, None)
    item = parse({"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
                  "approve": True, "scope": "lifetime",
                  "rule": "Orders may be cancelled."})  # fmt: skip
    assert item.scope == "lifetime" and item.rule == "Orders may be cancelled."


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"scope": "thread"}, ErrorCode.INVALID_VALUE),
        ({"granted_by": "someone else"}, ErrorCode.UNKNOWN_PARAMETER),
        ({"rule": "x" * (MAX_APPROVAL_TEXT_CHARS + 1)}, ErrorCode.INVALID_VALUE),
    ],
)
def test_anything_else_in_an_approval_is_refused(extra: dict[str, object], code: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse({"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
               "approve": True, **extra})  # fmt: skip
    assert raised.value.code == code


def test_the_servers_approval_items_are_ga_items() -> None:
    request = ev.McpApprovalRequestItem("mcpr_1", "cancel_order", '{"order_id": "A1"}', "http")
    answer = ev.McpApprovalResponseItem("mcpa_1", "mcpr_1", False, reason="timeout")
    for item in (request, answer):
        for event in (ev.ItemAdded(item), ev.ItemDone(item)):
            strict({"event_id": "evt_1", **ev.wire(event, extensions=False)})
