"""Function calls by the embedded brain (SPEC OAI-2, TOOL-6): which offered function serves the
person's words, with which arguments — the model writes both as grammar-constrained JSON, code
checks them, and the answer after the function's output is held to that output.

Theory of operation
-------------------
Rule 1. The *functions* are the offered tools but the brain's own built-ins
        (``knowledge_search``, which code routes, and ``confide``): the client's functions and
        the role's HTTP tools. They are offered under the response's ``tool_choice``
        (``plugins.contracts.ToolChoice``): ``none`` — never; ``auto`` — the model picks one or
        ``"none"``; ``required`` — the model must pick one; ``function`` — that one, the model
        only fills its arguments. A forced choice holds once per turn: after a function's
        output the brain answers in words (else a client that forces a call would loop).
Rule 2. The decision is in the format the Qwen2.5 models were trained on for function calling:
        the functions as JSON inside ``<tools>`` in the system message, a call written as
        ``<tool_call>{"name": …, "arguments": …}``. Measured on ``benchmarks.tool_calls``'
        dev split, this format decides far better than a JSON choice with a "none" option
        (which the small model picks for almost anything, or else the first option). Under
        ``auto`` the model starts its reply freely and code reads the start: text is "no call"
        (the model is stopped after a token or two); a call start is read to the end of the
        function's name. Under ``required`` the reply is prefilled with the call's start, so
        the model only writes a name. A name no function has ("send_money") is the offered
        function closest to it (embedding similarity; the first offered without an
        embedder). Then the arguments, by ``response_format`` json_schema built from that one
        function's parameters (llama.cpp's grammar: the declared types, required fields and
        enum values only). With more than ``SHORTLIST`` functions, only the ``SHORTLIST``
        closest to the person's words (e5 embeddings of "name: description") are shown,
        closest first: the small model confuses long lists and favours the first entry.
        The person's previous message is shown too (a follow-up: "and in Berlin?").
Rule 3. Code checks the arguments against the function's schema (``jsonschema``): the grammar
        covers types and structure, not every keyword. A key the schema does not declare is
        dropped (the model once copied the schema itself as the arguments of a function whose
        parameters are all optional). An optional string the person did not
        say (no word of it in their message, same script) is dropped: the small model fills
        optional fields with placeholders ("your_order_id_here") and defaults nobody chose; a
        number the person did not say becomes the one number they said, if they said one. A
        schema the model server refuses to turn into a grammar, or arguments that do not
        validate, get one more request with free JSON (``json_object``), the schema in the
        prompt and the problem named; still invalid: ``FunctionCallFailed`` (a clear error,
        code ``function_arguments_invalid``) instead of a call with arguments the client
        would have to reject.
Rule 4. The answer after a function's output: the model phrases it from
        the output, given inside ``<untrusted_tool_output>`` as data; a sentence is dropped
        when it holds a number the output and the question do not hold, talks about
        "functions" or JSON, or only says the request back; if nothing is left, or what is
        left says none of a JSON output's values, code reads the output (a JSON object as
        "key: value" pairs). A refused or failed call is
        said by code: a refusal with the rule it quotes, a failure as one short sentence.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import uuid
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import jsonschema

from plugins.brain.arithmetic import stated_numbers
from plugins.brain.grounding import earlier_user_inputs
from plugins.contracts import BrainInput, ToolCall, ToolChoice, ToolResult, ToolSpec
from plugins.embedding import E5Embedder, Embedder, Vector
from plugins.errors import PluginError, PluginTimeout
from plugins.text import content_terms as terms

log = logging.getLogger(__name__)

BUILTINS = frozenset({"knowledge_search", "confide", "end_call", "transfer_call", "send_dtmf"})
"""The brain's own tools (Rule 1): never offered to the model as functions — a phone line's
call control included: offered them on every question, the small model pressed keys for
"My name is Sam" and put "What is my name?" through to another line."""

_TOOLS_SYSTEM = (
    "You are a helpful voice assistant. Call a function whenever one of them does what the user "
    "asks, in whatever language they ask; otherwise answer in words.\n\n# Tools\n\nYou may "
    "call one or more functions to "
    "assist with the user query.\n\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n\nFor each function call, "
    "return a json object with function name and arguments within <tool_call></tool_call> XML "
    'tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n'
    "</tool_call>"
)
"""Rule 2: the Qwen2.5 chat template's function-calling system message (its first line ours:
38 of 53 right on the dev split against 36 with a plain first line and 35 with Qwen's own)."""
CALL_PREFILL = '<tool_call>\n{"name": "'
"""Rule 2: the start of a call (``required``: the model writes only the name after it)."""
_CALL_STARTS = ("{", "`", "<")
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
SHORTLIST = 4
"""Rule 2: at most this many functions are shown to the model."""
CARDS_KEPT = 256
START_TOKENS = 32
"""Room for a call's start up to the end of its name (```` ```json ```` and spaces included)."""
ARGUMENT_TOKENS = 200
"""Room for a call's arguments (a few short values)."""
_FREE_JSON = (
    "Write the arguments of the function {name} for the person's last message as one JSON "
    "object that fits this JSON schema:\n{schema}\n{problem}Reply with the JSON object only."
)


