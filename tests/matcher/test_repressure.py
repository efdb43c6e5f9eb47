"""Re-pressure against a real redis-server: learnt run times re-score waiting jobs, O(changed), damped."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from matcher.repressure import CURSOR_FIELD, RULE_MARK, eta_moved, repressure, repressure_locked
from matcher.submission import JobSpec, Submitted, Submitter
from taskqueues.catalog import Catalog
from taskqueues.store import JobUpdate, Store
from taskqueues.store.lock import Lock
from taskqueues.store.records import Job, JobState, PilotOffer, RunResult
from tests.support.catalogs import QA, QB, TWO_SITES
from tests.support.clock import FakeClock
from tests.support.polling import wait_until

pytestmark = pytest.mark.store(lease_seconds=600)

# Work runs at site A (EL9); the "training" jobs that teach a rule its run time run at site B (EL8), so
# the test decides exactly which jobs complete.
CATALOG = (
    TWO_SITES
    + """
[sites.A.ces.ce.queues.r]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""
)
QR = "A/ce/r"
NOW = 1_000_000.0


@pytest.fixture
def submitter(store: Store, clock: FakeClock) -> Submitter:
    return Submitter(store, Catalog.loads(CATALOG), clock=clock, capacity=lambda: 1e6)  # no load: ETA = critical path


def spec(
    name: str,
    ete: float,
    *,
    rule: str = "",
    mem: int = 100,
    deps: tuple[str, ...] = (),
    wall: str | None = None,
    **kw: Any,
) -> JobSpec:
    reqs: dict[str, object] = {"Platform": "EL9", "mem": mem, **({"wall": wall} if wall else {})}
    return JobSpec(name, "true", reqs, deps=deps, rule=rule, ete=ete, **kw)


def learn(submitter: Submitter, store: Store, rule: str, *walls: float) -> None:
    """Teach ``rule`` its run times: run jobs of that rule at site B and complete them with ``walls``.

    The training jobs give no hint: they teach the rule's run times, not how wrong its hints are."""
    submitter.submit(
        [JobSpec(f"train{i}", "true", {"Platform": "EL8"}, rule=rule) for i in range(len(walls))], name="training"
    )
    for wall in walls:
        (job,) = store.match(PilotOffer("trainer", QB, 1, 1000))
        store.complete(job.id, job.attempt, "trainer", RunResult(wall=wall))


def chain(names: list[str], ete: float, rule: str, **kw: Any) -> list[JobSpec]:
    return [spec(n, ete, rule=rule, deps=(names[i - 1],) if i else (), **kw) for i, n in enumerate(names)]


def score_of(store: Store, sub: Submitted, name: str) -> float:
    return store.job(sub.ids[name]).score


def match_all(store: Store, queue: str) -> list[Job]:
    """Everything waiting that a big pilot of ``queue`` gets, one job per call, in the order match gives."""
    out = []
    while got := store.match(PilotOffer("big", queue, 4, 8000)):
        out += got
    return out


def heads_are_exact(store: Store) -> None:
    """Every heads-index entry of a non-empty task queue is at most its real head (what match relies on)."""
    client, k = store.client, store.keys
    for tq in store.tq_definitions():
        head = store.task_queue(tq)[:1]
        for queue in store.pool(tq):
            entry = client.zscore(k.qheads(queue), tq)
            if head:
                assert entry is not None and entry <= head[0][1], (tq, queue, entry, head)


