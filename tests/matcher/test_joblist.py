"""``pilotfish jobs``: the listing reads the indexes page by page, in the order users expect, with filters;
the ``ended`` index the scripts keep; the command's output and its errors. Real redis-server throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

from matcher import joblist
from matcher.joblist import JobFilter, list_jobs, parse_states
from taskqueues.errors import NotFound, ValidationError
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.paths import ROOT
from tests.support.store import job

Q1, Q2 = "site/ce/q1", "site/ce/q2"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(real_redis: redis.Redis, clock: FakeClock) -> Store:
    return Store(real_redis, clock=clock)


def ids(store: Store, **kw: object) -> list[str]:
    return [r.id for r in list_jobs(store, JobFilter(**kw)).rows]  # type: ignore[arg-type]


def test_the_ended_and_blocked_indexes_follow_the_states(store: Store, clock: FakeClock) -> None:
    done, failed, cancelled = store.submit([job(score=1), job(score=2), job(score=3)])
    [blocked_parent, blocked_child] = store.submit([job(score=5, dependents=(1,)), job(pending=1, deps=(0,))])
    leased = store.match(PilotOffer("p1", "site/ce/q1", cpu=2, mem=10_000), 2)
    assert [j.id for j in leased] == [done, failed]
    clock.now += 10
    store.complete(done, 1, "p1", RunResult(wall=3))
    clock.now += 10
    store.fail(failed, 1, "p1", RunResult(exit_code=2, reason="exit code 2"))
    clock.now += 10
    store.cancel(cancelled)
    assert [m.decode() for m in store.client.zrange(store.keys.blocked, 0, -1)] == [blocked_child]
    store.cancel(blocked_parent)  # and its dependent becomes dep-failed: no longer blocked
    assert store.client.zcard(store.keys.blocked) == 0
    ended = dict(store.client.zrange(store.keys.ended, 0, -1, withscores=True))
    assert {k.decode(): v for k, v in ended.items()} == {
        done: 1_000_010,
        failed: 1_000_020,
        cancelled: 1_000_030,
        blocked_parent: 1_000_030,
        blocked_child: 1_000_030,
    }


def test_the_listing_orders_running_waiting_blocked_then_latest_finished(store: Store, clock: FakeClock) -> None:
    a = store.submit([job("tqA", score=s, name=f"a{s}") for s in (30, 10, 50)], ("r1", {"name": "one"}))
    b = store.submit(
        [
            job("tqB", score=20, queues=(Q2,)),
            job("tqB", score=40, queues=(Q2,), dependents=(2,)),
            job("tqB", pending=1, deps=(1,), queues=(Q2,)),
        ],
        ("r2", {"name": "two"}),
    )
    [run] = store.match(PilotOffer("p1", Q1, cpu=1, mem=1000), 1)  # the most urgent of q1: a's score 10
    assert run.id == a[1]
    store.start(run.id, 1, "p1")
    [ended_first] = store.match(PilotOffer("p2", Q2, cpu=1, mem=1000), 1)
    clock.now += 5
    store.complete(ended_first.id, 1, "p2")
    [ended_last] = store.match(PilotOffer("p2", Q1, cpu=1, mem=1000), 1)
    clock.now += 5
    store.complete(ended_last.id, 1, "p2")
    assert (ended_first.id, ended_last.id) == (b[0], a[0])
    assert ids(store) == [a[1], b[1], a[2], b[2]]  # running; waiting by urgency across task queues; blocked
    assert ids(store, states=parse_states(["all"])) == [a[1], b[1], a[2], b[2], a[0], b[0]]
    assert ids(store, states=parse_states(["finished"])) == [a[0], b[0]]
    assert ids(store, states=parse_states(["waiting,blocked"]), limit=2) == [b[1], a[2]]
    # Filters: request, task queue, catalog queue, pilot.
    assert ids(store, states=parse_states(["all"]), request="r2") == [b[1], b[2], b[0]]
    assert ids(store, task_queue="tqB") == [b[1], b[2]]
    assert ids(store, queue=Q2) == [b[1], b[2]]
    assert ids(store, states=parse_states(["all"]), pilot="p2") == [a[0], b[0]]
    listing = list_jobs(store, JobFilter(limit=1))
    assert listing.more and [r.id for r in listing.rows] == [a[1]]
    row = listing.rows[0]
    assert (row.state, row.pilot, row.attempt, row.request, row.task_queue, row.name) == (
        "running",
        "p1",
        1,
        "r1",
        "tqA",
        "a10",
    )
    assert not list_jobs(store, JobFilter(limit=4)).more
    # The blocked job is released when its dependency completes: it leaves the blocked index.
    [dep] = store.match(PilotOffer("p2", Q2, cpu=1, mem=1000), 1)
    assert dep.id == b[1]
    store.complete(dep.id, 1, "p2")
    assert store.client.zcard(store.keys.blocked) == 0
    assert ids(store, states=parse_states(["blocked"])) == []
    assert ids(store, states=parse_states(["waiting"])) == [b[2], a[2]]  # its score 0 is the most urgent


def test_waiting_jobs_are_paged_not_loaded(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many waiting jobs: a short listing reads a page of records, however many jobs wait."""
    monkeypatch.setattr(joblist, "PAGE", 50)
    made = store.submit([job("tqA" if i % 2 else "tqB", score=1000 - i) for i in range(600)], ("big", {}))
    loaded: list[int] = []
    real = store.jobs
    monkeypatch.setattr(store, "jobs", lambda page: loaded.append(len(page)) or real(page))
    assert ids(store, limit=5) == made[::-1][:5]
    assert sum(loaded) <= 6, loaded
    loaded.clear()
    assert ids(store, limit=5, request="big") == made[::-1][:5]
    assert sum(loaded) <= 6, loaded
    # A short request among many waiting jobs: its own ids are read (not the task queues walked), same order.
    small = store.submit([job("tqA", score=s) for s in (900, 100, 500, 700)], ("small", {}))
    loaded.clear()
    assert ids(store, request="small") == [small[1], small[2], small[3], small[0]]
    assert loaded == [4], loaded


