"""The reports of ``openrealtime eval``: one JSON object and one self-contained HTML page.

Theory of operation
-------------------
Rule 1. ``summary`` counts turns and scenarios passed, per split and per check (a check's
        ``failed``/``skipped`` counts; ``errors``: turns that got no answer), and the latency
        of first answers (p50/p99).
Rule 2. The JSON report is ``{"summary", "scenarios": [...]}`` with every turn as the runner
        recorded it (``TurnResult.as_dict``).
Rule 3. The HTML page needs nothing but itself: inline CSS, no script, no fetched font or
        image, every text escaped. Per turn: what was said (and heard), the answer, tool calls,
        each check with its detail, and a latency bar (first answer; the turn's ``within_ms``
        drawn as a mark when it has one).
"""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.runner import ScenarioResult, TurnResult
from evals.scenario import Scenario


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return round(ordered[index], 1)


def summary(results: Sequence[ScenarioResult]) -> dict[str, Any]:
    turns = [t for r in results for t in r.turns]
    by_split: dict[str, list[TurnResult]] = defaultdict(list)
    for r in results:
        by_split[r.split or "-"] += r.turns
    failed: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for t in turns:
        for c in t.checks:
            if c.status == "failed":
                failed[c.name] += 1
            elif c.status == "skipped":
                skipped[c.name] += 1
    firsts = [t.first_ms for t in turns if t.first_ms is not None]
    by_tag: dict[str, list[TurnResult]] = defaultdict(list)
    for t in turns:
        for tag in t.tags:
            by_tag[tag].append(t)
    return {
        "scenarios": len(results),
        "scenarios_passed": sum(r.passed for r in results),
        "setup_errors": sum(r.error is not None for r in results),
        "turns": len(turns),
        "turns_passed": sum(t.passed for t in turns),
        "pass_rate": round(sum(t.passed for t in turns) / len(turns), 3) if turns else None,
        "splits": {
            name: {
                "turns": len(ts),
                "passed": sum(t.passed for t in ts),
                "pass_rate": round(sum(t.passed for t in ts) / len(ts), 3) if ts else None,
            }
            for name, ts in sorted(by_split.items())
        },
        "tags": {
            name: {
                "turns": len(ts),
                "passed": sum(t.passed for t in ts),
                "pass_rate": round(sum(t.passed for t in ts) / len(ts), 3),
            }
            for name, ts in sorted(by_tag.items())
        },
        "failed_checks": dict(sorted(failed.items())),
        "skipped_checks": dict(sorted(skipped.items())),
        "errors": sum(t.error is not None for t in turns),
        "first_answer_ms": {"p50": _percentile(firsts, 50), "p99": _percentile(firsts, 99)},
    }


def report(results: Sequence[ScenarioResult]) -> dict[str, Any]:
    return {"summary": summary(results), "scenarios": [r.as_dict() for r in results]}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;
