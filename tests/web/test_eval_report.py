"""The HTML report of ``openrealtime eval`` in Chromium: it renders on its own (no request but
its own file), with the summary, a row per turn, each check and a latency bar."""

from __future__ import annotations

from pathlib import Path

from evals.checks import CheckResult, ToolCall
from evals.report import write_html
from evals.runner import ScenarioResult, TurnResult
from evals.scenario import load_file
from tests.web.conftest import Launch

SCENARIO = """
id: shop
split: dev
sessions:
  - turns:
      - user: How long do refunds take?
        expect: {contains_any: [5 days], within_ms: 2000}
      - say: Where is order 7?
        expect: {tool: get_order}
"""


async def test_the_report_renders_alone_with_every_turn_check_and_latency(
    tmp_path: Path, launch: Launch, silence_wav: Path
) -> None:
    source = tmp_path / "shop.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    scenarios = load_file(source)
    refunds = TurnResult(1, 1, "How long do refunds take?", False, answer="Within 5 days.",
                         first_ms=800.0, done_ms=1500.0,
                         checks=[CheckResult("contains_any", "passed"),
                                 CheckResult("within_ms", "passed")])  # fmt: skip
    order = TurnResult(1, 2, "Where is order 7?", True, heard="where is order seven",
                       answer="<img src=x onerror=alert(1)> I don't know.", first_ms=2600.0,
                       calls=[ToolCall("lookup", '{"q": "7"}')],
                       checks=[CheckResult("tool", "failed", "called ['lookup']")])  # fmt: skip
    results = [ScenarioResult("shop", "dev", str(source), [refunds, order])]
    report = tmp_path / "report.html"
    write_html(report, results, scenarios)

    browser = await launch(silence_wav)
    page = await browser.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    await page.goto(report.as_uri())

    assert requests == [report.as_uri()]  # nothing fetched: self-contained
    assert dialogs == [] and await page.locator("img").count() == 0  # escaped, never run
    assert await page.title() == "OpenRealtime eval"
    assert await page.text_content("#turns-passed") == "1"
    rows = page.locator("tr.pass-row, tr.fail-row")
    assert await rows.count() == 2
    assert await page.locator("tr.fail-row").count() == 1
    second = rows.nth(1)
    assert "heard: where is order seven" in (await second.inner_text())
    assert "✗ tool — called ['lookup']" in (await second.inner_text())
    assert 'lookup({"q": "7"})' in (await second.inner_text())
    widths = await page.eval_on_selector_all(
        ".bar span", "bars => bars.map(b => b.getBoundingClientRect().width)"
    )
    assert len(widths) == 2 and 0 < widths[0] < widths[1]  # 800 ms draws shorter than 2.6 s
    mark = await page.locator(".bar i").count()
    assert mark == 1  # the first turn's within_ms
    await page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
