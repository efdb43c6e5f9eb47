"""Pilots that take work for most of their life (issue 32, part 3).

* A queue's ``pilot_lifetime`` (catalog, inherited like ``wall_granularity``) is the least wall a new pilot
  asks for, capped by its shape's wall: a pilot lives for several jobs of its shape instead of one
  granularity step past its first job's wall.
* A running pilot whose time left is below every waiting job's wall, while the queue's ``max_running``
  holds a new pilot back, is asked to release itself at once (it would otherwise idle out while the jobs
  wait for its idle timeout).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import redis

from matcher.submission import JobSpec, Submitter
from pilot.director.idle_pilots import Room, release_idle
from pilot.director.service import Director
from taskqueues.catalog import Catalog
from taskqueues.context import Context
from taskqueues.errors import ConfigError
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.keys import Keys

CATALOG = textwrap.dedent(
    """
    [sites.S]
    pilot_lifetime = "2h"
    [sites.S.vo.lhcb]
    pilot_lifetime = "30m"
    [sites.S.ces.C.queues.Q]
    wall_granularity = 60
    n_max_queued = 1
    max_running = 1
    shapes = [{ name = "c1", cpu = 1, mem = "100M", wall = "90m" }]
    [sites.S.ces.C.queues.R]
    shapes = [{ name = "c1", cpu = 1, mem = "100M" }]
    [sites.T.ces.C.queues.Q]
    shapes = [{ name = "c1", cpu = 1, mem = "100M" }]
    """
)


def test_pilot_lifetime_is_a_duration_inherited_like_the_other_queue_settings() -> None:
    catalog = Catalog.loads(CATALOG)
    assert catalog.queue("S/C/Q").pilot_lifetime == 7200
    assert catalog.queue("S/C/Q", vo="lhcb").pilot_lifetime == 1800  # the VO section of the site
    assert catalog.queue("T/C/Q").pilot_lifetime is None  # not set: pilots sized to their jobs
    with pytest.raises(ConfigError, match="pilot_lifetime"):
        Catalog.loads(
            "[sites.S]\npilot_lifetime = -5\n[sites.S.ces.C.queues.Q]\nshapes = [{ name = 'a', cpu = 1, mem = 1 }]"
        )


def test_a_new_pilot_asks_for_the_queue_lifetime_capped_by_its_shape_wall(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "catalog.toml").write_text(CATALOG)
    settings = Settings().with_(
        redis_url=redis_url,
        catalog=str(tmp_path / "catalog.toml"),
        state_dir=str(tmp_path / "state"),
        pilot_idle_timeout=5.0,
        pilot_events=False,
    )
    ctx = Context(settings)
    director = Director(ctx, log_dir=str(tmp_path / "logs"))
    try:
        spec = JobSpec("one", "true", requirements={"cpu": 1, "mem": "50M", "wall": "10m", "Site": "S", "Queue": "Q"})
        Submitter.of(ctx).submit([spec], name="one")
        report = director.cycle().queues["S/C/Q"]
        [batch_id] = report.submitted
        queue = ctx.catalog.queue("S/C/Q")
        record = director.provisioned(queue, director.backend(queue))[batch_id]
        # 10 min job + one 60 s step + the stop margin would be ~12 min: the lifetime (2 h) wins, the shape's
        # 90 min wall caps it.
        assert int(record["wall"]) == 5400, record
    finally:
        director.stop_all(wait=10)
        director.close()


def test_a_pilot_too_short_for_every_waiting_job_is_released_while_the_queue_is_capped(
    real_redis: redis.Redis,
) -> None:
    keys = Keys()
    room = Room(idle={"p1": "S/C/Q"}, expired={"p1": "S/C/Q"})  # no other pilot waits in the backend
    assert release_idle(Store(real_redis, keys).pilots, [room], live={"p1"}) == ["p1"]
    held = Store(real_redis, keys).pilots.stop_request("p1")
    assert held is not None and held.mode == "release" and "too little time left" in held.reason
    # An idle pilot that is not out of time stays while nothing waits for its room.
    assert release_idle(Store(real_redis, keys).pilots, [Room(idle={"p2": "S/C/Q"})], live={"p1", "p2"}) == []
