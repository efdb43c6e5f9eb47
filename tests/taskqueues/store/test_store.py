"""The store's operations, each atomic, against a real redis-server and against fakeredis."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator

import pytest
import redis

from taskqueues.errors import ConfigError, NotFound, StaleReport, StoreError
from taskqueues.store import Store, facade_reads
from taskqueues.store.keys import MATCHED_COUNT, WAKE_SHARDS, Keys
from taskqueues.store.records import (
    Job,
    JobState,
    JobUsage,
    NewJob,
    PilotOffer,
    RunResult,
    read_requirements,
    stored_requirements,
)
from tests.support.clock import FakeClock
from tests.support.keyspace import text
from tests.support.polling import wait_until
from tests.support.store import check_heads, check_store, job

pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))

Q1 = "site/ce/q1"
Q2 = "site/ce/q2"


@pytest.fixture(autouse=True)
def consistent(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test of the ``store`` fixture leaves it consistent (tests.support.invariants)."""
    store = request.getfixturevalue("store") if "store" in request.fixturenames else None
    yield
    if store is not None:
        check_store(store)


def offer(
    cpu: int = 8, mem: int = 10_000, tmp: int = 10_000, queue: str = Q1, left: float | None = None, pilot: str = "p1"
) -> PilotOffer:
    return PilotOffer(pilot=pilot, queue=queue, cpu=cpu, mem=mem, tmp=tmp, time_left=left)


def test_submit_then_match_leases_the_most_urgent(store: Store) -> None:
    ids = store.submit([job(score=5), job(score=1), job("tqB", score=3)])
    got = store.match(offer())
    assert [j.id for j in got] == [ids[1]]
    leased = store.job(ids[1])
    assert leased.state is JobState.MATCHED and leased.attempt == 1 and leased.pilot == "p1"
    assert [j.id for j in store.match(offer())] == [ids[2]]
    assert [j.id for j in store.match(offer())] == [ids[0]]
    assert store.match(offer()) == []


def test_match_skips_heads_that_do_not_fit_but_never_picks_a_less_urgent_fitting_one(store: Store) -> None:
    big, small_late, small_early = store.submit([job("big", cpu=8, score=1), job("s", score=9), job("s2", score=5)])
    assert [j.id for j in store.match(offer(cpu=2))] == [small_early]
    assert [j.id for j in store.match(offer(cpu=8))] == [big]
    assert [j.id for j in store.match(offer(cpu=8))] == [small_late]


def test_only_heads_are_considered_within_a_task_queue(store: Store) -> None:
    # Same task queue: the head needs 500 MB, the next only 50; a pilot with 100 MB gets nothing.
    store.submit([job(mem=500, score=1), job(mem=50, score=2)])
    assert store.match(offer(mem=100)) == []


def test_time_left_excludes_jobs_whose_estimate_is_longer(store: Store) -> None:
    long, short = store.submit([job("L", ete=3600, score=1), job("S", ete=60, score=2)])
    assert [j.id for j in store.match(offer(left=600))] == [short]
    assert store.match(offer(left=600)) == []
    assert [j.id for j in store.match(offer(left=None))] == [long]


def test_a_job_with_a_wall_fits_on_its_wall_whatever_its_estimate(store: Store) -> None:
    """Issue 19: a pilot with 60 s left took a job of wall 600 s (estimated 5 s) and refused one of wall
    30 s (estimated 100 s). The wall is what the job needs; the estimate only makes its urgency."""
    long_wall, short_wall = store.submit([job("W", wall=600, ete=5, score=1), job("V", wall=30, ete=100, score=2)])
    assert [j.id for j in store.match(offer(left=60))] == [short_wall]
    assert store.match(offer(left=599)) == []
    assert [j.id for j in store.match(offer(left=600))] == [long_wall]


