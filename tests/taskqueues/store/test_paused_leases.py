"""A lease that expired while its pilot lived: the store paused longer than the lease (issue 32, part 1).

A paused server (SIGSTOP, a frozen VM, a cut network) keeps its run id, so the reaper gives no grace when it
resumes and requeues the leases that expired meanwhile, while their pilots still run (or have finished) the
payloads. The pilot's report or heartbeat of that same attempt takes such a job back, as long as nobody
matched it since (``_lib.lua``'s ``requeued_from``); a job matched again is refused as before. Each test
ends with the whole store consistent (tests.support.invariants).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskqueues.errors import StaleReport
from taskqueues.store import Store
from taskqueues.store.counters import StatField
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.keyspace import text
from tests.support.store import check_store, job

pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))

Q1 = "site/ce/q1"


@pytest.fixture(autouse=True)
def consistent(store: Store) -> Iterator[None]:
    yield
    check_store(store)


def offer(pilot: str = "p1", cpu: int = 8) -> PilotOffer:
    return PilotOffer(pilot=pilot, queue=Q1, cpu=cpu, mem=10_000, tmp=10_000, time_left=None)


def taken_back(store: Store) -> int:
    return int(text(store.client.hget(store.keys.stats, StatField.TAKEN_BACK) or b"0"))


def paused(store: Store, clock: FakeClock, *, start: bool = True) -> str:
    """A job leased to p1 (started if ``start``) whose lease the reaper requeued into its task queue."""
    (jid,) = store.submit([job(score=1)])
    (got,) = store.match(offer())
    assert got.id == jid
    if start:
        store.start(jid, 1, "p1")
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 1)  # requeued and back in its task queue at once
    waiting = store.job(jid)
    assert (waiting.state, waiting.attempt, waiting.retries, waiting.pilot) == (JobState.WAITING, 1, 1, None)
    assert store.client.zcard(store.keys.tq("tqA")) == 1
    return jid


def test_a_report_of_a_requeued_job_nobody_matched_since_is_recorded(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    store.complete(jid, 1, "p1", RunResult(exit_code=0, wall=40.0))
    done = store.job(jid)
    assert (done.state, done.attempt, done.retries, done.exit_code) == (JobState.DONE, 1, 0, 0)
    assert store.match(offer("p2")) == []  # out of its task queue: nobody runs it again
    assert store.requeue_expired() == (0, 0, 0)
    assert taken_back(store) == 1


def test_a_failure_of_a_requeued_job_nobody_matched_since_is_recorded(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    assert store.fail(jid, 1, "p1", RunResult(exit_code=3, reason="exit code 3")) is JobState.FAILED
    failed = store.job(jid)
    assert (failed.state, failed.attempt, failed.reason) == (JobState.FAILED, 1, "exit code 3")
    assert store.match(offer("p2")) == []


def test_a_give_back_of_a_requeued_job_counts_one_retry(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    assert store.fail(jid, 1, "p1", RunResult(reason="preempted"), requeue=True) is JobState.WAITING
    assert store.job(jid).retries == 1  # the give-back's, not the reaper's as well
    (again,) = store.match(offer("p2"))
    assert (again.id, again.attempt) == (jid, 2)
    with pytest.raises(StaleReport):  # the give-back, sent again, takes nothing back
        store.fail(jid, 1, "p1", RunResult(reason="preempted"), requeue=True)


def test_a_report_from_the_back_off_is_recorded(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job(score=1)])
    store.match(offer())
    clock.now += 31
    store.requeue_expired()
    store.match(offer("p2"))
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 0)  # a second expiry: it waits out a back-off, in no task queue
    assert store.client.zscore(store.keys.delayed, jid) is not None
    store.complete(jid, 2, "p2")
    done = store.job(jid)
    assert (done.state, done.attempt, done.retries) == (JobState.DONE, 2, 1)
    assert store.client.zscore(store.keys.delayed, jid) is None


def test_a_job_matched_again_is_refused_to_its_first_pilot(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    (again,) = store.match(offer("p2"))
    assert again.attempt == 2
    with pytest.raises(StaleReport):
        store.complete(jid, 1, "p1")
    with pytest.raises(StaleReport):
        store.fail(jid, 1, "p1", RunResult(exit_code=1))
    assert store.heartbeat("p1", {jid: 1}).lost == (jid,)
    matched = store.job(jid)
    assert (matched.state, matched.attempt, matched.pilot) == (JobState.MATCHED, 2, "p2")
    assert taken_back(store) == 0


def test_another_pilot_or_attempt_takes_nothing_back(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    with pytest.raises(StaleReport):
        store.complete(jid, 1, "p2")
    with pytest.raises(StaleReport):
        store.complete(jid, 0, "p1")
    assert store.heartbeat("p2", {jid: 1}).lost == (jid,)
    assert store.job(jid).state is JobState.WAITING
    assert taken_back(store) == 0


@pytest.mark.parametrize("start", [True, False])
def test_the_heartbeat_of_the_same_attempt_takes_the_job_back(store: Store, clock: FakeClock, start: bool) -> None:
    jid = paused(store, clock, start=start)
    reply = store.heartbeat("p1", {jid: 1})
    assert reply.lost == () and reply.kills == {}
    held = store.job(jid)
    expected = JobState.RUNNING if start else JobState.MATCHED
    assert (held.state, held.attempt, held.pilot, held.retries) == (expected, 1, "p1", 0)
    assert store.match(offer("p2")) == []
    clock.now += 20
    assert store.requeue_expired() == (0, 0, 0)  # leased again for a whole lease
    if not start:
        store.start(jid, 1, "p1")
    store.complete(jid, 1, "p1")
    assert store.job(jid).state is JobState.DONE
    assert taken_back(store) == 1


def test_the_start_of_the_same_attempt_takes_the_job_back(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock, start=False)
    store.start(jid, 1, "p1")
    held = store.job(jid)
    assert (held.state, held.attempt, held.pilot, held.retries) == (JobState.RUNNING, 1, "p1", 0)
    assert store.match(offer("p2")) == []
    assert taken_back(store) == 1


def test_a_start_sent_again_takes_a_started_job_back_no_more(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock, start=True)
    with pytest.raises(StaleReport):
        store.start(jid, 1, "p1")  # its heartbeat or its end report does
    assert store.job(jid).state is JobState.WAITING


def test_a_start_in_a_pilot_exchange_takes_the_job_back(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock, start=False)
    exchange = store.exchange("p1", starts=[(jid, 1, clock.now)])
    assert exchange.refused == {}
    assert store.job(jid).state is JobState.RUNNING


def test_an_end_report_in_a_pilot_exchange_takes_the_job_back(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    exchange = store.exchange("p1", completions=[(jid, 1, RunResult(exit_code=0))])
    assert exchange.refused == {}
    assert store.job(jid).state is JobState.DONE


def test_a_job_named_twice_in_a_heartbeat_is_taken_back_once(store: Store, clock: FakeClock) -> None:
    jid = paused(store, clock)
    args = ["p1", clock.now, store.lease_seconds, "", jid, 1, "", "", jid, 1, "", ""]
    k = store.keys
    store.call_script("heartbeat", [k.jobs, k.leases, k.kills, k.pilots, k.pilotseen, k.stats], args)
    held = store.job(jid)
    assert (held.state, held.retries) == (JobState.RUNNING, 0)
    assert taken_back(store) == 1