class FunctionCallFailed(PluginError):
    """The model's arguments did not fit the function's schema, twice (Rule 3)."""

    code = "function_arguments_invalid"


def functions(tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
    """Rule 1: the offered tools the model may call."""
    return tuple(tool for tool in tools if tool.name not in BUILTINS)


def forced(request: BrainInput) -> bool:
    """Rule 1: ``required`` / a named function, and no function called yet this turn."""
    if request.tool_choice.mode not in ("required", "function"):
        return False
    return not any(call.name not in BUILTINS for call in request.tool_calls)


def offered(request: BrainInput) -> tuple[tuple[ToolSpec, ...], ToolChoice]:
    """The functions this round may call and how (Rule 1): the decision is the turn's first
    step (after a function, or a knowledge search it declined for, none), never under
    ``none``."""
    choice = request.tool_choice
    if choice.mode == "none" or any(call.name != "confide" for call in request.tool_calls):
        return (), choice
    tools = functions(request.tools)
    if choice.mode == "function":
        tools = tuple(tool for tool in tools if tool.name == choice.name)
        if not tools:  # the named function is not offered: the model decides among the rest
            return functions(request.tools), ToolChoice()
    return tools, choice


def decision_messages(
    tools: Sequence[ToolSpec], text: str, previous: str | None
) -> list[dict[str, str]]:
    """Rule 2: the functions in the model's own format, then the person's words."""
    listed = "\n".join(
        json.dumps(
            {"type": "function", "function": {"name": tool.name,
             "description": tool.description, "parameters": _object(tool.parameters)}},
            ensure_ascii=False,
        )
        for tool in tools
    )  # fmt: skip
    user = f"(My previous message: {previous})\n{text}" if previous else text
    return [
        {"role": "system", "content": _TOOLS_SYSTEM.format(listed=listed)},
        {"role": "user", "content": user},
    ]


def read_start(text: str) -> tuple[bool | None, str | None]:
    """Rule 2, ``auto``: what the start of a free reply says — (False, None): text, no call;
    (True, name): a call of ``name``; (True, None): a call whose name is not written yet;
    (None, None): nothing to read yet."""
    start = text.lstrip()
    if not start:
        return None, None
    if not start.startswith(_CALL_STARTS):
        return False, None
    found = _NAME.search(start)
    return True, found.group(1) if found else None


def arguments_schema(tool: ToolSpec) -> dict[str, Any]:
    """Rule 2: the schema of ``tool``'s call (its name fixed, its parameters)."""
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": _object(tool.parameters)},
        "required": ["name", "arguments"],
    }


def parse_arguments(text: str) -> Any:
    """The arguments of a call written by ``arguments_schema`` (None if unreadable)."""
    value = parse_object(text)
    return value.get("arguments") if isinstance(value, dict) else None