def test_without_a_wall_the_estimate_with_its_safety_factor_must_fit(clock: FakeClock, store: Store) -> None:
    assert store.ete_safety_factor == 1.5  # the default: 100 s estimated needs 150 s left
    (jid,) = store.submit([job("E", ete=100)])
    assert store.match(offer(left=149)) == []
    assert [j.id for j in store.match(offer(left=150))] == [jid]
    doubled = Store(store.client, Keys(vo="doubled"), clock=clock, ete_safety_factor=2)
    (other,) = doubled.submit([job("E", ete=100)])
    assert doubled.match(offer(left=199)) == []
    assert [j.id for j in doubled.match(offer(left=200))] == [other]
    with pytest.raises(ConfigError, match=r"ete_safety_factor must be at least 1, got 0\.5"):
        Store(store.client, ete_safety_factor=0.5)


def test_eligibility_comes_from_the_pool(store: Store) -> None:
    only_q2, both = store.submit([job("a", queues=(Q2,), score=1), job("b", queues=(Q1, Q2), score=2)])
    assert [j.id for j in store.match(offer(queue=Q1))] == [both]
    assert store.match(offer(queue=Q1)) == []
    assert [j.id for j in store.match(offer(queue=Q2))] == [only_q2]


def test_stale_index_after_a_match_through_another_queue(store: Store) -> None:
    a1, a2, b1 = store.submit(
        [job("a", queues=(Q1, Q2), score=1), job("a", queues=(Q1, Q2), score=10), job("b", queues=(Q1,), score=5)]
    )
    assert [j.id for j in store.match(offer(queue=Q2))] == [a1]  # Q1's index still says 1 for "a"
    assert [j.id for j in store.match(offer(queue=Q1))] == [b1]
    assert [j.id for j in store.match(offer(queue=Q1))] == [a2]


def test_a_stale_index_entry_is_raised_by_a_walk_that_reads_past_it(store: Store) -> None:
    """A one-job call reads a page of 3 entries: "a" (stale at 1), t0 (10) and t1 (11). a's real head (50) is
    past the page's last index score, so its entry is raised there, and t0 is leased."""
    ids = store.submit(
        [job("a", queues=(Q1, Q2), score=1), job("a", queues=(Q1, Q2), score=50)]
        + [job(f"t{i}", score=10 + i) for i in range(5)]
    )
    assert [j.id for j in store.match(offer(queue=Q2))] == [ids[0]]
    index = store.keys.qheads(Q1)
    assert store.client.zscore(index, "a") == 1
    assert [j.id for j in store.match(offer())] == [ids[2]]
    assert store.client.zscore(index, "a") == 50
    check_heads(store, {"a": (Q1, Q2), **{f"t{i}": (Q1,) for i in range(5)}})


def test_a_heads_index_and_the_heads_hash_are_kept_out_of_listpacks(store: Store) -> None:
    """Every index holds a sentinel member longer than 64 bytes at +inf, so Redis never keeps it as a
    listpack (whose every ZADD parses each score): walks and readers stop below EMPTY, before it. The heads
    hash holds the same sentinel as a field (a listpack hash is scanned whole by every HMGET)."""
    (jid,) = store.submit([job("a", score=1)])
    index, heads = store.keys.qheads(Q1), store.keys.heads
    assert store.client.zcard(index) == 2 and store.client.zrange(index, -1, -1, withscores=True)[0][1] == float("inf")
    assert store.client.hlen(heads) == 2
    if not type(store.client).__module__.startswith("fakeredis"):
        assert store.client.object("encoding", index) in (b"skiplist", "skiplist")
        assert store.client.object("encoding", heads) in (b"hashtable", "hashtable")
    assert [row[0] for row in store.waiting_heads(Q1)] == ["a"]
    assert [j.id for j in store.match(offer(), max_jobs=5)] == [jid]
    assert store.match(offer()) == []
    # the emptied task queue's entry went; the sentinel stays, and the count of jobs leased (match.lua)
    assert sorted(store.client.hkeys(heads)) == sorted([b"~" * 65, MATCHED_COUNT.encode()])
    assert store.control.matched() == 1


def test_a_match_that_redis_refuses_is_a_store_error(store: Store) -> None:
    (jid,) = store.submit([job()])
    store.client.set(store.keys.qfloor, "not a hash")
    with pytest.raises(StoreError, match=r"answered an error .*WRONGTYPE.* while running script match"):
        store.match(offer())
    store.client.delete(store.keys.qfloor)
    assert [j.id for j in store.match(offer())] == [jid]  # nothing was leased by the refused call


