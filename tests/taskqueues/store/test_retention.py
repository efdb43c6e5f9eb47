"""Job retention (``taskqueues.store.retention``, ``forget.lua``): a request is forgotten whole once every one of
its jobs ended before the cutoff, with its jobs' records, payload output and index entries; nothing that is
still running, or that re-pressure has not learnt from, goes; the store stays consistent."""

from __future__ import annotations

import re

import pytest

from taskqueues.errors import StoreError
from taskqueues.store import Store, retention
from taskqueues.store.records import PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.store import check_store, job

pytestmark = pytest.mark.store(servers=("real", "fake"))

OFFER = PilotOffer("p", "site/ce/q1", 8, 100_000)


def request(store: Store, name: str, n: int, **kw: object) -> list[str]:
    rec = {"name": name, "priority": 0, "ts": store.clock(), "n": n}
    return store.submit([job(rule="r", key=f"{name}{i}", **kw) for i in range(n)], request=(name, rec))  # type: ignore[arg-type]


def run_all(store: Store, clock: FakeClock, *, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Match and end every waiting job (done, or failed when named), one second each."""
    while matched := store.match(OFFER):
        for m in matched:
            clock.now += 1
            if m.id in fail:
                store.fail(m.id, m.attempt, "p", RunResult(reason="broken"), requeue=False)
            else:
                store.complete(m.id, m.attempt, "p", RunResult(wall=1))


def learnt_up_to(store: Store, t: float) -> None:
    """What re-pressure's run leaves behind: its cursor past the done log up to ``t``."""
    store.client.hset(store.keys.cursor, "repressure", repr(t))


def test_a_request_is_forgotten_whole_once_all_its_jobs_ended_before_the_cutoff(store: Store, clock: FakeClock) -> None:
    old = request(store, "old", 3)
    run_all(store, clock, fail={old[1]})
    for j in old:
        store.logs.ship(j, 1, "p", cap=100, host="h", directory="/d", live=False, chunks={"out": (b"hi", 2)})
    clock.now += 100
    young = request(store, "young", 2)
    run_all(store, clock)
    learnt_up_to(store, clock.now + 1)
    k = store.keys

    cutoff = clock.now - 50  # after the old request's last end, before the young one's
    gone = retention.forget_ended(store, cutoff)
    assert (gone.requests, gone.jobs) == (1, 3)
    assert store.client.hget(k.requests, "old") is None and store.client.hget(k.requests, "young")
    assert store.jobs(old) == [] and [j.id for j in store.jobs(young)] == young
    for j in old:
        assert not store.client.exists(k.log(j))
        assert store.client.zscore(k.ended, j) is None and store.client.zscore(k.donelog, j) is None
    assert store.client.sismember(k.byrule("r"), old[0]) == 0
    assert int(store.client.hget(k.stats, "forgotten") or 0) == 3
    check_store(store)
    assert retention.forget_ended(store, cutoff).jobs == 0, "a second pass finds nothing more"


def test_a_request_with_a_job_still_running_or_ended_after_the_cutoff_stays(store: Store, clock: FakeClock) -> None:
    ids = request(store, "r1", 3)
    [first] = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))
    store.complete(first.id, first.attempt, "p", RunResult(wall=1))
    [second] = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))  # running
    clock.now += 1000
    learnt_up_to(store, clock.now)
    assert retention.forget_ended(store, clock.now).jobs == 0
    assert [j.id for j in store.jobs(ids)] == ids
    store.complete(second.id, second.attempt, "p", RunResult(wall=1))
    run_all(store, clock)
    learnt_up_to(store, clock.now + 1)
    assert retention.forget_ended(store, clock.now - 0.5).jobs == 0, "its last job ended after the cutoff"
    assert retention.forget_ended(store, clock.now + 1).requests == 1
    check_store(store)


def test_a_successful_job_waits_until_re_pressure_learnt_from_it(store: Store, clock: FakeClock) -> None:
    ids = request(store, "r1", 2)
    run_all(store, clock)
    clock.now += 100
    assert retention.forget_ended(store, clock.now).jobs == 0, "no cursor: nothing learnt yet"
    learnt_up_to(store, clock.now - 100.5)  # between the two ends (1 s apart, 100 s ago)
    assert retention.forget_ended(store, clock.now).jobs == 0
    learnt_up_to(store, clock.now)
    assert retention.forget_ended(store, clock.now).jobs == 2
    assert store.jobs(ids) == []


def test_jobs_of_no_request_go_once_their_dependents_ended(store: Store, clock: FakeClock) -> None:
    a, b, c = store.submit([job(dependents=(1,)), job(pending=1), job()])
    [m] = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))
    assert m.id == a
    store.complete(a, m.attempt, "p", RunResult(wall=1))  # b is released, not ended
    store.cancel(c)
    clock.now += 10
    learnt_up_to(store, clock.now)
    assert retention.forget_ended(store, clock.now).jobs == 1, "c goes; a stays while its dependent b is open"
    assert [j.id for j in store.jobs([a, b, c])] == [a, b]
    check_store(store)


def test_a_dangling_index_entry_is_dropped_and_an_unreadable_record_stays(store: Store, clock: FakeClock) -> None:
    k = store.keys
    (a,) = store.submit([job()])
    store.cancel(a)
    store.client.zadd(k.ended, {"999": 1.0})
    store.client.hset(k.jobs, "998", "{not json")
    store.client.zadd(k.ended, {"998": 1.0})
    clock.now += 10
    assert retention.forget_ended(store, clock.now).jobs == 1
    assert store.client.zscore(k.ended, "999") is None
    assert store.client.hget(k.jobs, "998") == b"{not json", "a damaged record is parked's business, not ours"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["old", "7"], "takes no job ids with a request"),
        (["bad request!"], "ARGV[3] (request id)"),
        (["", "1:2"], "ARGV[4] (job id)"),
    ],
)
def test_forget_refuses_bad_arguments_and_changes_nothing(store: Store, args: list[str], error: str) -> None:
    k = store.keys
    (a,) = store.submit([job()])
    store.cancel(a)
    before = store.client.hgetall(k.jobs)
    with pytest.raises(StoreError, match=re.escape(error)):
        store.call_script("forget", [k.jobs, k.requests, k.donelog, k.cursor, k.kills], [k.base + ":", "1e11", *args])
    assert store.client.hgetall(k.jobs) == before
