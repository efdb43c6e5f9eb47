"""The match hot path's supports: the exact heads hash, the per-queue floor, the lease written on the stored
text, compact records, and the connection it keeps (against a real redis-server and fakeredis)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis
from storehelp import FakeClock, check_heads, job, text

from taskqueues.records import Job, JobState, NewJob, PilotOffer, RunResult, read_requirements, stored_requirements
from taskqueues.store import Store

Q1 = "site/ce/q1"
Q2 = "site/ce/q2"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(any_redis: redis.Redis, clock: FakeClock) -> Store:
    return Store(any_redis, lease_seconds=30, backoff=10, clock=clock)


def offer(cpu: int = 8, mem: int = 10_000, queue: str = Q1, left: float | None = None) -> PilotOffer:
    return PilotOffer(pilot="p1", queue=queue, cpu=cpu, mem=mem, tmp=10_000, time_left=left)


def test_heads_follow_every_operation(store: Store, clock: FakeClock) -> None:
    pools = {"a": (Q1,), "b": (Q1, Q2)}
    both = (Q1, Q2)
    a1, a2, b1, b2 = store.submit([job("a", cpu=2, score=3), job("a", cpu=1, score=7),
                                   job("b", cpu=4, score=1, queues=both), job("b", cpu=1, score=9, queues=both)])
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
    store.requeue_expired()
    clock.now += 11
    store.requeue_expired()
    check_heads(store, pools)
    assert {j.id for j in store.match(offer(), max_jobs=3)} == {a1, b2}  # b1 is in its longer second back-off
    check_heads(store, pools)
    clock.now += 10
    store.requeue_expired()
    check_heads(store, pools)
    assert [j.id for j in store.match(offer(queue=Q2))] == [b1]
    check_heads(store, pools)


def test_a_pilot_below_the_queue_floor_gets_nothing_until_smaller_work_arrives(store: Store) -> None:
    store.submit([job("big", cpu=4, mem=4000, ete=600), job("big", cpu=8, mem=8000, ete=60)])
    assert store.match(offer(cpu=2)) == []  # a full walk: the queue's floor is now cpu 4
    assert text(store.client.hget(store.keys.qfloor, Q1)).split(":") == ["4", "4000", "0", "60"]
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
    assert (m.id, m.command, m.state, m.attempt, m.pilot, m.matched) == (jid, tricky, JobState.MATCHED, 1, "p1",
                                                                          store.clock())
    assert store.job(jid) == m
    store.fail(jid, 1, "p1", RunResult(reason="preempted"), requeue=True)
    (again,) = store.match(offer())  # the record now carries an old "tm": the script decodes it instead
    assert (again.command, again.attempt, again.retries) == (tricky, 2, 1)


@pytest.mark.parametrize("requirements, cpu, mem", [
    ('{"cpu":2,"mem":100}', 2, 100),
    ('{"Site":"A","cpu":2,"mem":100}', 2, 100),
    ('{"Site":"A"}', 1, 0),
    ('{"cpu":2,"mem":100.5}', 2, 100),
    ('{"cpu":4}', 2, 0),
    ("{}", 1, 0),
])
def test_records_keep_cpu_and_mem_once_and_read_back_exact(store: Store, requirements: str, cpu: int,
                                                           mem: int) -> None:
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


def test_match_reloads_its_script_after_a_flush(real_redis: redis.Redis) -> None:
    store = Store(real_redis)
    (jid,) = store.submit([job()])
    real_redis.script_flush()
    assert [j.id for j in store.match(offer())] == [jid]