def named(tools: Sequence[ToolSpec], name: str) -> ToolSpec | None:
    """The function called ``name`` (case and separators aside), or None."""
    key = re.sub(r"[\s_-]+", "", name).casefold()
    return next((t for t in tools if re.sub(r"[_-]+", "", t.name).casefold() == key), None)


def card(tool: ToolSpec) -> str:
    """Rule 2: what the shortlist embeds of a function."""
    return f"{tool.name.replace('_', ' ')}: {tool.description}"[:500]


def grounded(tool: ToolSpec, arguments: dict[str, Any], said: str) -> dict[str, Any]:
    """Rule 3: ``arguments`` without undeclared keys and the optional strings the person did
    not say, and a
    number the person did not say replaced by the one number they did say (the small model
    writes 五百 as 5000)."""
    schema = _object(tool.parameters)
    required = set(schema.get("required", ()))
    words = set(re.findall(r"[a-z0-9]+", said.casefold()))
    numbers = stated_numbers(said)
    declared = schema.get("properties")
    kept: dict[str, Any] = {}
    for name, value in arguments.items():
        if isinstance(declared, dict) and declared and name not in declared:
            continue  # not a parameter (the model copied the schema's own keys, say)
        if name not in required and isinstance(value, str) and not _said(value, said, words):
            continue
        if _is_number(value) and Fraction(str(value)) not in numbers and len(numbers) == 1:
            (only,) = numbers
            value = int(only) if only.denominator == 1 else float(only)
        kept[name] = value
    return kept


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _said(value: str, said: str, words: set[str]) -> bool:
    if not value.strip() or value.casefold() in said.casefold():
        return bool(value.strip())
    if not value.isascii() or not said.isascii():
        return True  # another script: words cannot be compared, the value stays
    parts = [w for w in re.findall(r"[a-z0-9]+", value.casefold()) if len(w) >= 3 or w.isdigit()]
    return any(part in words for part in parts)


def argument_problem(tool: ToolSpec, arguments: Any) -> str | None:
    """Rule 3: why ``arguments`` do not fit ``tool``'s schema (a path and a reason, never the
    value), or None."""
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    schema = _object(tool.parameters)
    try:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(arguments)
        )
    except jsonschema.exceptions.SchemaError:
        return None  # the declared schema is not one: only the grammar's structure holds
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return "$" + where + f": {error.validator} {error.validator_value!r}"[:200]


def free_json_messages(
    tool: ToolSpec, text: str, previous: str | None, problem: str | None
) -> list[dict[str, str]]:
    """Rule 3: the second try, in free JSON."""
    said = f"(A first try was wrong: {problem}.)\n" if problem else ""
    prompt = _FREE_JSON.format(
        name=tool.name, schema=json.dumps(_object(tool.parameters))[:4000], problem=said
    )
    user = f"(Their previous message: {previous})\n{text}" if previous else text
    return [{"role": "system", "content": prompt}, {"role": "user", "content": user}]


