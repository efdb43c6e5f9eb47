"""The periodic pool refresh and cleaning (issue 19, defects 1 and 2), on a real redis-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matcher import periodic
from matcher.cli.run import Maintenance
from matcher.repressure import RULE_MARK, repressure
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.keyspace import text
from tests.support.store import check_store, job

ONE_QUEUE = """
[sites.S]
[sites.S.ces.ce]
[sites.S.ces.ce.queues.only]
shapes = [{ name = "m4", cpu = 4, mem = "4G" }]
"""
TWO_QUEUES = """
[sites.S]
[sites.S.ces.ce]
[sites.S.ces.ce.queues.small]
shapes = [{ name = "m4", cpu = 4, mem = "4G" }]
[sites.S.ces.ce.queues.big]
shapes = [{ name = "m8", cpu = 4, mem = "8G" }]
"""
GRACE = 600.0


def context(store: Store, catalog: str, tmp_path: Path) -> Context:
    """A context on this store (and its clock) and this catalog."""
    ctx = Context(Settings(state_dir=str(tmp_path), clean_grace=GRACE))
    ctx.__dict__.update(store=store, catalog=Catalog.loads(catalog))
    return ctx


def submit(ctx: Context, *specs: JobSpec) -> dict[str, str]:
    return Submitter(ctx.store, ctx.catalog, clock=ctx.store.clock, capacity=lambda: 1e6).submit(list(specs)).ids


# -- defect 1: a pool refresh judges eligibility on the jobs' exact values, never on the bucket


def test_a_refresh_keeps_the_only_queue_that_holds_the_jobs(store: Store, tmp_path: Path) -> None:
    """Two jobs asking mem = "4G" (exact 4000, bucket 4096) and one queue of 4000 MB: the refresh used to judge
    on 4096, emptied the pool, and the second job waited forever."""
    ctx = context(store, ONE_QUEUE, tmp_path)
    ids = submit(ctx, JobSpec("a", "true", {"mem": "4G"}), JobSpec("b", "true", {"mem": "4G"}))
    tq = store.job(ids["a"]).tq_id
    assert store.pool(tq) == {"S/ce/only"}
    pilot = PilotOffer("p", "S/ce/only", 4, 4000)
    assert [j.id for j in store.match(pilot)] == [ids["a"]]
    periodic.refresh_pools(ctx)
    assert store.pool(tq) == {"S/ce/only"}
    assert [j.id for j in store.match(pilot)] == [ids["b"]]
    check_store(store)


def test_a_refresh_does_not_drop_the_smaller_queue(store: Store, tmp_path: Path) -> None:
    ctx = context(store, TWO_QUEUES, tmp_path)
    ids = submit(ctx, JobSpec("a", "true", {"mem": "4G"}), JobSpec("b", "true", {"mem": "4G"}))
    tq = store.job(ids["a"]).tq_id
    assert store.pool(tq) == {"S/ce/small", "S/ce/big"}
    assert periodic.refresh_pools(ctx) == 0
    assert store.pool(tq) == {"S/ce/small", "S/ce/big"}
    small = PilotOffer("p", "S/ce/small", 4, 4000)
    assert [j.id for j in store.match(small) + store.match(small)] == [ids["a"], ids["b"]]


def test_a_job_is_judged_on_its_own_values_not_its_buckets_largest(store: Store, tmp_path: Path) -> None:
    """3900 and 4090 MB share the 4096 bucket and only the 8 GB queue holds the larger: the smaller, which the
    4 GB queue holds too, gets a task queue of its own (marked by its pool), so a refresh judging each task
    queue on its largest job keeps the 4 GB queue for it, and a 4 GB pilot takes it though the larger waits
    ahead of it (issue 29 part 6: it used to share the larger's task queue and lose that queue)."""
    ctx = context(store, TWO_QUEUES, tmp_path)
    ids = submit(ctx, JobSpec("large", "true", {"mem": 4090}), JobSpec("small", "true", {"mem": 3900}))
    small, large = store.job(ids["small"]).tq_id, store.job(ids["large"]).tq_id
    assert small != large
    assert json.loads(store.tq_definitions()[small])["SubmitPool"]
    assert "SubmitPool" not in json.loads(store.tq_definitions()[large])
    periodic.refresh_pools(ctx)
    assert store.pool(large) == {"S/ce/big"}
    assert store.pool(small) == {"S/ce/small", "S/ce/big"}
    assert [j.id for j in store.match(PilotOffer("p", "S/ce/small", 4, 4000))] == [ids["small"]]
    (again,) = submit(ctx, JobSpec("again", "true", {"mem": 3901})).values()
    assert store.job(again).tq_id == small  # one bucket, one pool: one task queue
    assert {j.id for j in store.match(PilotOffer("p", "S/ce/big", 8, 8000), max_jobs=2)} == {ids["large"], again}
    check_store(store)


def test_jobs_that_fit_the_buckets_queues_keep_the_plain_task_queue(store: Store, tmp_path: Path) -> None:
    """No split when the exact values fit no more queues than the bucket: 4090 MB and the 4096 bucket both
    fit only the 8 GB queue; the task queue is the requirement class's own."""
    ctx = context(store, TWO_QUEUES, tmp_path)
    ids = submit(ctx, JobSpec("a", "true", {"mem": 4090}), JobSpec("b", "true", {"mem": 4095}))
    assert store.job(ids["a"]).tq_id == store.job(ids["b"]).tq_id
    assert "SubmitPool" not in json.loads(store.tq_definitions()[store.job(ids["a"]).tq_id])


def test_the_pool_stamp_says_when_the_pool_was_last_computed(store: Store, clock: FakeClock, tmp_path: Path) -> None:
    ctx = context(store, ONE_QUEUE, tmp_path)
    ids = submit(ctx, JobSpec("a", "true", {"mem": "4G"}))
    tq = store.job(ids["a"]).tq_id
    assert store.client.zscore(store.keys.poolstamp, tq) == clock.now
    clock.now += 900
    assert periodic.refresh_pools(ctx) == 0  # nothing changed, but it was computed now
    assert store.client.zscore(store.keys.poolstamp, tq) == clock.now


def test_a_refresh_skips_a_task_queue_cleaned_meanwhile(
    store: Store, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: beat sends clean and refresh_pools side by side (at once after an ``up``); a task queue
    clean forgot between the refresh's read of the definitions and its pool's refresh was a traceback in
    worker.log ("task queue ... has no definition"). The clean runs here, for real, at that very moment."""
    ctx = context(store, TWO_QUEUES, tmp_path)
    ids = submit(ctx, JobSpec("gone", "true", {"mem": "4G"}), JobSpec("kept", "true", {"mem": "6G"}))
    gone, kept = store.job(ids["gone"]).tq_id, store.job(ids["kept"]).tq_id
    assert [j.id for j in store.match(PilotOffer("p", "S/ce/small", 4, 4000))] == [ids["gone"]]
    clock.now += GRACE + 1
    read_largest = store.tq_largest

    def clean_then_read(tq_ids: list[str]) -> object:
        assert set(tq_ids) == {gone, kept}  # both definitions were read before the clean
        assert store.clean(GRACE) == [gone]
        return read_largest(tq_ids)

    monkeypatch.setattr(store, "tq_largest", clean_then_read)
    assert periodic.refresh_pools(ctx) == 0
    assert store.pool(gone) == set() and gone not in store.tq_definitions()
    assert store.pool(kept) == {"S/ce/big"} and store.client.zscore(store.keys.poolstamp, kept) == clock.now
    check_store(store)


# -- defect 2: every script that can empty a task queue marks it, and clean forgets it after the grace period


def forgotten(store: Store, clock: FakeClock, tq: str) -> bool:
    """Whether clean forgets ``tq`` (its definition and pool) after the grace period, and not before."""
    assert tq not in store.clean(GRACE), "cleaned before the grace period"
    clock.now += GRACE + 1
    gone = tq in store.clean(GRACE)
    return gone and tq not in store.tq_definitions() and store.pool(tq) == set()


def test_a_task_queue_emptied_by_match_is_cleaned(store: Store, clock: FakeClock) -> None:
    store.submit([job("t")])
    store.match(PilotOffer("p", "site/ce/q1", 1, 100))
    assert forgotten(store, clock, "t")
    check_store(store)


def test_a_task_queue_emptied_by_cancel_is_cleaned(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job("t")])
    assert store.cancel(jid) == "ended"
    assert forgotten(store, clock, "t")
    check_store(store)


def test_a_task_queue_whose_blocked_jobs_fail_with_their_dependency_is_cleaned(store: Store, clock: FakeClock) -> None:
    """The dependent's task queue was made at submission and never held a member: when the dependency fails,
    the dependent is dep-failed and nothing would ever empty that task queue again."""
    x, _ = store.submit([job("t", dependents=(1,)), job("dependent", pending=1)])
    (m,) = store.match(PilotOffer("p", "site/ce/q1", 1, 100))
    store.fail(x, m.attempt, "p", RunResult(exit_code=1, reason="exit code 1"))
    assert forgotten(store, clock, "dependent")
    check_store(store)


def test_a_task_queue_whose_blocked_job_is_cancelled_is_cleaned(store: Store, clock: FakeClock) -> None:
    _, y = store.submit([job("t", dependents=(1,)), job("dependent", pending=1)])
    assert store.cancel(y) == "ended"
    assert forgotten(store, clock, "dependent")


def test_a_task_queue_emptied_after_a_fail_gives_its_job_back_is_cleaned(store: Store, clock: FakeClock) -> None:
    (jid,) = store.submit([job("t")])
    (m,) = store.match(PilotOffer("p", "site/ce/q1", 1, 100))
    assert store.fail(jid, m.attempt, "p", RunResult(reason="preempted"), requeue=True) is JobState.WAITING
    assert store.client.zscore(store.keys.tqempty, "t") is None  # it holds the job again
    store.match(PilotOffer("p", "site/ce/q1", 1, 100))
    assert forgotten(store, clock, "t")


def test_a_task_queue_emptied_after_a_re_pressure_move_is_cleaned(store: Store, clock: FakeClock) -> None:
    """rescore.lua moves a member (its estimate is part of it); the task queue it then empties is cleaned."""
    (jid,) = store.submit([job("t", ete=60, rule="r")])
    body = {"jobs": [{"id": jid, "pr": 5.0, "e": 30.0, "me": 30, "sc": "1.0"}], "marks": {RULE_MARK + "r": "30.0"}}
    k = store.keys
    reply = store.call_script(
        "rescore",
        [k.jobs, k.requests, k.cursor],
        [k.base + ":", json.dumps(body)],
        [k.work, *store.floors, *store.pool_keys(["t"])],
    )
    assert int(reply[2]) == 1  # the member moved
    assert [text(m) for m in store.client.zrange(k.tq("t"), 0, -1)] == [f"{jid}:1:100:0:30"]
    store.match(PilotOffer("p", "site/ce/q1", 1, 100))
    assert forgotten(store, clock, "t")
    check_store(store)


def test_periodic_clean_forgets_what_the_scripts_marked(store: Store, clock: FakeClock, tmp_path: Path) -> None:
    ctx = context(store, ONE_QUEUE, tmp_path)
    ids = submit(ctx, JobSpec("a", "true", {"mem": "4G"}))
    tq = store.job(ids["a"]).tq_id
    store.cancel(ids["a"])
    assert periodic.clean(ctx) == []
    clock.now += GRACE + 1
    assert periodic.clean(ctx) == [tq]
    assert store.tq_definitions() == {} and store.pool(tq) == set()


def test_periodic_clean_forgets_requests_past_the_retention_once_re_pressure_learnt(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """A real submission run to its end, then the clean task with a one-hour retention: the request stays
    until re-pressure has read its completions and the hour has passed, then goes whole; learnt run times stay."""
    ctx = context(store, ONE_QUEUE, tmp_path)
    ctx.__dict__["settings"] = Settings(state_dir=str(tmp_path), clean_grace=GRACE, job_retention=3600)
    ids = submit(ctx, JobSpec("a", "true", {"cpu": 1}, rule="r"), JobSpec("b", "true", {"cpu": 1}, deps=("a",)))
    request = store.job(ids["a"]).request
    offer = PilotOffer("p", "S/ce/only", 4, 4000)
    for name in ("a", "b"):
        periodic.release_sweep(ctx)
        [m] = store.match(offer)
        assert m.id == ids[name]
        clock.now += 10
        store.complete(m.id, m.attempt, "p", RunResult(wall=10))
    clock.now += 3601
    periodic.clean(ctx)
    assert store.request(request), "re-pressure has not read the completions yet"
    repressure(store)
    periodic.clean(ctx)
    assert store.jobs(list(ids.values())) == [] and request not in store.requests()
    assert "r" in store.ete_stats([], ["r"])[1]
    check_store(store)


# -- issue 29 part 6: `pilotfish run` refreshes and cleans pools at beat's intervals, as a deployment does


def test_pilotfish_run_refreshes_and_cleans_pools_at_beats_intervals(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """The loop of ``pilotfish run`` (its :class:`Maintenance`, on the store's clock) recomputes a pool from a
    catalog that changed once ``pool_refresh_interval`` has passed, and forgets a task queue emptied past the
    grace period once ``clean_interval`` has passed; neither before."""
    ctx = context(store, ONE_QUEUE, tmp_path)
    assert (ctx.settings.pool_refresh_interval, ctx.settings.clean_interval) == (900.0, 600.0)
    ids = submit(ctx, JobSpec("a", "true", {"mem": "4G"}))
    tq = store.job(ids["a"]).tq_id
    loop = Maintenance(ctx, start=clock.now)
    assert loop.tick(clock.now) == ["often"]
    ctx.__dict__["catalog"] = Catalog.loads(TWO_QUEUES.replace("small", "only"))
    clock.now += 899
    assert "refresh" not in loop.tick(clock.now) and store.pool(tq) == {"S/ce/only"}
    clock.now += 1
    assert "refresh" in loop.tick(clock.now)
    assert store.pool(tq) == {"S/ce/only", "S/ce/big"}
    (matched,) = store.match(PilotOffer("p", "S/ce/big", 4, 8000))
    assert matched.id == ids["a"]
    store.complete(matched.id, matched.attempt, "p", RunResult(wall=1))
    emptied = clock.now
    clock.now = emptied + GRACE + 1  # the clean due at start + 600 has run at 900; the next is at 1500
    ran = loop.tick(clock.now)
    assert "clean" in ran and tq not in store.tq_definitions() and store.pool(tq) == set()
