"""Tool declarations: schemas checked as schemas, HTTP tools checked against the allowlist, and
calls turned into capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from tools.capability import Capability
from tools.errors import HostNotAllowed, InvalidArguments, InvalidTool, UnknownTool
from tools.registry import (
    BUILTIN_TOOLS,
    ClientTool,
    HttpTool,
    SecretHeader,
    ToolRegistry,
    describe,
)
from tools.schema import check_arguments, check_parameters_schema

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "maxLength": 40},
        "verbose": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["order_id"],
    "additionalProperties": False,
}


def order_tool(**changes: Any) -> HttpTool:
    fields: dict[str, Any] = {
        "name": "lookup_order",
        "description": "Look up an order by id.",
        "parameters": ORDER_SCHEMA,
        "method": "GET",
        "url_template": "https://api.example.com/orders/{order_id}",
        "headers": (SecretHeader("Authorization", "shop_token", "Bearer "),),
        "target": "order_id",
    } | changes
    return HttpTool(**fields)


def registry() -> ToolRegistry:
    return ToolRegistry(allowed_hosts=frozenset({"api.example.com"}))


def test_the_builtins_are_always_there() -> None:
    tools = registry()
    assert [t.name for t in tools.tools()] == list(BUILTIN_TOOLS)
    assert tools.capability_of("end_conversation", {}) == Capability("end_conversation", "*", {})


def test_a_call_becomes_a_capability_with_its_target_and_exact_arguments() -> None:
    tools = registry()
    tools.add_http(order_tool())
    capability = tools.capability_of("lookup_order", {"verbose": True, "order_id": "o-7"})
    assert capability == Capability("lookup_order", "o-7", {"order_id": "o-7", "verbose": True})
    assert capability.arguments_key == '{"order_id":"o-7","verbose":true}'


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({}, "$.order_id is required"),
        ({"order_id": 7}, "$.order_id must be of type string"),
        ({"order_id": "x" * 41}, "$.order_id is longer"),
        ({"order_id": "o", "extra": 1}, "$.extra is not a declared property"),
        ({"order_id": "o", "tags": ["c"]}, "$.tags[0] must be one of"),
        ({"order_id": "o", "tags": ["a", "b", "a"]}, "$.tags has more items"),
    ],
)
def test_arguments_that_do_not_fit_name_their_path(arguments: dict[str, Any], path: str) -> None:
    tools = registry()
    tools.add_http(order_tool())
    with pytest.raises(InvalidArguments) as raised:
        tools.capability_of("lookup_order", arguments)
    assert path in raised.value.message and raised.value.code == "invalid_arguments"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ([], "JSON object schema"),
        ({"type": "string"}, "type 'object'"),
        ({"type": "object", "properties": {"a": {"type": "str"}}}, "type must be one of"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x", "type": "string"}}}, "'$ref'"),
        ({"type": "object", "oneOf": []}, "'oneOf'"),
        ({"type": "object", "required": ["a"]}, "no property"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, "true or false"),
        ({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}}, "maxLength"),
        ({"type": "object", "properties": {"a": {"type": "string", "items": {}}}}, "arrays"),
    ],
)
def test_parameters_are_checked_as_a_schema(schema: Any, problem: str) -> None:
    with pytest.raises(InvalidTool) as raised:
        check_parameters_schema(schema)
    assert problem in raised.value.message


def test_deep_or_huge_schemas_are_refused() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(10):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(InvalidTool, match="deeper"):
        check_parameters_schema(deep)
    huge = {"type": "object", "description": "x" * 20_000}
    with pytest.raises(InvalidTool, match="at most"):
        check_parameters_schema(huge)
    check_arguments(ORDER_SCHEMA, {"order_id": "fine"})


@pytest.mark.parametrize(
    ("changes", "error", "problem"),
    [
        ({"url_template": "https://evil.example.net/orders/{order_id}"}, HostNotAllowed, "evil"),
        ({"url_template": "https://{order_id}.example.com/x"}, InvalidTool, "literal"),
        (
            {"url_template": "https://api.example.com@evil.example.net/x"},
            InvalidTool,
            "credentials",
        ),
        ({"url_template": "https://user:pw@api.example.com/x"}, InvalidTool, "credentials"),
        ({"url_template": "ftp://api.example.com/x"}, InvalidTool, "http or https"),
        ({"url_template": "https://api.example.com/{nope}"}, InvalidTool, "no parameter"),
        ({"url_template": "https://api.example.com/{order_id!r}"}, InvalidTool, "plain"),
        ({"method": "TRACE"}, InvalidTool, "method"),
        ({"timeout_s": 0}, InvalidTool, "timeout_s"),
        ({"timeout_s": 31}, InvalidTool, "timeout_s"),
        ({"max_response_bytes": 10_000_000}, InvalidTool, "max_response_bytes"),
        (
            {
                "target": "verbose",
                "parameters": ORDER_SCHEMA | {"required": ["order_id", "verbose"]},
            },
            InvalidTool,
            "string, integer, number",
        ),
        ({"target": "missing"}, InvalidTool, "required parameter"),
        ({"name": "knowledge_search"}, InvalidTool, "built-in"),
        ({"name": "has space"}, InvalidTool, "tool name"),
        ({"headers": (SecretHeader("Bad Header", "s"),)}, InvalidTool, "secret header"),
        ({"headers": (SecretHeader("X-Key", "s", "a\r\nInjected: 1"),)}, InvalidTool, "line"),
    ],
)
def test_a_bad_http_declaration_is_refused(
    changes: dict[str, Any], error: type[Exception], problem: str
) -> None:
    with pytest.raises(error) as raised:
        registry().add_http(order_tool(**changes))
    assert problem in str(raised.value)


def test_names_are_unique_and_client_tools_are_replaced_as_a_set() -> None:
    tools = registry()
    tools.add_http(order_tool())
    with pytest.raises(InvalidTool, match="already"):
        tools.add_http(order_tool())
    schema = {"type": "object", "properties": {}}
    tools.set_client_tools([ClientTool(name="open_map", description="", parameters=schema)])
    assert tools.get("open_map").kind == "client"
    tools.set_client_tools([ClientTool(name="take_photo", description="", parameters=schema)])
    with pytest.raises(UnknownTool):
        tools.get("open_map")
    with pytest.raises(InvalidTool, match="already"):
        tools.set_client_tools([ClientTool(name="lookup_order", description="",
                                           parameters=schema)])  # fmt: skip


def test_describe_names_secrets_but_never_holds_a_value() -> None:
    shown = describe(order_tool())
    assert shown["headers"] == [{"header": "Authorization", "secret": "shop_token"}]
    assert shown["kind"] == "http" and shown["target"] == "order_id"
    assert describe(registry().get("confide")) == {
        "name": "confide", "kind": "builtin", "cancellable": True, "target": None,
    }  # fmt: skip