def test_bad_filters_say_what_is_wrong(store: Store) -> None:
    with pytest.raises(ValidationError, match="--state 'runing' is not a job state: use one of blocked, "):
        parse_states(["running,runing"])
    with pytest.raises(NotFound, match="no request 'nope'"):
        list_jobs(store, JobFilter(request="nope"))
    assert parse_states([]) == joblist.ACTIVE
    assert parse_states(["done", "failed"]) == {JobState.DONE, JobState.FAILED}


def cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PILOTFISH_REDIS_URL": redis_url, "PILOTFISH_CATALOG": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_command_prints_a_table_json_and_clear_errors(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    made = store.submit([job(score=2, name="second"), job(score=1, name="first")], ("r1", {"name": "demo"}))
    done = cli(redis_url, "jobs", "--request", "demo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "REQUEST",
        "OWNER",
        "GROUP",
        "STATE",
        "TASKQUEUE",
        "PILOT",
        "ATT",
        "SUBMITTED",
        "STARTED",
        "ENDED",
        "RUNTIME",
        "EXIT",
    ]
    assert [line.split()[:6] for line in lines[1:]] == [  # a request stored without an account: the defaults
        [made[1], "first", "r1", "default", "default", "waiting"],
        [made[0], "second", "r1", "default", "default", "waiting"],
    ]
    doc = json.loads(cli(redis_url, "jobs", "--json", "--limit", "1").stdout)
    assert doc["more"] is True and [j["id"] for j in doc["jobs"]] == [made[1]]
    assert doc["jobs"][0]["state"] == "waiting" and doc["jobs"][0]["task_queue"] == "tqA"
    bad = cli(redis_url, "jobs", "--state", "bogus")
    assert bad.returncode == 1 and "pilotfish: error: --state 'bogus' is not a job state" in bad.stderr
    bad = cli(redis_url, "jobs", "--request", "nope")
    assert bad.returncode == 1 and "no request with id or name 'nope'" in bad.stderr


def index_of_records(store: Store) -> tuple[set[str], set[str]]:
    """(blocked, final) job ids as the records say."""
    blocked, final = set(), set()
    for job_id, raw in store.client.hgetall(store.keys.jobs).items():
        state = JobState(json.loads(raw)["s"])
        if state is JobState.BLOCKED:
            blocked.add(job_id.decode())
        elif state.final:
            final.add(job_id.decode())
    return blocked, final


def test_the_indexes_match_the_records_through_every_script(store: Store, clock: FakeClock) -> None:
    """Submit, match, complete (releasing dependents), fail with and without requeue, reap (requeue, then the
    retry limit), release (a failure), cancel (a cascade): the blocked and ended indexes are the records'."""
    from tests.support.store import populate, script_calls

    store = Store(store.client, lease_seconds=30, backoff=10, clock=clock)
    pop = populate(store)
    for name, (keys, args) in script_calls(store, pop, clock).items():
        if name not in ("match", "renew", "unlock"):
            store._scripts[name](keys=keys, args=args)  # every script once, on the populated store
    a, b, c = store.submit([job(score=1, max_retries=0, dependents=(1,)), job(pending=1, deps=(0,)), job(score=2)])
    leased = store.match(PilotOffer("p9", "site/ce/q1", cpu=64, mem=100_000), 64)
    assert {a, c} <= {j.id for j in leased}
    clock.now += 1_000
    store.requeue_expired()  # every lease expired: a beyond its retry limit (its dependent dep-failed)
    store.cancel(c)
    blocked, final = index_of_records(store)
    assert {m.decode() for m in store.client.zrange(store.keys.blocked, 0, -1)} == blocked
    assert {m.decode() for m in store.client.zrange(store.keys.ended, 0, -1)} == final
    assert {a, b, c} <= final and b not in blocked
