from __future__ import annotations

from benchmarks import resume


async def test_random_drops_lose_and_duplicate_nothing() -> None:
    result = await resume.run(turns=60, mean_gap_s=0.0, seed=3, drop_every=3)
    assert result["drops"] > 0 and result["resumes"] > 0
    assert result["lost_events"] == 0
    assert result["duplicated_events"] == 0
    assert result["journal_events"] == 120
