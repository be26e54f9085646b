"""The short version of ``python -m benchmarks.fleet``: two processes behind nginx, twenty
sessions, a SIGKILL, a drain and a PostgreSQL restart (embedded, its own), no soak."""

from __future__ import annotations

from benchmarks.fleet import run
from tests.fleet import needs_nginx


@needs_nginx
async def test_a_small_fleet_loses_and_repeats_nothing_through_kill_drain_and_restart() -> None:
    result = await run(
        processes=2,
        sessions=20,
        seconds=10,
        soak_minutes=0,
        seed=11,
        drop_p=0.1,
        think_s=(1.0, 3.0),
    )
    assert (result["killed"], result["drained"], result["postgres_restarts"]) == (1, 1, 1)
    assert result["drain_exit_status"] == 0
    assert result["drops"] > 0 and result["continued_from_journal"] > 0
    assert result["turns"] > result["sessions"]
    assert result["lost_events"] == 0
    assert result["duplicated_events"] == 0
    assert result["failed_continuations"] == 0
    assert result["server_errors"] == 0, result["server_error_kinds"]
