"""One bad entry never stops match for everyone: it is mended or parked, and operators see it (real redis)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from matcher import periodic
from matcher.calls import Overview
from matcher.cli.operator_commands import view
from matcher.explain import explain, render_explanation
from matcher.repressure import repressure
from matcher.status import requests_status, task_queues
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer
from tests.support.catalogs import QA, TWO_SITES
from tests.support.clock import FakeClock
from tests.support.keyspace import text
from tests.support.store import check_heads, check_store, job

pytestmark = pytest.mark.store(lease_seconds=30)

Q1 = "site/ce/q1"
PILOT = PilotOffer("p1", Q1, 8, 10_000, 10_000)


def four(store: Store) -> list[str]:
    """Four waiting jobs in three task queues, most urgent first."""
    return store.submit([job("a", score=1), job("a", score=2), job("b", score=3), job("c", score=4)])


def member(store: Store, jid: str) -> str:
    return jid + json.loads(store.client.hget(store.keys.jobs, jid))["mt"]


def test_a_record_that_cannot_be_read_is_parked_and_the_others_still_match(store: Store) -> None:
    bad, *good = four(store)
    store.client.hset(store.keys.jobs, bad, '{"s":"waiting","mt":')
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == good
    parked = store.parked()
    assert set(parked) == {bad}
    assert parked[bad].reason == "its record cannot be read" and parked[bad].task_queue == "a"
    assert parked[bad].member == f"{bad}:1:100:0:0"
    assert store.match(PILOT) == []  # and the next call does not fail either
    check_store(store)


def test_a_missing_record_is_parked(store: Store) -> None:
    bad, *good = four(store)
    store.client.hdel(store.keys.jobs, bad)
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == good
    assert store.parked()[bad].reason == "it has no record"


def test_a_heads_entry_that_cannot_be_read_is_mended(store: Store) -> None:
    ids = four(store)
    store.client.hset(store.keys.heads, "a", "not-a-score 1:x:y:z:w nofloor")
    store.client.hset(store.keys.heads, "b", "")
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == ids
    assert store.parked() == {}
    check_heads(store, {"a": (Q1,), "b": (Q1,), "c": (Q1,)})
    check_store(store)


def test_a_queue_floor_that_cannot_be_read_is_ignored(store: Store) -> None:
    ids = four(store)
    store.client.hset(store.keys.qfloor, Q1, "1:x:0:0")
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == ids


def test_a_member_that_cannot_be_read_is_parked(store: Store) -> None:
    ids = four(store)
    store.client.zadd(store.keys.tq("b"), {"garbage": 0.5, "7:1:nan:0:0": 0.6})
    store.client.hdel(store.keys.heads, "b")  # as if the heads hash predated them: mended from the zset
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == ids
    assert {p.member for p in store.parked().values()} == {"garbage", "7:1:nan:0:0"}
    check_store(store)


def test_a_stray_member_of_a_running_job_is_parked_not_run_twice(store: Store) -> None:
    ids = four(store)
    (first,) = store.match(PILOT)
    store.start(first.id, first.attempt, "p1")
    store.client.zadd(store.keys.tq("a"), {member(store, first.id): 0})  # the job's member again, by hand
    store.client.hdel(store.keys.heads, "a")
    assert [j.id for j in store.match(PILOT, max_jobs=4)] == ids[1:]
    assert store.job(first.id).state is JobState.RUNNING and store.job(first.id).attempt == 1
    assert "a stray task-queue member" in store.parked()[first.id].reason
    check_store(store)


def test_reap_parks_a_leased_job_whose_record_cannot_be_read(store: Store, clock: FakeClock) -> None:
    bad, other, *_ = four(store)
    store.match(PILOT, max_jobs=2)
    store.client.hset(store.keys.jobs, bad, "{garbage")
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 1)  # the other one is requeued as usual (at once: a first expiry)
    assert store.parked()[bad].reason == "its record cannot be read (its lease expired)"
    assert store.client.zscore(store.keys.leases, bad) is None
    assert store.job(other).state is JobState.WAITING


def test_operators_see_a_parked_job(
    store: Store, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """explain says it is parked and why, status counts it, and the periodic reap logs it once."""
    bad, *_ = store.submit([job("a", score=1, queues=(QA,)), job("b", score=2, queues=(QA,))])
    store.client.hset(store.keys.jobs, bad, json.dumps({"s": "running", "mt": ":1:100:0:0", "t": "a"}))
    store.match(PilotOffer("p1", QA, 4, 8000), max_jobs=2)
    catalog = Catalog.loads(TWO_SITES)

    e = explain(store, catalog, bad)
    assert e.parked is not None and "a stray task-queue member" in e.parked
    assert any(line.startswith("  parked: its record is running") for line in render_explanation(e, clock.now))
    store.client.hset(store.keys.jobs, bad, "{garbage")
    e = explain(store, catalog, bad)
    assert e.state == "unreadable" and e.verdict.startswith("parked: its record is running")

    doc, lines, *_ = view(Overview(requests_status(store), task_queues(store), list(store.parked().values())))
    assert doc["parked"] == 1
    assert any(line.startswith("1 jobs parked") for line in lines)
    assert any(f"job {bad}: its record is running" in line for line in lines)

    ctx = Context(Settings(state_dir=str(tmp_path)))
    ctx.__dict__.update(store=store, catalog=catalog)
    with caplog.at_level(logging.WARNING, logger="matcher.periodic"):
        assert periodic.reap(ctx).parked == 1
        assert periodic.reap(ctx).parked == 0
    logged = [r.getMessage() for r in caplog.records if "parked" in r.getMessage()]
    assert len(logged) == 1 and logged[0].startswith(f"job {bad} parked: its record is running")


def test_cancel_clears_a_parked_job(store: Store) -> None:
    bad, *_ = four(store)
    store.client.hset(store.keys.jobs, bad, json.dumps({"s": "waiting", "mt": ":1:100:0:9", "t": "a", "sc": "1"}))
    store.match(PILOT)
    assert bad in store.parked()
    assert store.cancel(bad) == "ended"
    assert store.parked() == {}
    assert text(store.client.hget(store.keys.jobs, bad)).count('"cancelled"') == 1


def test_the_other_views_survive_what_cannot_be_read(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Status, the director's demand, re-pressure and the pool refresh go on past a damaged record, member or
    definition (each used to fail on it, for every request, queue or task queue)."""
    catalog = Catalog.loads(TWO_SITES)
    ctx = Context(Settings(state_dir=str(tmp_path)))
    ctx.__dict__.update(store=store, catalog=catalog)
    ids = (
        Submitter(store, catalog, clock=store.clock, capacity=lambda: 1e6)
        .submit([JobSpec("a", "true", {"Platform": "EL9"}), JobSpec("b", "true", {"Platform": "EL9"}, deps=("a",))])
        .ids
    )
    store.client.hset(store.keys.jobs, ids["b"], "{garbage")
    tq = store.job(ids["a"]).tq_id
    store.client.zadd(store.keys.tq(tq), {"junk": 1e9})
    store.client.hset(store.keys.tqdefs, "broken", "{not json")
    (status,) = requests_status(store)
    assert status.states == {"waiting": 1}
    assert [row[1] for row in store.waiting_heads(QA)] == [ids["a"]]
    repressure(store)
    with caplog.at_level(logging.WARNING, logger="matcher.periodic"):
        periodic.refresh_pools(ctx)
    assert any("task queue broken: its definition cannot be read" in r.getMessage() for r in caplog.records)
    assert store.pool(tq) == {QA}
