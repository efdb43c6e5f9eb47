"""Long jobs never wait on an idle host (issue 20, item 4), on the local backend of ``pilotfish up``.

The first pilot is sized for the short job it was planned for (a 2-minute wall). A job estimated at 5
minutes then cannot run on it (its time left is too short), so the director plans a pilot sized for that
job; on this host the new pilot waits for the room the idle one holds, and the idle one is released at
once instead of at its idle timeout (ten minutes here, so within the test's window only the release can
free the host).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from matcher.submission import JobSpec, Submitter
from pilot.director.service import Director
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store.records import JobState
from tests.support.polling import wait_until

LONG_ETE = 300.0


def drive(
    director: Director, ctx: Context, walls: dict[str, int], until: Callable[[], bool], timeout: float, what: str
) -> None:
    """Director cycles every 0.3 s until ``until()``; ``walls`` collects the wall of every pilot submitted."""

    def cycle() -> None:
        ctx.store.requeue_expired()
        for queue_id, report in director.cycle().queues.items():
            queue = ctx.catalog.queue(queue_id, ctx.settings.vo)
            records = director.provisioned(queue, director.backend(queue))
            walls.update({b: int(records[b]["wall"]) for b in report.submitted})

    wait_until(
        until, timeout=timeout, interval=0.3, what=lambda: f"{what}; pilots: {ctx.store.pilot_records()}", between=cycle
    )


def test_a_long_job_gets_a_pilot_sized_for_it_and_the_idle_short_pilot_makes_room(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings().with_(
        redis_url=redis_url,
        catalog="",
        state_dir=str(tmp_path / "state"),
        lease_seconds=3.0,
        backoff_seconds=0.0,
        pilot_idle_timeout=600.0,
        pilot_events=False,
    )
    ctx = Context(settings)  # the local default catalog: one queue, one shape of this whole host
    director = Director(ctx, log_dir=str(tmp_path / "logs"))
    walls: dict[str, int] = {}
    try:
        short = Submitter.of(ctx).submit([JobSpec("short", "true", ete=1.0)], name="short").ids["short"]
        drive(director, ctx, walls, lambda: ctx.store.job(short).state.final, 60, "the short job done")
        [first] = walls
        assert walls[first] < LONG_ETE, "the first pilot is sized for its short job"

        long = Submitter.of(ctx).submit([JobSpec("long", "sleep 0.5", ete=LONG_ETE)], name="long").ids["long"]
        drive(director, ctx, walls, lambda: ctx.store.job(long).state.final, 120, "the long job done")
        record = ctx.store.job(long)
        assert record.state == JobState.DONE and record.attempt == 1, record
        assert len(walls) == 2 and min(w for b, w in walls.items() if b != first) >= LONG_ETE, walls
        stopped = [str(r.get("stopped", "")) for r in ctx.store.pilot_records().values() if r.get("stopped")]
        assert any(s.startswith("released by the director") for s in stopped), stopped
    finally:
        director.stop_all()
        director.close()