def parse_object(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        match = re.search(r"\{.*\}", text, re.S)
        if match is None:
            return None
        try:
            return json.loads(match.group(0))
        except ValueError:
            return None


def grammar_refused(error: BaseException) -> bool:
    """A model-server error other than a deadline: the schema could not become a grammar."""
    return isinstance(error, PluginError) and not isinstance(error, PluginTimeout)


class FunctionCaller:
    """Rules 1–3 with a model (``LocalModel``'s ``chat``) and an embedder for the shortlist."""

    def __init__(self, model: Any, embedder: Embedder | None = None) -> None:
        self.model = model
        self.embedder = embedder
        self._cards: dict[str, Vector] = {}
        """Embedded function cards and names, the last ``CARDS_KEPT``."""

    async def call(self, request: BrainInput, said: str) -> ToolCall | None:
        """The function call the person's words (``said``: the turn as read) ask for, or None
        (Rules 1–3)."""
        tools, choice = offered(request)
        if not tools:
            return None
        earlier = earlier_user_inputs(request.history)
        previous = earlier[-1] if earlier else None
        text = said or request.current_input
        if choice.mode == "function":
            tool, messages = tools[0], decision_messages(tools, text, previous)
        else:
            shown = await self._shortlist(tools, text)
            messages = decision_messages(shown, text, previous)
            if choice.mode == "required":
                prefilled = [*messages, {"role": "assistant", "content": CALL_PREFILL}]
                payload = {"messages": prefilled, "temperature": 0, "max_tokens": 16}
                name: str | None = (await self._text(payload, request)).split('"')[0]
            else:
                call, name = await self._call_start(messages, request)
                if not call:
                    return None
            tool = await self._closest(shown, name or text)
        payload = {
            "messages": messages,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "function_call", "schema": arguments_schema(tool)},
            },
            "temperature": 0,
            "max_tokens": ARGUMENT_TOKENS,
        }
        problem: str | None = None
        try:
            arguments = parse_arguments(await self._text(payload, request))
        except PluginError as e:
            if not grammar_refused(e):
                raise
            log.warning("a function's schema was refused as a grammar: %s", e.code)
            arguments, problem = None, "the schema could not be used as a grammar"
        if arguments is not None:
            problem = argument_problem(tool, arguments)
        if arguments is None or problem is not None:
            retry = {
                "messages": free_json_messages(tool, text, previous, problem),
                "response_format": {"type": "json_object"},
                "temperature": 0,
                "max_tokens": ARGUMENT_TOKENS,
            }
            arguments = parse_object(await self._text(retry, request))
            problem = argument_problem(tool, arguments)
            if problem is not None:
                raise FunctionCallFailed(f"the arguments for {tool.name} do not fit: {problem}")
        said = f"{previous or ''} {text}"
        call_id = f"call_{uuid.uuid4().hex[:22]}"
        return ToolCall(call_id=call_id, name=tool.name, arguments=grounded(tool, arguments, said))

    async def _call_start(
        self, messages: list[dict[str, str]], request: BrainInput
    ) -> tuple[bool, str | None]:
        """Rule 2, ``auto``: read the free reply's start (``read_start``);
        the model is stopped as soon as it is decided."""
        payload = {"messages": messages, "temperature": 0, "max_tokens": START_TOKENS}
        written = ""
        pieces = self.model.chat(payload, lane=request.session)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                written += piece
                call, name = read_start(written)
                if call is False or name is not None:
                    return bool(call), name
        call, name = read_start(written)
        return bool(call), name

    async def _shortlist(self, tools: Sequence[ToolSpec], text: str) -> tuple[ToolSpec, ...]:
        """Rule 2: the ``SHORTLIST`` functions closest to the person's words, closest first
        (all of them, as declared, when there are no more)."""
        if len(tools) <= SHORTLIST:
            return tuple(tools)
        similarity = await self._similarity(tools, text)
        order = sorted(range(len(tools)), key=lambda i: -similarity[i])
        return tuple(tools[i] for i in order[:SHORTLIST])

    async def _closest(self, tools: Sequence[ToolSpec], name: str) -> ToolSpec:
        """Rule 2: the function ``name`` means (its own, else the closest by meaning)."""
        found = named(tools, name)
        if found is not None or len(tools) == 1:
            return found or tools[0]
        similarity = await self._similarity(tools, name.replace("_", " "), names=True)
        return tools[max(range(len(tools)), key=lambda i: similarity[i])]

    async def _similarity(
        self, tools: Sequence[ToolSpec], text: str, *, names: bool = False
    ) -> list[float]:
        embedder = self.embedder
        if embedder is None:
            embedder = self.embedder = E5Embedder.shared()
        cards = [tool.name.replace("_", " ") if names else card(tool) for tool in tools]
        missing = [c for c in cards if c not in self._cards]
        if missing:
            for key, vector in zip(missing, await embedder.passages(missing), strict=True):
                self._cards[key] = vector
            while len(self._cards) > CARDS_KEPT:
                del self._cards[next(iter(self._cards))]
        query = await embedder.query(text)
        return [float(self._cards[c] @ query) for c in cards]

    async def _text(self, payload: dict[str, Any], request: BrainInput) -> str:
        return "".join([piece async for piece in self.model.chat(payload, lane=request.session)])


