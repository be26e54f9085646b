"""The embedded brain's function calls (``plugins.brain.function_calls``, llm Rule 10), on a
scripted model: tool_choice, checked arguments, the answer after a function's output.

The real model's choices are measured by ``benchmarks.tool_calls`` and tried in
``tests/runtime/test_function_tools_real.py``."""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections.abc import Sequence

import numpy as np
import pytest

from plugins.brain.function_calls import (
    SHORTLIST,
    FunctionCallFailed,
    argument_problem,
    arguments_schema,
    grounded,
    read_output,
    read_start,
)
from plugins.brain.llm import LLMBrain
from plugins.contracts import BrainInput, ToolCall, ToolChoice, ToolResult, ToolSpec
from plugins.errors import ProviderError
from tests.plugins.test_llm_brain import KNOWLEDGE, FakeModel, deltas, spoken, turn

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
)
TIMER = ToolSpec(
    "set_timer",
    "Start a countdown timer.",
    {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]},
)


def with_choice(request: BrainInput, choice: ToolChoice) -> BrainInput:
    return dataclasses.replace(request, tool_choice=choice)


def filled(name: str, arguments: dict[str, object]) -> list[str]:
    return [json.dumps({"name": name, "arguments": arguments})]


class WordsEmbedder:
    """A deterministic stand-in for e5: a text is the bag of its lower-case words."""

    dim = 64

    def _vector(self, text: str) -> np.ndarray:  # type: ignore[type-arg]
        vector = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"[a-z]+", text.lower()):
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    async def reference(self) -> np.ndarray:  # type: ignore[type-arg]
        return np.zeros((0, self.dim), dtype=np.float32)

    async def passages(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        return np.stack([self._vector(t) for t in texts])

    async def query(self, text: str) -> np.ndarray:  # type: ignore[type-arg]
        return self._vector(text)


async def test_a_statement_asking_for_an_action_is_decided_too() -> None:
    model = FakeModel(['<tool_call>\n{"name": "set_timer"'], filled("set_timer", {"minutes": 10}))
    brain = LLMBrain(model)  # type: ignore[arg-type]

    (delta,) = await deltas(
        brain, turn("Set a timer for ten minutes.", language="en", tools=(WEATHER, TIMER))
    )

    assert delta.tool_call is not None
    assert (delta.tool_call.name, delta.tool_call.arguments) == ("set_timer", {"minutes": 10})


async def test_tool_choice_none_offers_no_function_and_asks_the_model_nothing() -> None:
    model = FakeModel(["unused"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = with_choice(
        turn("What's the weather in Paris?", language="en", tools=(WEATHER,)), ToolChoice("none")
    )

    out = await deltas(brain, request)

    assert all(d.tool_call is None for d in out)
    assert model.calls == []


async def test_tool_choice_required_prefills_the_call_so_the_model_only_names_it() -> None:
    model = FakeModel(['get_weather", "arguments"'], filled("get_weather", {"city": "Paris"}))
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = with_choice(
        turn("Thanks!", language="en", tools=(KNOWLEDGE, WEATHER, TIMER)), ToolChoice("required")
    )

    (delta,) = await deltas(brain, request)

    assert delta.tool_call is not None and delta.tool_call.name == "get_weather"
    messages = model.payloads[0]["messages"]
    assert messages[-1] == {"role": "assistant", "content": '<tool_call>\n{"name": "'}
    assert "knowledge_search" not in messages[0]["content"]


async def test_a_name_no_function_has_is_the_closest_offered_function() -> None:
    model = FakeModel(['{"name": "start_countdown_timer"'], filled("set_timer", {"minutes": 3}))
    brain = LLMBrain(model, embedder=WordsEmbedder())  # type: ignore[arg-type]

    (delta,) = await deltas(
        brain, turn("three minutes please", language="en", tools=(WEATHER, TIMER))
    )

    assert delta.tool_call is not None and delta.tool_call.name == "set_timer"


async def test_with_many_functions_the_closest_few_are_shown_closest_first() -> None:
    many = tuple(
        ToolSpec(f"tool_{word}", f"Does {word} things.", {"type": "object"})
        for word in ("alpha", "beta", "gamma", "delta", "epsilon")
    )
    model = FakeModel(["No tool for that."])
    brain = LLMBrain(model, embedder=WordsEmbedder())  # type: ignore[arg-type]

    await deltas(brain, turn("do the gamma things", language="en", tools=(*many, WEATHER, TIMER)))

    system = model.payloads[0]["messages"][0]["content"]
    shown = re.findall(r'"name": "(\w+)"', system.split("<tools>\n")[1])
    assert len(shown) == SHORTLIST and shown[0] == "tool_gamma"


async def test_a_named_function_is_called_and_the_model_only_fills_its_arguments() -> None:
    model = FakeModel(filled("set_timer", {"minutes": 5}))
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = with_choice(
        turn("What's the weather like?", language="en", tools=(WEATHER, TIMER)),
        ToolChoice("function", "set_timer"),
    )

    (delta,) = await deltas(brain, request)

    assert delta.tool_call is not None and delta.tool_call.name == "set_timer"
    (payload,) = model.payloads
    schema = payload["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["name"] == {"const": "set_timer"}
    assert schema["properties"]["arguments"] == TIMER.parameters
    assert "get_weather" not in payload["messages"][0]["content"]


async def test_optional_strings_the_person_did_not_say_are_dropped() -> None:
    model = FakeModel(
        ['{"name": "get_weather"'], filled("get_weather", {"city": "Paris", "unit": "fahrenheit"})
    )
    brain = LLMBrain(model)  # type: ignore[arg-type]

    (delta,) = await deltas(brain, turn("Weather in Paris?", language="en", tools=(WEATHER,)))

    assert delta.tool_call is not None and delta.tool_call.arguments == {"city": "Paris"}
    said = grounded(WEATHER, {"city": "Paris", "unit": "fahrenheit"}, "Paris in Fahrenheit")
    assert said == {"city": "Paris", "unit": "fahrenheit"}


async def test_a_forced_choice_holds_once_per_turn_then_the_output_is_answered() -> None:
    model = FakeModel(["It is 18 degrees in Paris."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    request = dataclasses.replace(
        with_choice(
            turn("What's the weather in Paris?", language="en", tools=(WEATHER,)),
            ToolChoice("required"),
        ),
        tool_calls=(call,),
        tool_results=(ToolResult("call_1", "get_weather", '{"temp_c": 18, "sky": "cloudy"}'),),
    )

    out = await deltas(brain, request)

    assert all(d.tool_call is None for d in out)
    assert "".join(d.text for d in out) == "It is 18 degrees in Paris."
    (payload,) = model.payloads
    prompt = payload["messages"][-1]["content"]
    assert prompt.startswith("What's the weather in Paris?")
    assert '<untrusted_tool_output name="get_weather">{"temp_c": 18' in prompt


async def test_an_answer_with_a_number_the_output_lacks_is_replaced_by_the_output() -> None:
    model = FakeModel(["It is 25 degrees in Paris."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = dataclasses.replace(
        turn("What's the weather in Paris?", language="en", tools=(WEATHER,)),
        tool_calls=(ToolCall("call_1", "get_weather", {"city": "Paris"}),),
        tool_results=(ToolResult("call_1", "get_weather", '{"temp_c": 18, "sky": "cloudy"}'),),
    )

    assert await spoken(brain, request) == "temp c: 18; sky: cloudy."


async def test_a_refused_call_is_said_by_code_with_the_rule() -> None:
    model = FakeModel(["unused"])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    refusal = 'Not permitted: "The assistant must not check the weather."'
    request = dataclasses.replace(
        turn("What's the weather in Paris?", language="en", tools=(WEATHER,)),
        tool_calls=(ToolCall("call_1", "get_weather", {"city": "Paris"}),),
        tool_results=(ToolResult("call_1", "get_weather", refusal, is_error=True),),
    )

    assert await spoken(brain, request) == (
        'I\'m not allowed to do that: "The assistant must not check the weather."'
    )
    assert model.calls == []


async def test_invalid_arguments_get_one_free_json_retry() -> None:
    model = FakeModel(
        ['{"name": "get_weather"'],
        filled("get_weather", {"city": "P"}),  # minLength 2: invalid
        ['{"city": "Paris"}'],
    )
    brain = LLMBrain(model)  # type: ignore[arg-type]

    (delta,) = await deltas(brain, turn("Weather in Paris?", language="en", tools=(WEATHER,)))

    assert delta.tool_call is not None and delta.tool_call.arguments == {"city": "Paris"}
    retry = model.payloads[2]
    assert retry["response_format"] == {"type": "json_object"}
    assert "$.city" in retry["messages"][0]["content"]  # the problem is named, not the value


async def test_arguments_invalid_twice_fail_the_turn_with_a_clear_code() -> None:
    model = FakeModel(
        ['{"name": "get_weather"'], filled("get_weather", {"city": "P"}), ['{"town": 1}']
    )
    brain = LLMBrain(model)  # type: ignore[arg-type]

    with pytest.raises(FunctionCallFailed) as failed:
        await deltas(brain, turn("Weather in Paris?", language="en", tools=(WEATHER,)))

    assert failed.value.code == "function_arguments_invalid"


async def test_a_schema_the_grammar_refuses_falls_back_to_free_json() -> None:
    refused = ProviderError("bad grammar", status=400, retryable=False)
    model = FakeModel([refused], ['{"minutes": 3}'])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = with_choice(
        turn("three minutes", language="en", tools=(WEATHER, TIMER)),
        ToolChoice("function", "set_timer"),
    )

    (delta,) = await deltas(brain, request)

    assert delta.tool_call is not None
    assert (delta.tool_call.name, delta.tool_call.arguments) == ("set_timer", {"minutes": 3})


def test_argument_problems_name_the_path_never_the_value() -> None:
    assert argument_problem(WEATHER, {"city": "Paris"}) is None
    problem = argument_problem(WEATHER, {"city": "Paris", "unit": "kelvin"})
    assert problem is not None and problem.startswith("$.unit") and "kelvin" not in problem
    assert argument_problem(WEATHER, {}) is not None
    assert argument_problem(WEATHER, ["Paris"]) == "the arguments must be a JSON object"


def test_a_function_declared_without_parameters_takes_an_object() -> None:
    bare = ToolSpec("ping", "Ping.", {})
    schema = arguments_schema(bare)

    assert schema["properties"]["arguments"] == {"type": "object"}
    assert argument_problem(bare, {}) is None
    assert json.loads(json.dumps(schema)) == schema


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("", (None, None)),
        ("  ", (None, None)),
        ("Sure", (False, None)),
        ("<tool_call>", (True, None)),
        ('```json\n{\n  "name": "set_ti', (True, None)),
        ('```json\n{\n  "name": "set_timer"', (True, "set_timer")),
        ('{"name":"get_weather", "arguments"', (True, "get_weather")),
    ],
)
def test_the_start_of_a_free_reply_is_read(written: str, read: tuple[object, object]) -> None:
    assert read_start(written) == read


def test_an_output_that_is_not_json_is_read_as_it_is() -> None:
    assert read_output(ToolResult("c", "t", "Sunny, 18 degrees")) == "Sunny, 18 degrees"


@pytest.mark.parametrize(
    ("said", "written", "kept"),
    [
        ("给张伟转五百块钱。", 5000, 500),  # the one number said replaces one not said
        ("Send 50 dollars to Jake", 50, 50),
        ("Send fifty dollars to Jake", 50, 50),
        ("Send money to Jake", 20, 20),  # nothing said: nothing to hold it to
        ("Send 20 or 30 to Jake", 25, 25),  # two said: code does not guess between them
    ],
)
def test_a_number_the_person_did_not_say_becomes_the_one_they_did(
    said: str, written: int, kept: int
) -> None:
    money = ToolSpec(
        "transfer_money",
        "Send money.",
        {"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]},
    )
    assert grounded(money, {"amount": written}, said) == {"amount": kept}


def test_keys_the_schema_does_not_declare_are_dropped() -> None:
    track = ToolSpec(
        "track_order",
        "Where an order is.",
        {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": []},
    )
    copied = {"type": "object", "properties": {"order_id": {"type": "string"}}}

    assert grounded(track, copied, "我的外卖到哪儿了？") == {}


async def test_an_answer_that_talks_about_functions_or_says_no_value_gets_codes_reading() -> None:
    model = FakeModel(["The function returned an object. Your order is placed."])
    brain = LLMBrain(model)  # type: ignore[arg-type]
    request = dataclasses.replace(
        turn("Order a pizza.", language="en", tools=(WEATHER,)),
        tool_calls=(ToolCall("call_1", "order_food", {}),),
        tool_results=(ToolResult("call_1", "order_food", '{"confirmation": "R-4821"}'),),
    )

    assert await spoken(brain, request) == "Your order is placed. confirmation: R-4821."
