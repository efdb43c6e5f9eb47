"""Bounded reservations (issue 29 part 1; ``Store(bounded_reservations=True)``, ARGV[11] ":b" of match.lua) on
a real redis-server: the pilot holding a reservation still leases a less urgent job whose score, the date by
which it should start, is less than its own need after the reserved start; a job with time to spare waits as
under EASY backfill; without the bound the match is EASY's (tests/taskqueues/store/test_reservations.py)."""

from __future__ import annotations

import pytest
import redis

from matcher.explain import explain
from taskqueues.catalog import Catalog
from taskqueues.errors import StoreError
from taskqueues.store import Store
from taskqueues.store.records import PilotOffer
from taskqueues.store.reservations import read_reservations
from tests.support.clock import FakeClock
from tests.support.invariants import check
from tests.support.store import job
from tests.taskqueues.store.test_reservations import BUSY, CATALOG, Q  # one pilot of four cores, three busy for 50 s

NOW = 1_000_000.0


def store_of(client: redis.Redis, bounded: bool) -> Store:
    return Store(client, clock=FakeClock(NOW), reservation_slack=30, bounded_reservations=bounded)


@pytest.mark.parametrize("bounded", [False, True])
def test_a_job_due_before_the_reserved_start_less_its_run_is_not_held_back(
    real_redis: redis.Redis, bounded: bool
) -> None:
    store = store_of(real_redis, bounded)
    wide, patient, due = store.submit(
        [
            job("wide", cpu=4, ete=100, score=NOW),
            job("patient", cpu=1, ete=100, score=NOW + 500),  # 500 - 150 s of need: it can wait 50 s
            job("due", cpu=1, ete=100, score=NOW + 20),  # should start within 20 s: 20 - 150 < 50
        ]
    )
    got = [j.id for j in store.match(PilotOffer("p1", Q, 1, 4000, 0, None, running=BUSY), max_jobs=2)]
    (r,) = read_reservations(store.client, store.keys)[0]
    assert (r.pilot, r.job, r.start - NOW) == ("p1", wide, 50.0)
    assert got == ([due] if bounded else [])
    assert patient not in got
    assert check(store.client, store.keys) == []
    (line,) = explain(store, Catalog.loads(CATALOG), patient).reservations
    assert f"holds cores for job {wide}" in line
    assert ("unless due to start before it, less their run" in line) is bounded


def test_a_bad_slack_is_refused_with_or_without_the_bound(real_redis: redis.Redis) -> None:
    store = store_of(real_redis, True)
    store.reservation_slack = -1
    with pytest.raises(StoreError, match=r'ARGV\[11\] \(reservation slack\) wants a number in \[0, 1e12\], with ":b"'):
        store.match(PilotOffer("p1", Q, 1, 4000, 0, None, running=BUSY))
