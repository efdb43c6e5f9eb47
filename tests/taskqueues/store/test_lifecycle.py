"""Hold and release, resubmit, update and the job events (issue 28), each one atomic Lua call, against a real
redis-server and fakeredis; the store stays consistent after each test (tests.support.invariants)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from taskqueues.errors import JobRefused, NotFound, StoreError, ValidationError
from taskqueues.store import JobUpdate, Placed, Store, retention
from taskqueues.store.fairshare import job_account
from taskqueues.store.keys import account_tq
from taskqueues.store.lifecycle import MAX_UPDATE
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.keyspace import dump_all
from tests.support.store import check_heads, check_store, job

pytestmark = pytest.mark.store(lease_seconds=30, backoff=0, servers=("real", "fake"))

Q1 = "site/ce/q1"


@pytest.fixture(autouse=True)
def consistent(request: pytest.FixtureRequest) -> Iterator[None]:
    store = request.getfixturevalue("store")
    yield
    check_store(store)


def offer(pilot: str = "p1") -> PilotOffer:
    return PilotOffer(pilot=pilot, queue=Q1, cpu=8, mem=10_000, tmp=10_000)


def run(store: Store, pilot: str = "p1", exit_code: int = 0) -> str:
    """Match the most urgent job, start it and end it with ``exit_code``; its id."""
    (leased,) = store.match(offer(pilot))
    store.start(leased.id, leased.attempt, pilot)
    if exit_code == 0:
        store.complete(leased.id, leased.attempt, pilot, RunResult())
    else:
        store.fail(leased.id, leased.attempt, pilot, RunResult(exit_code=exit_code, reason=f"exit {exit_code}"))
    return leased.id


def test_a_held_job_is_never_matched_until_released_with_its_urgency(store: Store) -> None:
    urgent, other = store.submit([job(score=1), job(score=5)])
    assert store.lifecycle.hold([urgent], "alice", "wait for the calibration") == {urgent: "held"}
    held = store.job(urgent)
    assert held.state is JobState.HELD and held.held_by == "alice" and held.reason == "wait for the calibration"
    check_heads(store, {"tqA": (Q1,)})
    assert [j.id for j in store.match(offer())] == [other]  # the held job blocks nobody
    assert store.match(offer()) == []
    assert store.lifecycle.hold([urgent], "bob", release=True) == {urgent: "released"}
    assert store.job(urgent).state is JobState.WAITING and store.job(urgent).score == 1
    check_heads(store, {"tqA": (Q1,)})
    assert [j.id for j in store.match(offer())] == [urgent]


def test_hold_refuses_a_running_job_and_release_a_job_not_held(store: Store) -> None:
    running, waiting = store.submit([job(score=1), job(score=2)])
    store.match(offer())
    assert store.lifecycle.hold([running, waiting, "999"], "alice") == {
        running: "matched",
        waiting: "held",
        "999": "unknown",
    }
    assert store.job(running).state is JobState.MATCHED
    assert store.lifecycle.hold([running], "alice", release=True) == {running: "matched"}


def test_a_blocked_job_held_becomes_held_when_its_dependency_is_done(store: Store) -> None:
    first, second = store.submit([job(score=1, dependents=(1,)), job(score=2, deps=(0,), pending=1)])
    assert store.lifecycle.hold([second], "alice") == {second: "hold-pending"}
    assert store.job(second).state is JobState.BLOCKED and store.job(second).held_by == "alice"
    assert run(store) == first
    assert store.job(second).state is JobState.HELD
    assert store.match(offer()) == []
    store.lifecycle.hold([second], "alice", release=True)
    assert [j.id for j in store.match(offer())] == [second]


def test_a_failed_job_resubmitted_runs_as_attempt_2_and_its_dep_failed_dependents_after_it(store: Store) -> None:
    ids = store.submit(
        [
            job(score=1, dependents=(1,)),
            job(score=2, deps=(0,), pending=1, dependents=(2,)),
            job(score=3, deps=(1,), pending=1),
        ]
    )
    assert run(store, exit_code=3) == ids[0]
    assert [j.state for j in store.jobs(ids)] == [JobState.FAILED, JobState.DEP_FAILED, JobState.DEP_FAILED]
    assert store.lifecycle.resubmit([ids[0]], "alice", "fixed the input") == ids
    assert store.client.hget(store.keys.stats, "resubmitted") == b"3"
    assert [j.state for j in store.jobs(ids)] == [JobState.WAITING, JobState.BLOCKED, JobState.BLOCKED]
    assert store.job(ids[1]).pending == 1
    (again,) = store.match(offer())
    assert again.id == ids[0] and again.attempt == 2
    store.start(again.id, again.attempt, "p1")
    store.complete(again.id, again.attempt, "p1", RunResult())
    assert run(store) == ids[1]
    assert run(store) == ids[2]
    assert [j.state for j in store.jobs(ids)] == [JobState.DONE] * 3


def test_resubmit_refuses_jobs_that_have_not_ended_and_changes_nothing(store: Store) -> None:
    failed, waiting = store.submit([job(score=1), job(score=2)])
    run(store, exit_code=1)
    with pytest.raises(JobRefused, match=f"job {waiting} is waiting"):
        store.lifecycle.resubmit([failed, waiting], "alice")
    assert store.job(failed).state is JobState.FAILED
    with pytest.raises(JobRefused, match="no job 999"):
        store.lifecycle.resubmit(["999"], "alice")


def test_resubmit_of_a_dep_failed_job_names_the_job_to_resubmit(store: Store) -> None:
    ids = store.submit([job(score=1, dependents=(1,)), job(score=2, deps=(0,), pending=1)])
    run(store, exit_code=1)
    with pytest.raises(JobRefused, match=r"dep-failed .*resubmit the job it waited for"):
        store.lifecycle.resubmit([ids[1]], "alice")


def test_a_done_job_resubmitted_is_waited_for_again_by_its_blocked_dependents(store: Store) -> None:
    ids = store.submit(
        [job(score=1, dependents=(2,)), job(score=2, dependents=(2,)), job(score=3, deps=(0, 1), pending=2)]
    )
    assert run(store) == ids[0]
    assert store.lifecycle.resubmit([ids[0]], "alice") == [ids[0]]
    assert store.job(ids[2]).pending == 2
    assert run(store) == ids[0]
    assert run(store) == ids[1]
    assert store.job(ids[2]).state is JobState.WAITING


def test_an_update_moves_a_waiting_job_to_its_new_task_queue_atomically(store: Store) -> None:
    (jid,) = store.submit([job("tqA", score=5)])
    placed = Placed("tqB", '{"class":"tqB"}', (Q1,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    assert store.lifecycle.update([JobUpdate(jid, "cpu 1 -> 2", 10, placed)], "alice") == [JobState.WAITING]
    moved = store.job(jid)
    tq = account_tq("tqB", *job_account("tqA", {}))
    assert moved.tq_id == tq and moved.cpu == 2 and moved.score == -5 and moved.priority == 10
    assert store.task_queue("tqA") == [] and [m for m, _ in store.task_queue(tq)] == [jid]
    check_heads(store, {"tqA": (Q1,), tq: (Q1,)})
    (leased,) = store.match(offer())
    assert leased.id == jid and leased.cpu == 2


def test_update_refuses_a_running_job(store: Store) -> None:
    (jid,) = store.submit([job()])
    store.match(offer())
    with pytest.raises(JobRefused, match="is matched: only a waiting or held job"):
        store.lifecycle.update([JobUpdate(jid, "priority", 1)], "alice")
    with pytest.raises(NotFound):
        store.lifecycle.update([JobUpdate("999", "priority", 1)], "alice")


def test_an_update_of_several_jobs_changes_each_in_one_call(store: Store) -> None:
    """A waiting job and a held one, two task queues, one new task queue for both: each moves, in order."""
    waiting, held, other = store.submit([job("tqA", score=5), job("tqA", score=6), job("tqD", score=7)])
    store.lifecycle.hold([held], "alice")
    placed = Placed("tqB", '{"class":"tqB"}', (Q1,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    changes = [JobUpdate(held, "cpu 1 -> 2", placed=placed), JobUpdate(waiting, "cpu 1 -> 2", 10, placed)]
    changes.append(JobUpdate(other, "priority 0 -> 1", 1))
    assert store.lifecycle.update(changes, "alice") == [JobState.HELD, JobState.WAITING, JobState.WAITING]
    tq = account_tq("tqB", *job_account("tqA", {}))
    assert [(j.tq_id, j.cpu, j.score) for j in store.jobs([waiting, held, other])] == [
        (tq, 2, -5),
        (tq, 2, 6),
        (store.job(other).tq_id, 1, 6),
    ]
    assert store.task_queue("tqA") == [] and [m for m, _ in store.task_queue(tq)] == [waiting]
    check_heads(store, {"tqA": (Q1,), tq: (Q1,), "tqD": (Q1,)})
    assert [e.reason for e in store.lifecycle.events(held)][-1] == "cpu 1 -> 2"


def test_an_update_of_two_jobs_changes_neither_when_the_second_was_matched_since_it_was_read(store: Store) -> None:
    """The race of ``pilotfish update A B``: B matched between the caller's check and the store's step. The
    step checks every job before it changes any: refused, naming B, and not one byte of the store changed."""
    first, second = store.submit([job("tqA", score=5), job("tqA", score=1)])
    placed = Placed("tqB", '{"class":"tqB"}', (Q1,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    changes = [JobUpdate(first, "cpu 1 -> 2", 10, placed), JobUpdate(second, "cpu 1 -> 2", 10, placed)]
    (leased,) = store.match(offer())  # the most urgent: the second
    assert leased.id == second
    before = dump_all(store.client)
    with pytest.raises(JobRefused, match=f"^job {second} is matched: .*nothing changed"):
        store.lifecycle.update(changes, "alice")
    assert dump_all(store.client) == before


def test_an_update_whose_second_change_is_malformed_changes_neither_job(store: Store) -> None:
    """update.lua checks every job's arguments before its first write: a placement the first job may take and
    one the script refuses (a queue that is no catalog queue) leave the store as it was, the argument named."""
    first, second = store.submit([job("tqA", score=5), job("tqA", score=6)])
    good = Placed("tqB", '{"class":"tqB"}', (Q1,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    bad = Placed("tqC", '{"class":"tqC"}', ("no queue",), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    before = dump_all(store.client)
    refused = [JobUpdate(first, "cpu 1 -> 2", placed=good), JobUpdate(second, "cpu 1 -> 2", placed=bad)]
    named = r"script update refused the call: ARGV\[9\] \(update\)\.queues\[1\]: wants text"
    with pytest.raises(StoreError, match=named):
        store.lifecycle.update(refused, "alice")
    assert dump_all(store.client) == before
    with pytest.raises(ValidationError, match=f"names job {first} more than once"):
        store.lifecycle.update([JobUpdate(first, "p", 1), JobUpdate(first, "p", 2)], "alice")
    with pytest.raises(ValidationError, match=f"names {MAX_UPDATE + 1} jobs: at most {MAX_UPDATE} change in one"):
        store.lifecycle.update([JobUpdate(str(i), "p", 1) for i in range(MAX_UPDATE + 1)], "alice")
    keys = [store.keys.jobs, store.keys.tqdefs, store.keys.tqempty, store.keys.poolstamp, store.keys.releasing]
    call = store._scripts["update"]
    base = [store._base, 1.0, "alice"]
    twice = [first, "p", '{"py": 1, "py0": 0}']
    with pytest.raises(
        redis.ResponseError, match=rf"^update: ARGV\[7\] \(job id\): names job {first} again \(ARGV\[4\]\)"
    ):
        call(keys=keys, args=[*base, *twice, *twice])
    with pytest.raises(redis.ResponseError, match=r"^update: ARGV: wants three arguments per job .*got 4"):
        call(keys=keys, args=[*base, *twice, second])
    assert dump_all(store.client) == before


def test_events_show_every_change_in_order_with_who_made_it(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job()])
    clock.now += 1
    store.match(offer("p1"))
    clock.now += 31
    store.requeue_expired()  # lost its pilot: requeued by the reaper
    for step in (
        lambda: store.lifecycle.hold([jid], "alice", "look first"),
        lambda: store.lifecycle.hold([jid], "bob", release=True),
        lambda: run(store, "p2", exit_code=3),
        lambda: store.lifecycle.resubmit([jid], "carol", "try again"),
    ):
        clock.now += 1
        step()
    shown = [(e.source, e.state, e.by, e.pilot) for e in store.lifecycle.events(jid)]
    assert shown == [
        (None, "waiting", "submit", None),
        ("waiting", "matched", "match", "p1"),
        ("matched", "waiting", "reaper", "p1"),
        ("waiting", "held", "alice", None),
        ("held", "waiting", "bob", None),
        ("waiting", "matched", "match", "p2"),
        ("matched", "running", "pilot p2", "p2"),
        ("running", "failed", "pilot p2", "p2"),
        ("failed", "waiting", "carol", None),
    ]
    events = store.lifecycle.events(jid)
    assert events[2].reason == "lease expired on pilot p1" and events[7].exit_code == 3
    assert events[3].reason == "look first" and events[8].reason == "try again"
    assert [e.time for e in events] == sorted(e.time for e in events) and events[0].time < events[1].time
    with pytest.raises(NotFound):
        store.lifecycle.events("999")


def test_a_retry_policy_runs_a_job_again_on_its_exit_codes(store: Store) -> None:
    (jid,) = store.submit([job(retry_on=(3, 137), retry_max=2)])
    assert run(store, exit_code=3) == jid
    assert store.job(jid).state is JobState.WAITING and store.job(jid).auto_retries == 1
    assert run(store, exit_code=137) == jid
    assert run(store, exit_code=3) == jid  # the third failure: no retry left
    failed = store.job(jid)
    assert failed.state is JobState.FAILED and failed.attempt == 3
    (other,) = store.submit([job(retry_on=(3,), retry_max=2)])
    run(store, exit_code=1)  # an exit code the policy does not name
    assert store.job(other).state is JobState.FAILED
    reasons = [e.reason for e in store.lifecycle.events(jid) if e.state == "waiting" and e.source == "running"]
    assert reasons == [
        "exit 3: automatic retry 1 of 2 (retry.on_exit)",
        "exit 137: automatic retry 2 of 2 (retry.on_exit)",
    ]


def test_events_go_with_the_job_record_at_retention(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job()])
    store.lifecycle.hold([jid], "alice")
    store.lifecycle.hold([jid], "alice", release=True)
    run(store, exit_code=1)
    assert store.client.hexists(store.keys.events, jid)
    retention.forget_ended(store, clock.now + 1)
    assert not store.client.hexists(store.keys.events, jid) and not store.client.hexists(store.keys.jobs, jid)


def test_events_are_capped_keeping_the_latest(store: Store) -> None:
    (jid,) = store.submit([job()])
    for _ in range(60):
        store.lifecycle.hold([jid], "alice")
        store.lifecycle.hold([jid], "alice", release=True)
    events = store.lifecycle.events(jid)
    assert len(events) == 1 + 100 and events[-1].state == "waiting" and events[-1].source == "held"


def test_a_lease_writes_no_event_while_it_lasts_and_is_read_from_the_record(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job()])
    clock.now += 1
    (leased,) = store.match(offer())
    assert [(e.source, e.state) for e in store.lifecycle.events(jid)] == [(None, "waiting"), ("waiting", "matched")]
    clock.now += 1
    store.start(jid, leased.attempt, "p1")
    assert not store.client.hexists(store.keys.events, jid)  # match and start cost no write
    events = store.lifecycle.events(jid)
    assert [(e.state, e.by, e.pilot, e.time) for e in events[1:]] == [
        ("matched", "match", "p1", clock.now - 1),
        ("running", "pilot p1", "p1", clock.now),
    ]
    clock.now += 1
    store.complete(jid, leased.attempt, "p1", RunResult(exit_code=0))
    assert not store.client.hexists(store.keys.events, jid)  # ended by its pilot: the record tells it all
    done = [(e.source, e.state, e.by, e.time, e.exit_code) for e in store.lifecycle.events(jid)[1:]]
    assert done == [
        ("waiting", "matched", "match", clock.now - 2, None),
        ("matched", "running", "pilot p1", clock.now - 1, None),
        ("running", "done", "pilot p1", clock.now, 0),
    ]
    clock.now += 1
    store.lifecycle.resubmit([jid], "carol")  # written now, from the record as it was, before the change
    assert [(e.source, e.state, e.by, e.time, e.exit_code) for e in store.lifecycle.events(jid)[1:]] == [
        *done,
        ("done", "waiting", "carol", clock.now, None),
    ]
    assert store.client.hget(store.keys.events, jid).count(b"\n") == 3


def test_a_held_job_updated_enters_its_new_task_queue_when_released(store: Store) -> None:
    (jid,) = store.submit([job("tqA", score=5)])
    store.lifecycle.hold([jid], "alice")
    placed = Placed("tqC", '{"class":"tqC"}', (Q1,), {"cpu": 3, "mem": 300, "tmp": 0}, 3, 300, 0, None)
    assert store.lifecycle.update([JobUpdate(jid, "cpu 1 -> 3", placed=placed)], "alice") == [JobState.HELD]
    tq = store.job(jid).tq_id
    assert store.task_queue(tq) == [] and store.match(offer()) == []
    store.lifecycle.hold([jid], "alice", release=True)
    assert [m for m, _ in store.task_queue(tq)] == [jid]
    (leased,) = store.match(offer())
    assert leased.id == jid and leased.cpu == 3 and leased.score == 5


def test_a_resubmitted_job_leaves_the_history_until_it_ends_again(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job()])
    run(store, exit_code=1)
    assert [j.id for j in store.history.page(0, clock.now + 1, owner="default").jobs] == [jid]
    store.lifecycle.resubmit([jid], "alice")
    assert store.history.page(0, clock.now + 1, owner="default").jobs == []
    assert store.client.zscore(store.keys.ended, jid) is None
    clock.now += 1
    run(store)
    assert [(j.id, j.state) for j in store.history.page(0, clock.now + 1, owner="default").jobs] == [
        (jid, JobState.DONE)
    ]