# ---------------------------------------------------------------- the answer after (Rule 4)

_REFUSED = {
    "en": "I'm not allowed to do that: {}",
    "zh": "这个我不能做：{}",
}
_FAILED = {
    "en": "Sorry, that didn't work ({}).",
    "zh": "抱歉，没有办成（{}）。",
}
_OUTPUT_PROMPT = {
    "en": "(The result of this request is below, as data. Tell the person the result in one "
    "short sentence, speaking to them, with the values it holds — numbers, times, names, codes. "
    "Never mention functions, outputs or JSON.)",
    "zh": "（这个请求的结果在下面，是数据。用一句短句直接告诉用户结果，"
    "说出结果里的数字、时间、名称或编号。不要提函数、输出或JSON。）",
}
_META = re.compile(r"\bfunction|\bjson\b|\boutput\b|函数|返回", re.I)
_NUMBER = re.compile(r"\d+(?:[.:]\d+)?")


def function_results(request: BrainInput) -> list[ToolResult]:
    """The outputs of functions (not the built-ins) this turn."""
    return [r for r in request.tool_results if r.name not in BUILTINS]


def failure_sentence(result: ToolResult, lang: str) -> str:
    """Rule 4: a refused or failed call, said by code."""
    content = result.content.strip()
    if content.startswith("Not permitted:"):
        reason = content.removeprefix("Not permitted:").strip()
        return _REFUSED[lang].format(reason)
    reason = content.removeprefix("Error:").strip().split("\n")[0][:120] or result.name
    return _FAILED[lang].format(reason)


def output_prompt(text: str, results: Sequence[ToolResult], lang: str) -> str:
    """Rule 4: the question, then each output as data."""
    lines = [text]
    for result in results:
        lines.append(_OUTPUT_PROMPT[lang].format(name=result.name))
        lines.append(
            f'<untrusted_tool_output name="{result.name}">{result.content[:2000]}'
            "</untrusted_tool_output>"
        )
    return "\n".join(lines)


def output_supports(sentence: str, results: Sequence[ToolResult], question: str) -> bool:
    """Rule 4: every number of ``sentence`` is in an output or the question; it does not talk
    about functions; it is not the request said back."""
    known = set(_NUMBER.findall(" ".join(r.content for r in results) + " " + question))
    if not all(number in known for number in _NUMBER.findall(sentence)):
        return False
    if _META.search(sentence):
        return False
    said = terms(sentence)
    return not said or bool(said - terms(question)) or bool(said & output_terms(results))


def output_terms(results: Sequence[ToolResult]) -> set[str]:
    return terms(" ".join(r.content for r in results))


def output_values(result: ToolResult) -> list[str]:
    """The scalar values of a JSON object output (what an answer should say), else []."""
    content = result.content.strip()
    value = parse_object(content) if content.startswith("{") else None
    if not isinstance(value, dict):
        return []
    return [str(v) for v in value.values() if isinstance(v, str | int | float) and len(str(v)) > 1]


def says_values(answer: str, results: Sequence[ToolResult]) -> bool:
    """Rule 4: the answer says at least one value of a JSON object output (or there is none)."""
    values = [v for r in results for v in output_values(r)]
    lowered = answer.casefold()
    return not values or any(v.casefold() in lowered for v in values)


def read_output(result: ToolResult) -> str:
    """Rule 4: the output as code reads it (a JSON object's fields as "key: value")."""
    content = result.content.strip()
    value = parse_object(content) if content.startswith(("{", "[")) else None
    if isinstance(value, dict) and value:
        parts = [f"{key.replace('_', ' ')}: {_spoken(item)}" for key, item in value.items()]
        return "; ".join(parts)[:300] + "."
    return content[:300]


def _spoken(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)[:80]
    return str(value)


def _object(parameters: dict[str, Any]) -> dict[str, Any]:
    """A function's parameters as an object schema (an empty declaration takes any object)."""
    if not parameters:
        return {"type": "object"}
    return parameters if "type" in parameters else {"type": "object", **parameters}