def test_fill_in_one_call_repeats_on_what_is_left(store: Store) -> None:
    ids = store.submit(
        [
            job("four", cpu=4, score=1),
            job("one", cpu=1, score=2),
            job("one", cpu=1, score=3),
            job("two", cpu=2, score=4),
        ]
    )
    got = store.match(offer(cpu=6), max_jobs=10)
    assert [j.id for j in got] == [ids[0], ids[1], ids[2]]  # 4 + 1 + 1; the 2-core job no longer fits


@pytest.mark.parametrize("through", ["match", "exchange"])
def test_a_fill_goes_on_into_a_task_queue_made_after_the_first_match(store: Store, through: str) -> None:
    """The store's match call for Q1 was built before "new" existed: the fill must not stop after the first
    job but take the rest (the oracle test found such a fill once, when match declared its task queues)."""
    (old,) = store.submit([job("old", score=1)])
    assert store.match(offer(cpu=0)) == []  # the store now holds its match call for Q1
    (new,) = store.submit([job("new", score=2)])
    if through == "match":
        got = store.match(offer(cpu=2), max_jobs=2)
    else:
        got = store.exchange("p1", offer=offer(cpu=2), max_jobs=2).matched
    assert [j.id for j in got] == [old, new]
    assert store.match(offer(cpu=8), max_jobs=2) == []


def test_lifecycle_and_stale_attempts(store: Store) -> None:
    (jid,) = store.submit([job()])
    store.match(offer())
    with pytest.raises(StaleReport):
        store.start(jid, 7, "p1")
    with pytest.raises(StaleReport):
        store.start(jid, 1, "someone-else")
    store.start(jid, 1, "p1")
    assert store.job(jid).state is JobState.RUNNING
    store.complete(jid, 1, "p1", RunResult(exit_code=0, wall=1.5, cpu_time=1.2, peak_mem=12.0))
    done = store.job(jid)
    assert done.state is JobState.DONE and done.wall == 1.5 and done.peak_mem == 12.0 and done.exit_code == 0
    with pytest.raises(StaleReport):
        store.complete(jid, 1, "p1")


def test_fail_records_reason_and_requeue_gives_it_back(store: Store) -> None:
    a, b = store.submit([job(score=1), job("other", score=2)])
    store.match(offer())
    assert store.fail(a, 1, "p1", RunResult(exit_code=None, reason="preempted"), requeue=True) is JobState.WAITING
    again = store.match(offer())
    assert [j.id for j in again] == [a] and again[0].attempt == 2
    assert store.fail(a, 2, "p1", RunResult(exit_code=3, reason="exit code 3")) is JobState.FAILED
    failed = store.job(a)
    assert failed.reason == "exit code 3" and failed.exit_code == 3
    assert store.job(b).state is JobState.WAITING


def test_a_job_given_back_unstarted_uses_none_of_its_retries(store: Store) -> None:
    """A pilot that stops taking jobs gives back those it holds unstarted (prefetched): as often as it
    happens, the job never ran and keeps every retry. Once started, a give-back counts as a retry even if
    the pilot says unstarted, so a job that breaks its pilots still ends."""
    (jid,) = store.submit([job(max_retries=1)])
    for attempt in range(1, 5):
        (m,) = store.match(offer(pilot=f"p{attempt}"))
        assert m.attempt == attempt
        back = store.fail(jid, attempt, f"p{attempt}", RunResult(reason="drained"), requeue=True, unstarted=True)
        assert back is JobState.WAITING and store.job(jid).retries == 0
    (m,) = store.match(offer(pilot="p5"))
    store.start(jid, m.attempt, "p5")
    assert store.fail(jid, m.attempt, "p5", RunResult(reason="x"), requeue=True, unstarted=True) is JobState.WAITING
    assert store.job(jid).retries == 1
    (m,) = store.match(offer(pilot="p6"))
    store.start(jid, m.attempt, "p6")
    assert store.fail(jid, m.attempt, "p6", RunResult(reason="x"), requeue=True, unstarted=True) is JobState.FAILED
    assert "gave up after 1 retries" in (store.job(jid).reason or "")