def test_a_chain_that_grows_becomes_more_urgent_and_match_follows(submitter: Submitter, store: Store) -> None:
    # Request A: a chain of three "sim" jobs estimated 10 s each (nothing learnt yet), beside a 100 s job:
    # the 100 s job is A's critical path, so the chain's head may start 70 s late.
    a = submitter.submit([*chain(["a1", "a2", "a3"], 10, "sim"), spec("x", 100, mem=300)], name="A")
    # Request B (a negative priority: it may finish 10 s late): its job should start 10 s from now.
    b = submitter.submit([spec("b", 20, mem=200)], name="B", priority=-10)
    assert score_of(store, a, "a1") == NOW + 70 and score_of(store, b, "b") == NOW + 10
    assert score_of(store, a, "x") == NOW
    learn(submitter, store, "sim", 1000)  # the rule turns out to take 1000 s

    report = repressure(store)
    assert report.rules_moved == ["sim"] and report.completions == 1
    assert report.reestimated == 3 and report.forgotten == 1  # the finished training job left byrule:sim
    a1, a2, a3, x = store.jobs([a.ids[n] for n in ("a1", "a2", "a3", "x")])
    assert (a1.pressure, a2.pressure, a3.pressure) == (3000, 2000, 1000)
    assert (a1.ete, a2.ete, a3.ete) == (1000, 1000, 1000)
    # A's ETA moved from now+100 to now+3000 (more than 1/16): re-stored, and all of A re-scored.
    assert report.etas == {a.request: NOW + 3000} and store.request(a.request)["eta"] == NOW + 3000
    assert a1.score == NOW and x.score == NOW + 2900  # x's head score went UP
    assert a2.score == NOW + 1000  # blocked jobs carry their new score into their task queue later
    entries: Any = store.client.zrange(store.keys.tq(a1.tq_id), 0, -1, withscores=True)
    member = {m.decode(): s for m, s in entries}
    assert member == {f"{a1.id}:1:100:0:1500": NOW}  # no wall: its estimate, with the 1.5 margin, is in the member
    heads_are_exact(store)
    # A pilot now takes the chain's head first, then B's job, then x (whose head score rose).
    order = [j.id for j in match_all(store, QA)]
    assert order == [a.ids["a1"], b.ids["b"], a.ids["x"]]


def test_a_job_s_own_priority_survives_a_rescore(submitter: Submitter, store: Store) -> None:
    a = submitter.submit(chain(["a1", "a2"], 10, "sim"), name="A", priority=5)
    store.lifecycle.update([JobUpdate(a.ids["a1"], "priority 5 -> 100", priority=100)], "alice")
    assert score_of(store, a, "a1") == NOW + 20 - 20 - 100  # ETA - pressure - its own priority
    learn(submitter, store, "sim", 1000)
    repressure(store)
    assert score_of(store, a, "a1") == NOW + 2000 - 2000 - 100 and score_of(store, a, "a2") == NOW + 2000 - 1000 - 5


def test_a_job_with_a_wall_keeps_needing_its_wall_when_its_estimate_moves(submitter: Submitter, store: Store) -> None:
    """Re-pressure moves a job's estimate, its urgency; what it needs from a pilot stays its wall."""
    sub = submitter.submit([spec("w", 10, rule="sim", wall="5m"), spec("n", 10, rule="sim", mem=200)])
    learn(submitter, store, "sim", 1000)
    repressure(store)
    w, n = store.jobs([sub.ids["w"], sub.ids["n"]])
    assert (w.ete, n.ete) == (1000, 1000)
    members = {m.decode() for tq in (w.tq_id, n.tq_id) for m in store.client.zrange(store.keys.tq(tq), 0, -1)}
    assert members == {f"{w.id}:1:100:0:300", f"{n.id}:1:200:0:1500"}
    assert [j.id for j in store.match(PilotOffer("p", QA, 4, 8000, 0, 400), max_jobs=2)] == [w.id]


def test_a_raised_head_never_hides_behind_a_stale_index_entry(submitter: Submitter, store: Store) -> None:
    # Three task queues, all eligible at QA and QR; "s" alone heads its own, and re-pressure RAISES its
    # score (its request's ETA moves much later because "long" turns out to take 5000 s).
    s = submitter.submit([spec("s", 100, rule="sim", mem=100), spec("long", 1000, mem=300, rule="other")], name="S")
    t = submitter.submit([spec("t", 50, mem=200), spec("t2", 60, mem=200)], name="T", priority=-5)
    assert score_of(store, s, "s") == NOW + 900 and score_of(store, t, "t") == NOW + 15
    learn(submitter, store, "sim", 10)
    learn(submitter, store, "other", 5000)
    repressure(store)
    heads_are_exact(store)
    scores = {s.ids[n]: score_of(store, s, n) for n in ("s", "long")}
    scores |= {t.ids[n]: score_of(store, t, n) for n in ("t", "t2")}
    assert scores[s.ids["s"]] == NOW + 4990
    order = [j.id for j in match_all(store, QR)]
    assert order == sorted(scores, key=scores.__getitem__) == [s.ids["long"], t.ids["t2"], t.ids["t"], s.ids["s"]]


