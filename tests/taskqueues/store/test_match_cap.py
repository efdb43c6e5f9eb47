"""The match's per-job cap (match.lua ARGV[12], ``PilotOffer.cap``): the jobs leased together fit the offer,
each fits the cap. A pilot's prefetch offers its hold's room (several pilots' worth) capped at its own size, so
a one-core pilot leases two one-core jobs in one call and never a job its empty pilot could not run (real
redis-server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer
from tests.support.keyspace import dump_all
from tests.support.store import check_store, job

pytestmark = pytest.mark.store(lease_seconds=30)

Q = "site/ce/q1"


def hold_offer(cpu: int, mem: int, cap: tuple[int, int, int] | None) -> PilotOffer:
    """A prefetch's offer: the hold's room, no reservations."""
    return PilotOffer("p1", Q, cpu, mem, 0, None, running=None, cap=cap)


def test_each_job_fits_the_cap_and_together_they_fit_the_offer(store: Store) -> None:
    wide, one, two, three = store.submit(
        [job("w", cpu=2, score=1), job("n", score=2), job("n", score=3), job("n", score=4)]
    )
    got = store.match(hold_offer(2, 1000, (1, 500, 0)), max_jobs=2)
    assert [j.id for j in got] == [one, two], "a wider job than the pilot, or not two jobs in one call"
    assert store.job(wide).state is JobState.WAITING and store.job(three).state is JobState.WAITING
    check_store(store)


def test_without_a_cap_the_offer_is_the_cap_as_of_old(store: Store) -> None:
    wide, one, two = store.submit([job("w", cpu=2, score=1), job("n", score=2), job("n", score=3)])
    assert [j.id for j in store.match(hold_offer(2, 1000, None), max_jobs=2)] == [wide]
    assert [j.id for j in store.match(hold_offer(2, 1000, (2, 1000, 0)), max_jobs=2)] == [one, two]


def test_the_cap_bounds_memory_and_the_total_still_bounds_the_sum(store: Store) -> None:
    big, small, other = store.submit(
        [job("b", mem=600, score=1), job("s", mem=300, score=2), job("o", mem=450, score=3)]
    )
    got = store.match(hold_offer(4, 700, (1, 500, 0)), max_jobs=4)
    assert [j.id for j in got] == [small], "the memory cap or the memory total was not kept"
    assert {store.job(i).state for i in (big, other)} == {JobState.WAITING}


def test_what_a_parked_job_took_is_free_again_under_the_cap(store: Store) -> None:
    bad, one, two = store.submit([job("a", score=1), job("a", score=2), job("b", score=3)])
    store.client.hset(store.keys.jobs, bad, '{"s":"waiting","mt":')
    assert [j.id for j in store.match(hold_offer(2, 1000, (1, 500, 0)), max_jobs=2)] == [one, two]
    assert set(store.parked()) == {bad}


def test_a_bad_cap_is_refused_and_changes_nothing(store: Store) -> None:
    store.submit([job("n", score=1)])
    call = store._match_call(Q, 12)
    args = store.match_args(hold_offer(2, 1000, (1, 500, 0)), 2)
    bad: list[tuple[int, Any, str]] = [
        (11, "1:500", r'^match: ARGV\[12\] \(per-job cap\) wants "cpu:mem:tmp", whole numbers in \[0, 1e15\], got '),
        (11, "1:-5:0", r"^match: ARGV\[12\] \(per-job cap\) wants"),
        (11, "1.5:500:0", r"^match: ARGV\[12\] \(per-job cap\) wants"),
        (11, "2e15:0:0", r"^match: ARGV\[12\] \(per-job cap\) wants"),
        (9, "", r'^match: ARGV\[12\] \(per-job cap\) wants ARGV\[10\] "-" \(no reservations\)'),
    ]
    before = dump_all(store.client)
    for i, value, message in bad:
        wrong = list(args)
        wrong[i] = value
        with pytest.raises(redis.ResponseError, match=message):
            call(wrong)
        assert dump_all(store.client) == before, f"ARGV[{i + 1}] = {json.dumps(value)} changed the keyspace"
    with pytest.raises(redis.ResponseError, match=r"^match: wants 2 KEYS and 11 or 12 ARGV, got 2 and 13"):
        store._match_call(Q, 13)([*args, "x"])