def test_requeue_expired_with_backoff_and_retry_limit(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job(max_retries=2)])
    store.match(offer())
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 1), "a first lease expiry requeues at once: its pilot died"
    (again,) = store.match(offer(pilot="p2"))
    assert again.attempt == 2
    with pytest.raises(StaleReport):  # the first pilot comes back too late
        store.complete(jid, 1, "p1")
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 0)
    assert store.job(jid).state is JobState.WAITING
    assert store.match(offer()) == []  # backing off: a second expiry may be the job's own doing
    clock.now += 10
    assert store.requeue_expired() == (0, 0, 1)
    (third,) = store.match(offer(pilot="p3"))
    assert third.attempt == 3
    clock.now += 31
    assert store.requeue_expired() == (0, 1, 0)
    assert store.job(jid).state is JobState.FAILED
    assert "lease expired 3 times" in (store.job(jid).reason or "")


def test_heartbeat_renews_and_reports_kills_and_lost(store: Store, clock: FakeClock) -> None:
    a, b = store.submit([job(score=1), job(score=2)])
    store.match(offer(), max_jobs=2)
    clock.now += 20
    reply = store.heartbeat("p1", {a: 1, b: 1})
    assert reply.kills == {} and reply.lost == ()
    clock.now += 20  # 40 s after the match, 20 after the renewal: nothing expired
    assert store.requeue_expired() == (0, 0, 0)
    assert store.kill(b, "operator said so") == "requested"
    reply = store.heartbeat("p1", {a: 1, b: 1, "999": 1})
    assert reply.kills == {b: "operator said so"} and reply.lost == ("999",)
    assert store.fail(b, 1, "p1", RunResult(exit_code=-15)) is JobState.FAILED
    assert store.job(b).reason == "operator said so"


def test_heartbeat_stores_the_usage_of_running_jobs_only_for_their_attempt(store: Store, clock: FakeClock) -> None:
    a, b = store.submit([job(score=1), job(score=2)])
    store.match(offer(), max_jobs=2)
    store.start(a, 1, "p1")
    reply = store.heartbeat("p1", {a: 1, b: 1}, usage={a: JobUsage(120.04, 3.5)})
    assert reply.lost == ()
    ra, rb = store.jobs([a, b])
    assert (ra.state, ra.peak_mem, ra.cpu_time) == (JobState.RUNNING, 120.0, 3.5)
    assert (rb.peak_mem, rb.cpu_time) == (None, None)  # no usage sent: nothing stored
    store.heartbeat("p1", {a: 1}, usage={a: JobUsage(250.0, 9.0)})
    assert (store.job(a).peak_mem, store.job(a).cpu_time) == (250.0, 9.0)
    # A stale attempt or another pilot's heartbeat is ignored: the job is lost to it, its usage not stored.
    assert store.heartbeat("p1", {a: 2}, usage={a: JobUsage(999.0, 99.0)}).lost == (a,)
    assert store.heartbeat("p2", {a: 1}, usage={a: JobUsage(999.0, 99.0)}).lost == (a,)
    assert (store.job(a).peak_mem, store.job(a).cpu_time) == (250.0, 9.0)
    # The next attempt starts without the usage of the one before.
    store.fail(a, 1, "p1", RunResult(exit_code=None, peak_mem=260, cpu_time=9.5), requeue=True)
    (again,) = store.match(offer(pilot="p2"))
    store.start(again.id, again.attempt, "p2")
    assert (store.job(a).peak_mem, store.job(a).cpu_time) == (None, None)


def test_cancel_waiting_and_running(store: Store) -> None:
    a, b = store.submit([job(score=1), job(score=2)])
    store.match(offer())
    assert store.cancel(b) == "ended"
    assert store.job(b).state is JobState.CANCELLED
    assert store.match(offer()) == []
    assert store.cancel(a) == "requested"
    assert store.fail(a, 1, "p1", RunResult(exit_code=-15)) is JobState.CANCELLED
    assert store.cancel(a) == "final"
    with pytest.raises(NotFound):
        store.cancel("nope")