def test_small_moves_are_damped(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit([*chain(["c1", "c2"], 100, "sim"), spec("y", 500, mem=300)], name="C")
    learn(submitter, store, "sim", 100)  # first learnt: propagated (here it changes no estimate)
    assert repressure(store).jobs_written == 0
    before = store.jobs(list(sub.ids.values()))
    learn(submitter, store, "sim", 110)  # mean 105, +5 %: the rule did not move enough
    report = repressure(store)
    assert report.rules_moved == [] and report.jobs_written == 0
    assert store.jobs(list(sub.ids.values())) == before
    # A rule that moves a lot but barely changes pressures: the estimates change, pressures stay.
    other = submitter.submit([spec("tiny", 1, rule="tiny"), spec("big", 1000, mem=300, deps=("tiny",))])
    learn(submitter, store, "tiny", 2)
    report = repressure(store)
    assert report.rules_moved == ["tiny"] and report.reestimated == 1 and report.pressures_rewritten == 0
    tiny = store.job(other.ids["tiny"])
    assert (tiny.ete, tiny.pressure, tiny.score) == (2, 1001, NOW)
    assert report.etas == {}


def test_drift_below_damping_adds_up(submitter: Submitter, store: Store) -> None:
    sub = submitter.submit(chain(["c1", "c2"], 100, "sim"), name="C")
    learn(submitter, store, "sim", 106)
    assert repressure(store).rules_moved == ["sim"]  # a first learnt mean is always propagated
    learn(submitter, store, "sim", 118)  # mean 112: +5.7 % since the last propagated 106
    assert repressure(store).rules_moved == []
    learn(submitter, store, "sim", 130)  # mean 118: +11 % since 106: now it counts
    assert repressure(store).rules_moved == ["sim"]
    assert store.job(sub.ids["c2"]).ete == 118


def test_work_is_proportional_to_what_changed(submitter: Submitter, store: Store) -> None:
    # 400 waiting jobs of an unrelated rule and a 400-job request that does not use the moving rule.
    submitter.submit([spec(f"bulk{i}", 30, rule="bulk") for i in range(400)], name="bulk")
    submitter.submit([spec(f"n{i}", 30, mem=300) for i in range(400)], name="noise")
    sub = submitter.submit(chain(["c1", "c2", "c3", "c4"], 10, "sim"), name="C")
    learn(submitter, store, "sim", 20)
    reads: list[int] = []
    real_hmget = store.client.hmget

    def counting_hmget(name: Any, keys: Any, *args: Any) -> Any:
        if name == store.keys.jobs:
            reads.append(len(keys) if isinstance(keys, list) else 1 + len(args))
        return real_hmget(name, keys, *args)

    store.client.hmget = counting_hmget  # type: ignore[method-assign]
    report = repressure(store)
    assert report.reestimated == 4 and report.pressures_rewritten == 4
    assert store.job(sub.ids["c1"]).pressure == 80
    # The completion, the four chain jobs (their request re-stored its ETA: read whole, 4 jobs), and
    # nothing of the 800 unrelated jobs.
    assert sum(reads) == report.records_read <= 6
    assert report.etas == {sub.request: NOW + 80}


def test_eta_is_restored_only_when_it_moves_by_more_than_a_sixteenth(submitter: Submitter, store: Store) -> None:
    # Critical path elsewhere (x: 300 s): the chain grows 25 % but the ETA does not move.
    a = submitter.submit([*chain(["a1", "a2"], 100, "sim"), spec("x", 300, mem=300)], name="A")
    learn(submitter, store, "sim", 125)
    report = repressure(store)
    assert report.pressures_rewritten == 2 and report.etas == {}
    assert store.request(a.request)["eta"] == NOW + 300
    assert score_of(store, a, "a1") == NOW + 300 - 250

    # The chain becomes the critical path but the ETA moves by 12 s of 222 (< 1/16): not re-stored,
    # the chain is re-scored against the stored ETA.
    b = submitter.submit([*chain(["b1", "b2"], 100, "sim2"), spec("y", 210, mem=300)], name="B")
    learn(submitter, store, "sim2", 111)
    report = repressure(store)
    assert report.pressures_rewritten == 2 and report.etas == {}
    assert score_of(store, b, "b1") == NOW + 210 - 222

    # Moved by 30 s of 230 (> 1/16): re-stored, and every unfinished job of the request re-scored.
    c = submitter.submit([*chain(["c1", "c2"], 100, "sim3"), spec("z", 190, mem=300)], name="C")
    learn(submitter, store, "sim3", 115)
    report = repressure(store)
    assert report.etas == {c.request: NOW + 230}
    assert score_of(store, c, "c1") == NOW and score_of(store, c, "z") == NOW + 40

    # The critical path shrinks: the ETA comes earlier, to the next longest path (w: 50 s).
    d = submitter.submit([*chain(["d1", "d2"], 100, "sim4"), spec("w", 50, mem=300)], name="D")
    learn(submitter, store, "sim4", 20)
    report = repressure(store)
    assert report.etas == {d.request: NOW + 50}
    assert score_of(store, d, "w") == NOW and score_of(store, d, "d1") == NOW + 10
    heads_are_exact(store)


def test_a_re_stored_eta_counts_what_a_join_behind_a_fan_needs(store: Store, clock: FakeClock) -> None:
    # 2 cores: four 100 s jobs of rule "fan", then a 50 s join. ETA at submission: the fan on 2 cores
    # (200 s) then the join: 250 s (critical path 150, load 225).
    two = Submitter(store, Catalog.loads(CATALOG), clock=clock, capacity=lambda: 2.0)
    fan = [spec(f"f{i}", 100, rule="fan") for i in range(4)]
    sub = two.submit([*fan, spec("join", 50, deps=tuple(f"f{i}" for i in range(4)))], name="F")
    assert sub.eta == NOW + 250
    learn(two, store, "fan", 300)
    report = repressure(store, capacity=lambda: 2.0)
    # The fan's jobs now take 300 s: critical path 350, but the join waits for 1200 core-s on 2 cores.
    assert report.etas == {sub.request: NOW + 650}
    assert score_of(store, sub, "f0") == NOW + 650 - 350 and score_of(store, sub, "join") == NOW + 600


def test_eta_moved_rule() -> None:
    assert not eta_moved(1100, 1105, 1000) and eta_moved(1100, 1107, 1000)  # 1/16 of 100 = 6.25
    assert eta_moved(1100, 1050, 1000) and not eta_moved(1100, 1095, 1000)
    assert eta_moved(990, 1000.5, 1000)  # already late: whatever is left now counts as a move


def test_running_jobs_count_what_is_left(submitter: Submitter, store: Store, clock: FakeClock) -> None:
    sub = submitter.submit(chain(["r1", "r2"], 100, "sim"), name="R")
    (r1,) = store.match(PilotOffer("p", QA, 4, 8000))
    store.start(r1.id, r1.attempt, "p")
    clock.now += 60
    learn(submitter, store, "sim", 200)
    report = repressure(store)
    # r1 (running 60 s of an estimated 200) still needs 140 + 200 for r2: ETA now + 340.
    assert store.job(sub.ids["r1"]).pressure == 400
    assert report.etas == {sub.request: clock.now + 340}
    assert store.job(r1.id).state is JobState.RUNNING


def test_cursor_advances_and_a_second_run_does_nothing(submitter: Submitter, store: Store, clock: FakeClock) -> None:
    submitter.submit(chain(["c1", "c2"], 10, "sim"), name="C")
    clock.now += 5
    learn(submitter, store, "sim", 50)
    first = repressure(store)
    assert first.cursor_from is None and first.cursor_to == clock.now and first.jobs_written > 0
    assert float(store.client.hget(store.keys.cursor, CURSOR_FIELD) or "nan") == clock.now
    assert float(store.client.hget(store.keys.cursor, RULE_MARK + "sim") or "nan") == 50
    state = store.client.hgetall(store.keys.jobs)
    second = repressure(store)  # re-reads only the completion at the cursor's instant
    assert second.completions == 1 and second.rules_moved == [] and second.jobs_written == 0
    assert second.records_read == 1
    # Even reading the same completions again (cursor lost) changes nothing: the rule's mark holds.
    store.client.hdel(store.keys.cursor, CURSOR_FIELD)
    third = repressure(store)
    assert third.completions == 1 and third.rules_moved == [] and third.jobs_written == 0
    assert store.client.hgetall(store.keys.jobs) == state


def test_a_held_lock_skips_the_run(submitter: Submitter, store: Store) -> None:
    submitter.submit(chain(["c1", "c2"], 10, "sim"), name="C")
    learn(submitter, store, "sim", 50)
    other = Lock(store.client, store.keys.lock("repressure"), 30)
    assert other.acquire()
    assert repressure_locked(store) is None
    assert store.client.hget(store.keys.cursor, CURSOR_FIELD) is None
    other.release()
    report = repressure_locked(store)
    assert report is not None and report.rules_moved == ["sim"]


RUNNER = textwrap.dedent("""
    import json, sys, time, redis
    from matcher.repressure import repressure_locked
    from taskqueues.store import Store
    store = Store(redis.Redis.from_url(sys.argv[1]), clock=lambda: 1_000_000.0)
    store.client.incr("ready")
    while store.client.get("go") is None:
        time.sleep(0.001)
    report = repressure_locked(store)
    print(json.dumps(None if report is None else report.jobs_written))
""")


@pytest.fixture
def two_runners(redis_url: str) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [
        subprocess.Popen([sys.executable, "-c", RUNNER, redis_url], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    yield procs
    for proc in procs:
        proc.kill()


def test_concurrent_runs_under_the_lock_do_the_work_once(
    submitter: Submitter, store: Store, two_runners: list[subprocess.Popen[str]]
) -> None:
    sub = submitter.submit([*chain(["c1", "c2", "c3"], 10, "sim"), spec("x", 100, mem=300)], name="C")
    learn(submitter, store, "sim", 50)
    wait_until(lambda: int(store.client.get("ready") or 0) == 2, what="both runners waiting for the signal")
    store.client.set("go", "1")
    outputs = [json.loads(proc.communicate(timeout=60)[0]) for proc in two_runners]
    written = [o for o in outputs if o]
    assert len(written) == 1 and written[0] == 4, outputs  # one did it; the other skipped or found it done
    assert store.job(sub.ids["c1"]).pressure == 150 and store.request(sub.request)["eta"] == NOW + 150


def test_rescore_declares_keys_of_one_cluster_slot(real_redis: redis.Redis, clock: FakeClock) -> None:
    from redis.crc import key_slot

    from taskqueues.store.keys import Keys

    store = Store(real_redis, Keys(vo="lhcb"), clock=clock)
    submitter = Submitter(store, Catalog.loads(CATALOG), vo="lhcb", clock=clock, capacity=lambda: 1e6)
    submitter.submit(chain(["c1", "c2"], 10, "sim"), name="C")
    learn(submitter, store, "sim", 100)
    declared: list[str] = []
    script = store._scripts["rescore"]

    def spy(keys: list[str], args: list[Any]) -> Any:
        declared.extend(keys)
        return script(keys=keys, args=args)

    store._scripts["rescore"] = spy  # type: ignore[assignment]
    assert repressure(store).members_moved == 1
    assert any(":qh:" in k for k in declared) and any(":t:" in k for k in declared)
    assert {key_slot(k.encode()) for k in declared} == {key_slot(b"{lhcb}")}
