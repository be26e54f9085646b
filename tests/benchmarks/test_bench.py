"""``make bench``'s comparison and the README table it generates (``benchmarks.bench``,
``benchmarks.readme_table``): which way is worse, a zero baseline, a missing figure, and that
the README block is replaced, never typed."""

from __future__ import annotations

import pytest

from benchmarks.bench import FIGURES, RUNS, Figure, pick, table, verdict
from benchmarks.readme_table import BEGIN, END, render, updated

LOWER = Figure("t", "r", "a.b")
HIGHER = Figure("c", "r", "x", better="higher")
COUNT = Figure("f", "r", "failures", slack=0)


@pytest.mark.parametrize(
    ("figure", "baseline", "now", "expected"),
    [
        (LOWER, 2.0, 2.9, "ok"),
        (LOWER, 2.0, 3.1, "worse"),  # past 1.5×
        (LOWER, 2.0, 1.2, "better"),
        (HIGHER, 200, 140, "ok"),
        (HIGHER, 200, 120, "worse"),
        (COUNT, 0, 0, "ok"),
        (COUNT, 0, 1, "worse"),  # a zero baseline has no ratio: any failure is worse
        (LOWER, None, 3.0, "new"),
        (LOWER, 2.0, None, "missing"),
    ],
)
def test_a_figure_is_worse_only_the_wrong_way_past_its_tolerance(
    figure: Figure, baseline: float | None, now: float | None, expected: str
) -> None:
    assert verdict(figure, baseline, now) == expected


def test_figures_are_picked_by_path_and_every_figure_names_a_run() -> None:
    data = {"a": {"b": 4}, "flag": True, "s": "x"}
    assert pick(data, "a.b") == 4.0
    assert pick(data, "a.c") is None and pick(data, "flag") is None and pick(data, "s") is None
    assert pick(None, "a") is None
    names = {run.name for run in RUNS}
    assert all(f.run in names for f in FIGURES)
    assert len({f.name for f in FIGURES}) == len(FIGURES)


def test_the_table_and_the_readme_block_come_from_the_files() -> None:
    latest = {"commit": "abc1234", "dirty": False, "date": "2026-12-05T10:00:00Z",
              "machine": {"cpu": "Test CPU", "cores": 2, "load_average": [0.1, 0.2, 0.3]},
              "figures": {FIGURES[0].name: 1.5, FIGURES[1].name: None}}  # fmt: skip
    baseline = {"commit": "0000000", "date": "2026-12-01", "figures": {FIGURES[0].name: 3.0}}
    rows = table([FIGURES[0]], baseline["figures"], latest["figures"])
    assert rows[1].split()[-1] == "better" and "0.50" in rows[1]
    block = render(latest, baseline)
    assert block.startswith(BEGIN) and block.endswith(END)
    assert "`abc1234`" in block and "Test CPU, 2 cores" in block and "`0000000`" in block
    assert f"| {FIGURES[0].label} | 1.5 | 3 | better |" in block
    assert FIGURES[2].label not in block  # neither measured nor in the baseline: no row
    readme = f"# Title\n\nbefore\n{BEGIN}\nold typed figures\n{END}\nafter\n"
    new = updated(readme, block)
    assert "old typed figures" not in new and new.startswith("# Title\n\nbefore\n")
    assert new.endswith("\nafter\n") and updated(new, block) == new
    with pytest.raises(SystemExit):
        updated("# no block here\n", block)


def test_the_readme_table_is_the_one_the_files_give() -> None:
    """The README's block is generated (``make bench-readme``) from the committed files."""
    import json

    from benchmarks.bench import BASELINE, LATEST
    from benchmarks.readme_table import README

    latest = json.loads(LATEST.read_text())
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
    readme = README.read_text(encoding="utf-8")
    assert updated(readme, render(latest, baseline)) == readme, "run make bench-readme"
