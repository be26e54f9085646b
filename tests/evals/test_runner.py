"""``evals/runner.py`` against the real server with fake plugins: typed and spoken turns, a
client function tool's round trip, sessions, failures reported by check, the reports; a URL
target cleans up what it created."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from evals.report import report, write_html, write_json
from evals.runner import Runner, _how_far, embedded_target, url_target
from evals.scenario import load_file
from plugins.fakes import FakeASR
from runtime.client import Received
from runtime.config import Settings
from tests.runtime.conftest import fake_plugins
from tests.runtime.ga import FunctionBrain

SCENARIO = """
id: weather
split: dev
documents:
  - name: Hours
    text: We open at nine.
tools:
  - name: get_weather
    description: The weather in a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
sessions:
  - turns:
      - user: hello
        expect: {contains_any: [is the answer], no_tool: true, within_ms: 60000,
                 judge: The answer greets the person.}
      - user: what is the weather in Paris?
        tool_output: sunny, 21 C
        expect: {tool: {name: get_weather, arguments: {city: paris}}, contains_any: [sunny]}
      - say: what is the weather
        tool_output: {sky: rain}
        expect: {tool: get_weather, contains_any: [rain]}
  - turns:
      - user: do you sell boats?
        expect: {dont_know: true}
"""


def plugins() -> object:
    return fake_plugins(
        brain=FunctionBrain("Sure, <b>here</b> is the answer & more."),
        asr=FakeASR(["what is the weather in Paris"]),
    )


def settings(tmp_path: Path) -> Settings:
    return Settings(port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300)


async def fair_judge(criterion: str, question: str, answer: str) -> tuple[bool, str]:
    return "answer" in answer, f"judged {criterion!r}"


async def test_a_scenario_runs_typed_spoken_and_tool_turns_and_reports_each_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    scenarios = load_file(path)
    lines: list[str] = []
    async with embedded_target(settings=settings(tmp_path), plugins=plugins()) as target:
        results = await Runner(target, judge=fair_judge, progress=lines.append).run(scenarios)

    (result,) = results
    assert result.error is None and result.split == "dev"
    hello, weather, spoken, boats = result.turns
    assert hello.passed and hello.calls == [] and hello.first_ms is not None
    assert [c.name for c in hello.checks] == ["contains_any", "no_tool", "within_ms", "judge"]
    assert hello.checks[-1].detail == "judged 'The answer greets the person.'"

    assert weather.passed, weather.checks
    assert [(c.name, json.loads(c.arguments)) for c in weather.calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert "sunny, 21 C" in weather.answer

    assert spoken.spoken and spoken.heard == "what is the weather in Paris", spoken.error
    assert spoken.passed, spoken.checks
    assert '"sky": "rain"' in spoken.answer
    assert spoken.first_ms is not None and spoken.done_ms is not None

    assert (boats.session, boats.index) == (2, 1)
    assert not boats.passed and boats.checks[0].detail == "answered instead"
    assert not result.passed
    assert any("weather s1t2 ok" in line for line in lines)
    assert lines[-1] == "[1/1] weather: 3/4 turns passed"

    data = report(results)
    summary = data["summary"]
    assert (summary["turns"], summary["turns_passed"], summary["scenarios_passed"]) == (4, 3, 0)
    assert summary["failed_checks"] == {"dont_know": 1}
    assert summary["splits"] == {"dev": {"turns": 4, "passed": 3, "pass_rate": 0.75}}
    write_json(tmp_path / "report.json", data)
    (call,) = json.loads((tmp_path / "report.json").read_text())["scenarios"][0]["turns"][1][
        "tool_calls"
    ]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    write_html(tmp_path / "report.html", results, scenarios)
    page = (tmp_path / "report.html").read_text()
    assert "Sure, &lt;b&gt;here&lt;/b&gt; is the answer &amp; more." in page
    assert "<b>here</b>" not in page and "<script" not in page
    assert "heard: what is the weather in Paris" in page
    assert "get_weather(" in page and "answered instead" in page


async def test_a_url_target_deletes_the_roles_and_documents_it_created(tmp_path: Path) -> None:
    path = tmp_path / "weather.yaml"
    path.write_text(SCENARIO.replace("      - say: what is the weather\n"
                                     "        tool_output: {sky: rain}\n"
                                     "        expect: {tool: get_weather, contains_any: [rain]}\n",
                                     ""), encoding="utf-8")  # fmt: skip
    async with embedded_target(settings=settings(tmp_path), plugins=plugins()) as server:
        async with url_target(server.http_url + "/", server.token) as target:
            assert target.ws_url == server.ws_url
            results = await Runner(target).run(load_file(path))
        assert [t.passed for t in results[0].turns] == [True, True, False]
        assert results[0].turns[0].checks[-1].status == "skipped"  # no judge given
        headers = {"Authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
            roles = (await http.get("/api/roles")).json()
            documents = (await http.get("/api/documents")).json()
    names = [r["name"] for r in (roles["roles"] if isinstance(roles, dict) else roles)]
    assert not any(name.startswith("eval ") for name in names)
    docs = documents["documents"] if isinstance(documents, dict) else documents
    assert not any(d["name"] == "Hours" for d in docs)


async def test_a_setup_failure_is_reported_and_nothing_runs(tmp_path: Path) -> None:
    path = tmp_path / "missing-role.yaml"
    path.write_text("role: {role_id: role_nope}\nsessions: [{turns: [{user: hi}]}]\n")
    async with embedded_target(settings=settings(tmp_path), plugins=plugins()) as target:
        results = await Runner(target, turn_timeout_s=10).run(load_file(path))
    (result,) = results
    assert not result.passed and result.turns == []
    assert result.error is not None and result.error.startswith("cannot open session 1:")
    assert report(results)["summary"]["setup_errors"] == 1


def test_a_turn_that_went_wrong_says_how_far_the_server_got() -> None:
    def received(seq: int, kind: str | None) -> Received:
        if kind is None:  # an audio frame
            return Received(seq, 0.0, None, b"")
        return Received(seq, 0.0, {"type": kind})

    messages = [
        received(1, "input_audio_buffer.speech_started"),
        received(2, "response.created"),
        received(3, None),
        received(4, None),
    ]
    assert _how_far(messages) == (
        "the server sent: input_audio_buffer.speech_started, response.created, audio ×2"
    )
    assert _how_far([]) == "the server sent nothing"
