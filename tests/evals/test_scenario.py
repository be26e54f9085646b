"""Scenario files (``evals/scenario.py``): what loads, and what is refused with its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.scenario import Expect, ScenarioError, load, load_file

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_loads_with_its_shared_document_named_by_its_heading() -> None:
    scenarios = load([ROOT / "examples" / "evals"])
    assert [s.id for s in scenarios] == ["bike-shop-answers", "bike-shop-memory"]
    answers = scenarios[0]
    assert [d.name for d in answers.documents] == ["Riverside Bikes — service and returns"]
    assert answers.turns == 5 and answers.sessions[0].turns[4].spoken
    assert answers.sessions[0].turns[3].expect.dont_know is True
    assert len(scenarios[1].sessions) == 2


def test_a_single_scenario_file_in_json_with_inline_documents_and_tools(tmp_path: Path) -> None:
    data = {
        "documents": [{"name": "Hours", "text": "Open 9-5."}],
        "role": {"language": "zh", "memory": False},
        "tools": [{"name": "get_order", "parameters": {"type": "object"}}],
        "sessions": [
            {
                "turns": [
                    {
                        "user": "where is order 7?",
                        "tool_output": {"status": "shipped"},
                        "expect": {"tool": {"name": "get_order", "arguments": {"order": "7"}}},
                    },
                    {"user": "thanks", "expect": {"no_tool": True, "max_chars": 80}},
                ]
            }
        ],
    }
    (scenario,) = load_file(write(tmp_path, json.dumps(data), "orders.json"))
    assert scenario.id == "orders" and scenario.role.language == "zh"
    assert scenario.role.memory is False
    assert scenario.tools[0]["type"] == "function"
    first = scenario.sessions[0].turns[0]
    assert json.loads(first.tool_output) == {"status": "shipped"}
    assert first.expect.tool is not None and first.expect.tool.arguments == {"order": "7"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sessions: [{turns: [{user: hi, expect: {mentions: [x]}}]}]",
         "sessions[0].turns[0].expect: unknown key(s) mentions"),
        ("sessions: [{turns: [{expect: {}}]}]",
         "sessions[0].turns[0]: give either user (typed) or say (spoken)"),
        ("sessions: [{turns: [{user: a, say: b}]}]", "give either user (typed) or say"),
        ("role: {language: fr}\nsessions: [{turns: [{user: hi}]}]", "role.language: one of en, zh"),
        ("sessions: []", "sessions: at least one session is needed"),
        ("sessions: [{turns: []}]", "sessions[0].turns: at least one turn is needed"),
        ("sessions: [{turns: [{user: hi, expect: {within_ms: -1}}]}]",
         "expect.within_ms: expected a positive number"),
        ("sessions: [{turns: [{user: hi, expect: {dont_know: maybe}}]}]",
         "expect.dont_know: expected true or false"),
        ("sessions: [{turns: [{user: hi, expect: {tool: x, no_tool: true}}]}]",
         "tool and no_tool contradict each other"),
        ("documents: [{path: missing.md}]\nsessions: [{turns: [{user: hi}]}]",
         "documents[0].path: cannot read"),
        ("scenarios: [{sessions: [{turns: [{user: hi}]}]}]\nrole: {}",
         "only documents: may stand beside it"),
        ("tools: [{type: mcp, name: x}]\nsessions: [{turns: [{user: hi}]}]",
         "only function tools"),
        ("sessions: [{turns: [{user: '   '}]}]", "turns[0].user: must not be empty"),
        ("- just a list", "expected a mapping"),
        ("sessions: [unclosed", "not valid YAML"),
        ("sessions: [{turns: [{user: hi, tags: [answerable, vibes]}]}]",
         "turns[0].tags: unknown tag(s) vibes"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_the_file_and_the_place(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as raised:
        load([path])
    assert str(path) in str(raised.value)
    assert message in str(raised.value)


def test_ids_must_be_unique_across_the_run(tmp_path: Path) -> None:
    one = write(tmp_path, "id: same\nsessions: [{turns: [{user: hi}]}]", "a.yaml")
    two = write(tmp_path, "id: same\nsessions: [{turns: [{user: hi}]}]", "b.yaml")
    with pytest.raises(ScenarioError, match="'same' is used in"):
        load([one, two])


def test_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no scenario files"):
        load([tmp_path])


def test_the_benchmark_sets_load_with_unique_ids_and_every_turn_tagged() -> None:
    scenarios = load([ROOT / "benchmarks" / "data" / "conversations"])
    splits = {s.split for s in scenarios}
    assert {"dev", "held_out"} <= splits
    turns = [t for s in scenarios for session in s.sessions for t in session.turns]
    assert len(turns) >= 271
    assert all(t.tags for t in turns)
    assert all(t.expect != Expect() for t in turns)  # every turn checks something