def test_exchange_carries_starts_completions_and_the_next_match_in_one_call(store: Store, clock: FakeClock) -> None:
    ids = store.submit([job("x", dependents=(2,), score=1), job("z", score=9), job("y", pending=1, score=-5)])
    first = store.exchange("p1", offer=offer(cpu=1), max_jobs=1)
    assert [j.id for j in first.matched] == [ids[0]] and not first.refused and not first.released
    clock.now += 2
    second = store.exchange(
        "p1",
        starts=[(ids[0], 1, clock.now - 1)],
        completions=[(ids[0], 1, RunResult(exit_code=0, wall=1.0))],
        offer=offer(cpu=1),
    )
    # The completion released y into its task queue. It needed y's task-queue keys, which the call had not
    # declared, so it was redone alone after the match of the same call: that match gave z, not y.
    assert second.released == [ids[2]] and not second.refused
    assert [j.id for j in second.matched] == [ids[1]] and store.job(ids[2]).state is JobState.WAITING
    done = store.job(ids[0])
    assert done.state is JobState.DONE and done.started == clock.now - 1 and done.wall == 1.0


def test_a_short_payload_reports_its_start_inside_its_completion(store: Store, clock: FakeClock) -> None:
    (a,) = store.submit([job()])
    store.exchange("p1", offer=offer())
    assert store.exchange("p1", completions=[(a, 1, RunResult(wall=0.5, started=clock.now - 0.5))]).refused == {}
    done = store.job(a)
    assert done.state is JobState.DONE and done.started == clock.now - 0.5 and done.ended == clock.now


