"""Reservations of the match (EASY backfill, match.lua) on a real redis-server: who holds, what it lets
through, takeover by a pilot that frees sooner, expiry, bad input, and what the invariant checker and
``explain`` say about them. The brute-force comparison is in tests/test_store_oracle.py."""

from __future__ import annotations

import pytest
import redis

from matcher.explain import explain
from taskqueues.catalog import Catalog
from taskqueues.errors import StoreError
from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.records import PilotOffer
from taskqueues.store.reservations import read_reservations
from tests.support.clock import FakeClock
from tests.support.invariants import check
from tests.support.store import job

Q = "site/ce/q1"
CATALOG = """
[sites.site]
[sites.site.ces.ce]
[sites.site.ces.ce.queues.q1]
shapes = [{ name = "four", cpu = 4, mem = "4G" }]
"""
BUSY = ((50.0, 1, 100, 0),) * 3  # three 1-core jobs ending in 50 s: one core free of four
#: Scores are dates (the date by which a job should start): these jobs should start in over 1000 s, so none is
#: due before a reservation's start and the bound of bounded reservations (the default) lets none through
#: (tests/taskqueues/store/test_bounded_reservations.py tests that bound).
LATER = 1_000_000.0 + 1000


@pytest.fixture
def store(real_redis: redis.Redis) -> Store:
    return Store(real_redis, clock=FakeClock(), reservation_slack=30)


def offer(pilot: str, cpu: int = 1, running: tuple[tuple[float, int, int, int], ...] | None = BUSY) -> PilotOffer:
    return PilotOffer(pilot, Q, cpu, 4000, 0, None, running=running)


def ids(store: Store, o: PilotOffer, n: int = 1) -> list[str]:
    return [j.id for j in store.match(o, max_jobs=n)]


def test_the_pilot_holds_its_free_core_for_the_wide_job_and_lets_only_short_jobs_through(store: Store) -> None:
    wide, narrow, short = store.submit(
        [
            job("wide", cpu=4, ete=100, score=LATER + 1),
            job("narrow", cpu=1, ete=100, score=LATER + 2),
            job("short", cpu=1, ete=20, score=LATER + 3),
        ]
    )
    assert ids(store, offer("p1"), 2) == [short]  # 20 s x 1.5 ends before the reserved start in 50 s
    (r,) = read_reservations(store.client, store.keys)[0]
    assert (r.pilot, r.job, r.start - store.clock()) == ("p1", wide, 50.0)
    assert ids(store, offer("p2", running=None)) == [narrow]  # reservations off: the strict match of old
    assert check(store.client, store.keys) == []


def test_a_pilot_that_frees_sooner_takes_the_reservation_over(store: Store) -> None:
    wide, narrow = store.submit(
        [job("wide", cpu=4, ete=100, score=LATER + 1), job("narrow", cpu=1, ete=100, score=LATER + 2)]
    )
    assert ids(store, offer("p1")) == []
    assert ids(store, offer("p2", running=((10.0, 1, 100, 0),) * 3)) == []
    assert read_reservations(store.client, store.keys)[0][0].pilot == "p2"
    assert ids(store, offer("p1")) == [narrow]  # p1 holds nothing any more
    assert ids(store, offer("p2", cpu=4, running=())) == [wide]
    assert read_reservations(store.client, store.keys) == ([], {})


def test_a_reservation_whose_start_passed_by_the_slack_holds_nothing(store: Store) -> None:
    _, narrow, other = store.submit(
        [
            job("wide", cpu=4, ete=100, score=LATER + 1),
            job("narrow", cpu=1, ete=100, score=LATER + 2),
            job("other", cpu=1, ete=100, score=LATER + 3),
        ]
    )
    assert ids(store, offer("p1")) == []
    store.clock.now += 50 + 31  # type: ignore[attr-defined]
    assert ids(store, offer("p1")) == [narrow]  # its estimate was wrong: expired, and not made again here
    (r,) = read_reservations(store.client, store.keys)[0]
    assert not r.active and r.pilot == "p1"
    assert ids(store, offer("p2")) == []  # another pilot may reserve it
    assert read_reservations(store.client, store.keys)[0][0].active
    assert other not in ids(store, offer("p2"))


def test_explain_names_the_pilot_holding_cores(store: Store) -> None:
    wide, narrow = store.submit(
        [job("wide", cpu=4, ete=100, score=LATER + 1), job("narrow", cpu=1, ete=100, score=LATER + 2)]
    )
    ids(store, offer("p1"))
    catalog = Catalog.loads(CATALOG)
    assert explain(store, catalog, wide).reservations == [
        f"queue {Q}: pilot p1 holds cores for this job (4 cores, 100 MB), reserved to start in 50 s"
    ]
    (line,) = explain(store, catalog, narrow).reservations
    assert f"holds cores for job {wide}" in line and "jobs that would end later than that wait" in line


def test_a_bad_list_of_running_jobs_is_refused_before_anything_changes(store: Store) -> None:
    store.submit([job("wide", cpu=4, ete=100, score=LATER + 1)])
    before = store.client.hgetall(store.keys.resv)
    bad = store._match_call(Q)
    args = store.match_args(offer("p1"), 1)
    for text in ("50:1:100", "50:1:100:0 10:1:100:0", "x:1:1:1", "nan:1:1:0"):
        args[9] = text
        with pytest.raises(redis.ResponseError, match=r"ARGV\[10\] \(running jobs\)"):
            bad(args)
    with pytest.raises(StoreError, match="running job"):
        store.match(offer("p1", running=((float("inf"), 1, 1, 0),)))
    assert store.client.hgetall(store.keys.resv) == before


def test_the_checker_reads_reservations(store: Store) -> None:
    store.submit([job("wide", cpu=4, ete=100, score=LATER + 1), job("narrow", cpu=1, ete=100, score=LATER + 2)])
    ids(store, offer("p1"))
    text = store.client.hget(store.keys.resv, Q)
    store.client.hset(store.keys.resv, Q, b"garbage")
    assert [v.kind for v in check(store.client, store.keys)] == ["resv-unreadable"]
    store.client.hset(store.keys.resv, Q, text.replace(b" 4 100 ", b" 2 100 "))  # type: ignore[union-attr]
    assert [v.kind for v in check(store.client, store.keys)] == ["resv-shape"]
    store.client.hset(store.keys.resv, "nowhere/ce/q", text)  # type: ignore[arg-type]
    store.client.hset(store.keys.resv, Q, text)  # type: ignore[arg-type]
    assert [v.kind for v in check(store.client, store.keys)] == ["resv-no-queue"]


def test_with_a_shares_policy_the_reservation_goes_to_the_first_head_in_share_order(store: Store) -> None:
    """Shares and reservations compose: the head reserved is the first the share order serves (here one group,
    so the most urgent), and backfill still lets only the short job through."""
    store.shares.publish(Policy(shares={"default": 1}))
    wide, narrow, short = store.submit(
        [
            job("wide", cpu=4, ete=100, score=LATER + 1),
            job("narrow", cpu=1, ete=100, score=LATER + 2),
            job("short", cpu=1, ete=20, score=LATER + 3),
        ]
    )
    assert ids(store, offer("p1"), 2) == [short]
    (r,) = read_reservations(store.client, store.keys)[0]
    assert (r.pilot, r.job) == ("p1", wide)
    assert ids(store, offer("p2", running=None)) == [narrow]
    assert check(store.client, store.keys) == []