color:#1b1f24}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
.pass{color:#11693a}.fail{color:#b3261e}.skip{color:#7a5b00}
table{border-collapse:collapse;width:100%;margin:.5rem 0}
td,th{border-top:1px solid #d8dde3;padding:.4rem .5rem;vertical-align:top;text-align:left}
th{font-weight:600;background:#f3f5f7}
.said{white-space:pre-wrap}.answer{white-space:pre-wrap}.heard{color:#57606a;font-size:.9em}
.checks{list-style:none;margin:0;padding:0}.checks li{margin:.1rem 0}
.bar{position:relative;height:.7rem;background:#eef1f4;border-radius:3px;min-width:8rem}
.bar span{position:absolute;left:0;top:0;bottom:0;background:#4a7bd0;border-radius:3px}
.bar i{position:absolute;top:-.2rem;bottom:-.2rem;width:2px;background:#b3261e}
.ms{font-size:.85em;color:#57606a}.summary td{border:0;padding:.1rem .8rem .1rem 0}
code{background:#f3f5f7;padding:0 .2rem;border-radius:3px}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _status(ok: bool) -> str:
    return '<b class="pass">passed</b>' if ok else '<b class="fail">failed</b>'


def _latency(turn: TurnResult, within: float | None, scale: float) -> str:
    if turn.first_ms is None:
        return '<span class="ms">no answer</span>'
    width = min(100.0, 100.0 * max(turn.first_ms, 0.0) / scale)
    mark = ""
    if within is not None:
        left = min(100.0, 100.0 * within / scale)
        mark = f'<i style="left:{left:.1f}%" title="within {within:.0f} ms"></i>'

    return (
        f'<div class="bar" role="img" aria-label="first answer after {turn.first_ms:.0f} ms">'
        f'<span style="width:{width:.1f}%"></span>{mark}</div>'
        f'<span class="ms">{turn.first_ms:.0f} ms first answer'
        + (f", {turn.done_ms:.0f} ms done" if turn.done_ms is not None else "")
        + "</span>"
    )


def _checks(turn: TurnResult) -> str:
    items = []
    if turn.error:
        items.append(f'<li class="fail">✗ error: {_e(turn.error)}</li>')
    for c in turn.checks:
        cls, sign = {"passed": ("pass", "✓"), "failed": ("fail", "✗"), "skipped": ("skip", "–")}[
            c.status
        ]
        detail = f" — {_e(c.detail)}" if c.detail else ""
        items.append(f'<li class="{cls}">{sign} {_e(c.name)}{detail}</li>')
    return '<ul class="checks">' + "".join(items) + "</ul>" if items else "—"


def write_html(
    path: Path,
    results: Sequence[ScenarioResult],
    scenarios: Sequence[Scenario],
    *,
    title: str = "OpenRealtime eval",
    target: str = "",
) -> None:
    s = summary(results)
    by_id = {sc.id: sc for sc in scenarios}
    firsts = [t.first_ms for r in results for t in r.turns if t.first_ms is not None]
    withins = [
        t.expect.within_ms
        for sc in scenarios
        for session in sc.sessions
        for t in session.turns
        if t.expect.within_ms is not None
    ]
    scale = max([*firsts, *withins, 1.0])
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        '<table class="summary">',
        f"<tr><td>turns passed</td><td><b id=turns-passed>{s['turns_passed']}</b> of "
        f"{s['turns']} ({_e(s['pass_rate'])})</td></tr>",
        f"<tr><td>scenarios passed</td><td>{s['scenarios_passed']} of {s['scenarios']}</td></tr>",
        f"<tr><td>first answer</td><td>p50 {_e(s['first_answer_ms']['p50'])} ms, "
        f"p99 {_e(s['first_answer_ms']['p99'])} ms</td></tr>",
    ]
    if target:
        out.append(f"<tr><td>target</td><td><code>{_e(target)}</code></td></tr>")
    for name, split in s["splits"].items():
        out.append(
            f"<tr><td>split {_e(name)}</td><td>{split['passed']} of {split['turns']}</td></tr>"
        )
    if s["failed_checks"]:
        listed = ", ".join(f"{_e(k)} {v}" for k, v in s["failed_checks"].items())
        out.append(f"<tr><td>failed checks</td><td>{listed}</td></tr>")
    out.append("</table>")
    for result in results:
        scenario = by_id.get(result.id)
        out.append(
            f'<h2 id="{_e(result.id)}">{_e(result.id)} {_status(result.passed)}'
            + (f' <span class="ms">split {_e(result.split)}</span>' if result.split else "")
            + "</h2>"
        )
        if result.error:
            out.append(f'<p class="fail">{_e(result.error)}</p>')
            continue
        out.append(
            "<table><tr><th>#</th><th>said</th><th>answer</th><th>checks</th><th>latency</th></tr>"
        )
        for turn in result.turns:
            within = None
            if scenario is not None:
                expect = scenario.sessions[turn.session - 1].turns[turn.index - 1].expect
                within = expect.within_ms
            said = f'<div class="said">{"🎙 " if turn.spoken else ""}{_e(turn.text)}</div>'
            if turn.heard is not None:
                said += f'<div class="heard">heard: {_e(turn.heard)}</div>'
            answer = f'<div class="answer">{_e(turn.answer)}</div>'
            for call in turn.calls:
                answer += f"<div><code>{_e(call.name)}({_e(call.arguments)})</code></div>"
            out.append(
                f'<tr class="{"pass" if turn.passed else "fail"}-row">'
                f"<td>{turn.session}.{turn.index}</td><td>{said}</td><td>{answer}</td>"
                f"<td>{_checks(turn)}</td><td>{_latency(turn, within, scale)}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>")
    path.write_text("\n".join(out), encoding="utf-8")
