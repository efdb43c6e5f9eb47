"""Idle pilots give their room back when another of our pilots waits for it (issue 20, item 1).

On every backend (local, the Slurm of ``scripts/slurm.sh``, the Grid Engine of ``scripts/sge.sh``): a
pilot that ran its job and has nothing left that fits it keeps its room while nothing else waits (it
would take the next job at once), and releases itself, long before its idle timeout, as soon as a pilot
of another shape is planned. Pilots here idle for ten minutes before they leave by themselves, so a
pilot that ends within the test's window ended because it was released.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pilot.director.idle_pilots import Room, release_idle
from taskqueues.store import Store
from taskqueues.store.keys import Keys
from taskqueues.store.records import JobState
from tests.support.directors import KINDS, Rig, all_final
from tests.support.paths import ROOT

IDLE_TIMEOUT = 600.0
#: Grid Engine starts pilots with the environment the director gives them only: this tree's code, not an
#: installed one.


def _marks(kind: str) -> list[pytest.MarkDecorator]:
    return [getattr(pytest.mark, kind)] if kind != "local" else []


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    monkeypatch.chdir(tmp_path)
    made = Rig(request.param, redis_url, tmp_path, idle_timeout=IDLE_TIMEOUT, pilot_env={"PYTHONPATH": str(ROOT)})
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("rig", [pytest.param(k, marks=_marks(k), id=k) for k in KINDS], indirect=True)
def test_an_idle_pilot_no_job_fits_is_released_when_another_shape_waits(rig: Rig) -> None:
    first = list(rig.submit([rig.job("one", seconds=0.5)]).ids.values())
    rig.drive(lambda: all_final(rig.jobs(first)), 90, "the 1-core job done")
    assert len(rig.submitted()) == 1, f"pilots {rig.submitted()} for one 1-core job; {rig.timeline()}"
    [small] = rig.submitted()

    # Nothing else waits: the idle pilot keeps its room, and nobody asked it to go.
    for _ in range(3):
        report = rig.cycle()
        assert report.released == [] and small not in rig.ended(), report
        time.sleep(0.3)
    assert rig.ctx.store.pilots.stop_requests() == {}

    # A 2-core job: the idle 1-core pilot cannot take it, a c2 pilot is planned, the c1 pilot goes.
    second = list(rig.submit([rig.job("two", cpu=2, seconds=0.5)]).ids.values())
    rig.drive(
        lambda: all_final(rig.jobs(second)) and small in rig.ended(),
        90,
        "the 2-core job done and the idle 1-core pilot gone",
    )
    assert any(rig.reports[-k].queues[rig.queue.id].released for k in range(1, len(rig.reports) + 1))
    assert "released by the director" in rig.pilot_logs()
    assert [j.state for j in rig.jobs(first + second)] == [JobState.DONE, JobState.DONE]
    assert sorted(job for job, _ in rig.completions()) == sorted(first + second), "each job ran once"


def test_release_requests_follow_the_demand(real_redis: redis.Redis) -> None:
    keys = Keys()
    idle = Room(idle={"p1": "site/ce/q"}, waiting=1)
    assert release_idle(Store(real_redis, keys).pilots, [idle], live={"p1"}) == ["p1"]
    held = Store(real_redis, keys).pilots.stop_request("p1")
    assert held is not None and held.mode == "release" and "1 pilot(s) wait" in held.reason
    assert release_idle(Store(real_redis, keys).pilots, [idle], live={"p1"}) == [], "asked once, not at every cycle"

    # A waiting job fits it again: the request is withdrawn.
    release_idle(Store(real_redis, keys).pilots, [Room(serving={"p1"}, waiting=1)], live={"p1"})
    assert Store(real_redis, keys).pilots.stop_request("p1") is None
    # Idle, but nothing waits for its room: it is left alone; once asked, it stays asked.
    assert release_idle(Store(real_redis, keys).pilots, [Room(idle={"p1": "site/ce/q"})], live={"p1"}) == []
    assert Store(real_redis, keys).pilots.stop_request("p1") is None
    release_idle(Store(real_redis, keys).pilots, [idle], live={"p1"})
    release_idle(Store(real_redis, keys).pilots, [Room(idle={"p1": "site/ce/q"})], live={"p1"})
    assert Store(real_redis, keys).pilots.stop_request("p1") is not None
    release_idle(Store(real_redis, keys).pilots, [Room(serving={"p1"})], live={"p1"})

    # An operator's drain is not withdrawn by the director; requests of pilots that are gone are dropped.
    Store(real_redis, keys).pilots.request_stop("p2", "drain", "operator")
    release_idle(Store(real_redis, keys).pilots, [Room(serving={"p2"}, waiting=1)], live={"p2"})
    assert Store(real_redis, keys).pilots.stop_request("p2") is not None
    release_idle(Store(real_redis, keys).pilots, [], live=set())
    assert Store(real_redis, keys).pilots.stop_requests() == {}