def test_an_exchange_declares_every_key_a_plain_completion_needs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a completion that releases dependents may need a second round trip; a plain one must not."""
    a, b = store.submit([job(score=1), job(score=2)])
    store.exchange("p1", offer=offer(cpu=1))
    redone: list[str] = []
    monkeypatch.setattr(store, "complete", lambda job_id, *args, **kw: redone.append(job_id) or [])
    monkeypatch.setattr(store, "match", lambda *args, **kw: redone.append("match") or [])
    got = store.exchange("p1", completions=[(a, 1, RunResult())], offer=offer(cpu=1))
    assert redone == [] and [j.id for j in got.matched] == [b]


def test_exchange_refuses_stale_reports_one_by_one(store: Store) -> None:
    a, b = store.submit([job(score=1), job(score=2)])
    store.match(offer(), max_jobs=2)
    reply = store.exchange("p1", starts=[(a, 7, 0.0), (b, 1, 0.0)], completions=[(a, 1, RunResult())])
    assert set(reply.refused) == {a} and "attempt" in reply.refused[a] and reply.matched == []
    assert store.job(a).state is JobState.DONE  # the stale start changed nothing; the completion counted
    assert store.job(b).state is JobState.RUNNING
    again = store.exchange("p2", completions=[(b, 1, RunResult())])
    assert set(again.refused) == {b} and store.job(b).state is JobState.RUNNING


def test_exchanges_sent_back_to_back_are_answered_in_order_on_one_connection(store: Store) -> None:
    a, b, c = store.submit([job(score=1), job(score=2), job(score=3)])
    conn = store.client.connection_pool.get_connection()
    try:
        first = store.send_exchange("p1", conn, offer=offer(cpu=1))
        second = store.send_exchange("p1", conn, completions=[(a, 1, RunResult())], offer=offer(cpu=1))
        wait_until(lambda: first.ready() and second.ready(), timeout=5, interval=0.001, what="both replies")
        # Redis applied them in the order sent: the second completed what the first matched.
        assert [j.id for j in first.receive().matched] == [a]
        got = second.receive()
        assert got.refused == {} and [j.id for j in got.matched] == [b]
    finally:
        store.client.connection_pool.release(conn)
    assert store.job(a).state is JobState.DONE and store.job(c).state is JobState.WAITING


def test_exchange_survives_redis_losing_its_functions(store: Store) -> None:
    (a,) = store.submit([job()])
    store.client.function_flush()
    assert [j.id for j in store.exchange("p1", offer=offer()).matched] == [a]
    store.client.function_flush()
    assert store.exchange("p1", starts=[(a, 1, 0.0)], completions=[(a, 1, RunResult())]).refused == {}
    assert store.job(a).state is JobState.DONE


def test_dependents_are_released_by_completion(store: Store) -> None:
    ids = store.submit([job("x", dependents=(1,)), job("y", pending=1, score=-5)])
    assert store.job(ids[1]).state is JobState.BLOCKED
    (first,) = store.match(offer(), max_jobs=5)
    assert first.id == ids[0]
    assert store.complete(ids[0], 1, "p1") == [ids[1]]
    assert store.job(ids[1]).state is JobState.WAITING
    assert [j.id for j in store.match(offer())] == [ids[1]]


def test_failure_marks_dependents_dep_failed_transitively(store: Store) -> None:
    ids = store.submit([job("x", dependents=(1,)), job("y", pending=1, dependents=(2,)), job("z", pending=1)])
    store.match(offer())
    store.fail(ids[0], 1, "p1", RunResult(exit_code=2, reason="exit code 2"))
    assert [store.job(i).state for i in ids] == [JobState.FAILED, JobState.DEP_FAILED, JobState.DEP_FAILED]
    assert "exit code 2" in (store.job(ids[2]).reason or "")


def test_refresh_pool_and_clean(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job("t", queues=(Q1,))])
    assert store.refresh_pool("t", [Q2]) == (1, 1)
    assert store.match(offer(queue=Q1)) == []
    assert [j.id for j in store.match(offer(queue=Q2))] == [jid]
    assert store.clean(grace=60) == []  # empty only since now
    clock.now += 61
    assert store.clean(grace=60) == ["t"]
    assert store.pool("t") == set() and store.tq_definitions() == {}
    before = store.client.zscore(store.keys.poolstamp, "t")
    assert store.refresh_pool("t", [Q1]) is None  # cleaned: no pool is made again, and no error (issue 32)
    assert store.pool("t") == set() and store.client.zscore(store.keys.poolstamp, "t") == before


def _heard(listeners: list[redis.client.PubSub], expect: int) -> list[int]:
    """The shards whose listener heard a wake (each drained): read until ``expect`` have, then a little more
    for any beyond them (a wake is published before the submission's reply, but may be read after it)."""
    heard: set[int] = set()
    deadline = time.monotonic() + 5.0
    settle: float | None = None
    while True:
        for shard, listener in enumerate(listeners):
            while listener.get_message(timeout=0) is not None:
                heard.add(shard)
        now = time.monotonic()
        if settle is None and (len(heard) >= expect or now > deadline):
            settle = now + 0.1
        if settle is not None and now > settle:
            return sorted(heard)
        time.sleep(0.005)


def test_a_submission_wakes_as_many_idle_pilots_as_jobs_entered_in_their_queues(store: Store) -> None:
    """Issue 31: one idle pilot per wake shard of Q1 and of Q2 listens; work entering for Q1 wakes as many
    Q1 listeners as jobs entered (each takes one at least), in consecutive shards from a place that moves
    from call to call, and none of Q2; work for both queues wakes each; nothing entering wakes nobody."""

    def listeners(queue: str) -> list[redis.client.PubSub]:
        subs = []
        for shard in range(WAKE_SHARDS):
            sub = store.client.pubsub(ignore_subscribe_messages=True)
            sub.subscribe(store.keys.wake_channel(queue, shard))
            assert sub.get_message(timeout=0.5) is None  # the notice, ignored
            subs.append(sub)
        return subs

    q1, q2 = listeners(Q1), listeners(Q2)
    first = store.submit([job()])
    heard = _heard(q1, 1)
    assert heard == [int(first[0]) % WAKE_SHARDS] and _heard(q2, 0) == []
    second = store.submit([job(), job(), job()])
    heard = _heard(q1, 3)
    start = int(second[0]) % WAKE_SHARDS
    assert sorted(heard) == sorted((start + i) % WAKE_SHARDS for i in range(3))  # moved on: the next jobs' ids
    store.submit([job("tqB", queues=(Q1, Q2)) for _ in range(WAKE_SHARDS + 1)])  # more jobs than listeners
    assert _heard(q1, WAKE_SHARDS) == list(range(WAKE_SHARDS)) == _heard(q2, WAKE_SHARDS)
    # Nothing entered a task queue: nothing to wake for (a job blocked alone, with no dependency to release
    # it, is refused: see test_store_validation.py).
    store.submit([job("b", state=JobState.FAILED, reason="its template did not evaluate")])
    assert _heard(q1, 0) == [] == _heard(q2, 0)
    for sub in q1 + q2:
        sub.close()


def test_a_wake_nobody_hears_goes_round_every_shard_once(real_redis: redis.Redis) -> None:
    """With no pilot idle (none listening) a submission publishes once on each wake shard of its queue and
    stops there: PUBLISH answers 0 each time (INFO commandstats counts the calls, on a real server)."""
    store = Store(real_redis)
    store.submit([job()])  # loads the library, so the count below is of the submission alone
    real_redis.config_resetstat()
    store.submit([job(), job()])
    assert int(real_redis.info("commandstats").get("cmdstat_publish", {}).get("calls", 0)) == WAKE_SHARDS


# -- the match hot path's supports: exact heads, queue floors, the lease on the stored text, compact records


def test_heads_follow_every_operation(store: Store, clock: FakeClock) -> None:
    pools = {"a": (Q1,), "b": (Q1, Q2)}
    both = (Q1, Q2)
    a1, a2, b1, b2 = store.submit(
        [
            job("a", cpu=2, score=3),
            job("a", cpu=1, score=7),
            job("b", cpu=4, score=1, queues=both),
            job("b", cpu=1, score=9, queues=both),
        ]
    )
    check_heads(store, pools)
    (m,) = store.match(offer(queue=Q2))  # b's head leaves through Q2: Q1's index entry for b is now low
    assert m.id == b1
    check_heads(store, pools)
    assert [j.id for j in store.match(offer(cpu=2))] == [a1]  # Q1 walks past b's stale entry
    check_heads(store, pools)
    store.cancel(a2)
    check_heads(store, pools)
    store.fail(m.id, m.attempt, "p1", RunResult(reason="preempted"), requeue=True)
    check_heads(store, pools)
    (again,) = store.match(offer(cpu=4, queue=Q2))
    assert again.id == b1 and again.attempt == 2
    clock.now += 31
    store.requeue_expired()  # a1 back at once (first expiry); b1's second one: 10 s of back-off
    clock.now += 5
    store.requeue_expired()
    check_heads(store, pools)
    assert {j.id for j in store.match(offer(), max_jobs=3)} == {a1, b2}  # b1 is still backing off
    check_heads(store, pools)
    clock.now += 10
    store.requeue_expired()
    check_heads(store, pools)
    assert [j.id for j in store.match(offer(queue=Q2))] == [b1]
    check_heads(store, pools)


def test_a_pilot_below_the_queue_floor_gets_nothing_until_smaller_work_arrives(store: Store) -> None:
    store.submit([job("big", cpu=4, mem=4000, ete=600), job("big", cpu=8, mem=8000, ete=60)])
    assert store.match(offer(cpu=2)) == []  # a full walk: the queue's floor is now cpu 4
    # The floor's time is the least any job there needs: 60 s estimated, with the 1.5 safety factor.
    assert text(store.client.hget(store.keys.qfloor, Q1)).split(":") == ["4", "4000", "0", "90"]
    assert store.match(offer(cpu=2)) == []  # answered by the floor
    (small,) = store.submit([job("small", cpu=1, mem=100, ete=6000)])
    assert store.match(offer(cpu=2, left=700)) == []  # the floor fell, but the job is too long for this pilot
    assert [j.id for j in store.match(offer(cpu=2))] == [small]
    (other,) = store.submit([job("other", cpu=1, mem=100, queues=(Q2,))])
    assert store.match(offer(cpu=2)) == []
    store.refresh_pool("other", [Q1, Q2])  # Q1 now reaches a 1-core job: its floor must fall
    assert [j.id for j in store.match(offer(cpu=2))] == [other]


def test_the_lease_rewrites_only_its_own_fields(store: Store) -> None:
    tricky = 'echo \'"s":"waiting","a":7,"pl":"x","tm":1}\' {"a":'
    (jid,) = store.submit([job(command=tricky, score=2)])
    (m,) = store.match(offer())
    assert (m.id, m.command, m.state, m.attempt, m.pilot, m.matched) == (
        jid,
        tricky,
        JobState.MATCHED,
        1,
        "p1",
        store.clock(),
    )
    assert store.job(jid) == m
    store.fail(jid, 1, "p1", RunResult(reason="preempted"), requeue=True)
    (again,) = store.match(offer())  # the record now carries an old "tm": the script decodes it instead
    assert (again.command, again.attempt, again.retries) == (tricky, 2, 1)


@pytest.mark.parametrize(
    "requirements, cpu, mem",
    [
        ('{"cpu":2,"mem":100}', 2, 100),
        ('{"Site":"A","cpu":2,"mem":100}', 2, 100),
        ('{"Site":"A"}', 1, 0),
        ('{"cpu":2,"mem":100.5}', 2, 100),
        ('{"cpu":4}', 2, 0),
        ("{}", 1, 0),
    ],
)
def test_records_keep_cpu_and_mem_once_and_read_back_exact(store: Store, requirements: str, cpu: int, mem: int) -> None:
    fields = stored_requirements(requirements, cpu, mem)
    assert read_requirements({**fields, "mt": f":{cpu}:{mem}:0:0"}) == json.loads(requirements)
    new = NewJob(command="c", tq_id="t", tq_def="{}", queues=(Q1,), cpu=cpu, mem=mem, requirements=requirements)
    (jid,) = store.submit([new])
    assert store.job(jid).requirements == json.loads(requirements)
    raw = json.loads(store.client.hget(store.keys.jobs, jid))
    assert "a" not in raw and "mr" not in raw  # defaults are not stored


def test_from_record_sets_every_field() -> None:
    job_ = Job.from_record('{"s":"waiting","t":"x","mt":":1:2:0:3","e":3}', "7")
    assert set(vars(job_)) == {f.name for f in dataclasses.fields(Job)}
    assert job_ == dataclasses.replace(job_)  # what __init__ builds from the same values


def test_match_reloads_its_function_after_a_flush(real_redis: redis.Redis) -> None:
    store = Store(real_redis)
    (jid,) = store.submit([job()])
    real_redis.function_flush()
    assert [j.id for j in store.match(offer())] == [jid]


def test_the_work_counter_stays_exact_for_a_batch_whose_work_passes_what_a_double_holds(store: Store) -> None:
    """submit.lua adds a batch's work in one INCRBY; near the largest work a job may carry (cpu x ete, odd here),
    fifteen jobs (an odd total) pass 2^53, where a Lua number stops counting units: the sum goes out before."""
    cpu, ete = 999_999, 666_666_665  # the member's tail holds ete with the safety factor: at most 1e9
    store.submit([job(cpu=cpu, ete=ete) for _ in range(15)])
    assert 15 * cpu * ete > 2**53 and int(store.client.get(store.keys.work) or 0) == 15 * cpu * ete
    check_store(store)


def test_a_large_read_of_jobs_goes_a_chunk_a_command_in_order(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole request's records in one HMGET held the server for every pilot (facade_reads.READ_CHUNK)."""
    monkeypatch.setattr(facade_reads, "READ_CHUNK", 3)
    store = Store.from_url(redis_url)
    ids = store.submit([job(command=f"echo {i}") for i in range(10)])

    def hmgets() -> int:
        return int(store.client.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))

    before = hmgets()
    jobs = store.jobs([*ids, "no-such-job"])
    assert hmgets() - before == 4, "11 ids, 3 a command"
    assert [(j.id, j.command) for j in jobs] == [(i, f"echo {n}") for n, i in enumerate(ids)]
