"""The director on the local backend, through each way it is started, and what needs no batch system to see.

Issue 5: ``pilotfish director --once`` and the Celery task ``pilotfish.director`` run real pilots that run real
payloads; a queue whose batch system is missing is converted to local when the director is configured (one
warning per backend, before any cycle) and its pilots run alone when its settings cannot be mapped here;
``max_running`` caps a queue's pilots across cycles; the wall a pilot asks for is what its jobs need.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from matcher.submission import JobSpec, Submitter
from pilot.backends import LocalBackend, PilotState, reset_conversion_warnings
from pilot.director.service import Director
from taskqueues.catalog import Queue
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.shapes import Shape
from taskqueues.store.records import JobState
from tests.support.paths import ROOT
from tests.support.polling import wait_until

CATALOG = """
[sites.L.ces.host]
[sites.L.ces.host.batch_options]
repo_key = "pfl-"
grace = 1
[sites.L.ces.host.queues.q]
n_max_queued = 10
max_running = 1
wall_granularity = 60
shapes = [{ name = "c1", cpu = 1, mem = "500M", wall = "10m", cost = 1.0 }]
[sites.L.ces.host.queues.long]
wall_granularity = 60
shapes = [{ name = "c1", cpu = 1, mem = "500M", wall = "10m", cost = 1.0 }]
"""

# A Slurm site whose commands are missing: both queues share one backend, converted to local.
CONVERTED = """
[sites.C.ces.gone]
batch = "slurm"
[sites.C.ces.gone.batch_options]
bin_dir = "@EMPTY@"
partition = "debug"
repo_key = "pfc-"
[sites.C.ces.gone.queues.a]
shapes = [{ name = "c1", cpu = 1, mem = "500M", wall = "10m" }]
[sites.C.ces.gone.queues.b]
shapes = [{ name = "c1", cpu = 1, mem = "500M", wall = "10m" }]
"""


def settings_for(tmp_path: Path, redis_url: str, catalog: str) -> Settings:
    path = tmp_path / "catalog.toml"
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    path.write_text(catalog.replace("@EMPTY@", str(empty)))
    return Settings().with_(
        redis_url=redis_url,
        pilot_redis_url=redis_url,
        catalog=str(path),
        state_dir=str(tmp_path / "state"),
        lease_seconds=3.0,
        backoff_seconds=0.0,
        pilot_idle_timeout=2.0,
        pilot_events=False,
        pilot_stop_margin=0.0,
    )  # the walls asked below are exact (see test_stop_margin.py)


def job(name: str, site: str, *, ete: float = 1.0, seconds: float = 0.5, wall: str | None = "5m") -> JobSpec:
    return JobSpec(
        name=name,
        command=f"sleep {seconds}",
        ete=ete,
        requirements={"Site": site, "cpu": 1, "mem": "100M", **({"wall": wall} if wall else {})},
    )


def wait_pilots_stopped(ctx: Context) -> None:
    """Until every pilot has written its last heartbeat record (it idles out after 2 s): a pilot the test
    started outlives the test otherwise, and that record lands in the next test's Redis."""
    wait_until(
        lambda: all(r.get("stopped") for r in ctx.store.pilot_records().values()),
        timeout=60,
        interval=0.3,
        what="the pilots stopped",
    )


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # pilots start in the director's directory: keep it out of the repository
    return tmp_path


@pytest.fixture
def ctx(in_tmp: Path, redis_url: str) -> Context:
    return Context(settings_for(in_tmp, redis_url, CATALOG))


# --- conversion to local, seen through the director -----------------------------------------------------


def test_a_missing_batch_system_is_converted_once_when_the_director_is_configured(
    in_tmp: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    reset_conversion_warnings()
    ctx = Context(settings_for(in_tmp, redis_url, CONVERTED))
    with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
        director = Director(ctx, log_dir=str(in_tmp / "logs"))
    try:
        [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "C/gone/a, C/gone/b" in warning and "partition=debug" in warning, warning
        assert "every pilot runs alone" in warning, warning
        qa, qb = (ctx.catalog.queue(f"C/gone/{q}", ctx.settings.vo) for q in "ab")
        backend = director.backend(qa)
        assert isinstance(backend, LocalBackend) and backend.converted_from == "slurm"
        assert director.backend(qb) is backend, "one backend (one host capacity) for both queues"

        sub = Submitter.of(ctx).submit([job("x", "C") for _ in range(1)] + [job("y", "C")], name="conv")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
            report = director.cycle()
        assert not [r for r in caplog.records if r.levelno == logging.WARNING], "warned again at the cycle"
        submitted = [b for q in report.queues.values() for b in q.submitted]
        assert len(submitted) == 2, report.summary()  # one c1 pilot per one-core job
        states = backend.states(submitted)
        # The configured partition cannot be mapped here: one pilot runs, alone; the other waits for it.
        assert sorted(s.state for s in states.values()) == [PilotState.QUEUED, PilotState.RUNNING], states
        assert all("runs alone" in s.detail for s in states.values() if s.state is PilotState.RUNNING), states

        ids = list(sub.ids.values())
        wait_until(
            lambda: all(j.state is JobState.DONE for j in ctx.store.jobs(ids)),
            timeout=60,
            interval=0.3,
            what="both jobs done",
            between=director.cycle,
        )
    finally:
        director.stop_all()
        director.close()


# --- caps and wall, with pilots that only hold their place ---------------------------------------------------


class Placeholders:
    """A pilot command that runs ``sleep`` (the jobs stay waiting) and remembers the wall each pilot asked."""

    def __init__(self) -> None:
        self.walls: list[tuple[str, int]] = []

    def __call__(self, queue: Queue, shape: Shape, wall: int, settings: Settings) -> list[str]:
        self.walls.append((queue.id, wall))
        return ["sleep", "60"]


def test_max_running_caps_a_queues_pilots_across_cycles(ctx: Context, in_tmp: Path) -> None:
    placeholders = Placeholders()
    director = Director(ctx, pilot_command=placeholders, log_dir=str(in_tmp / "logs"))
    try:
        Submitter.of(ctx).submit([job(f"j{i}", "L") for i in range(3)], name="capped")
        first = director.cycle().queues["L/host/q"]
        # Three one-core jobs want three c1 pilots (n_max_queued = 10); max_running = 1 allows one.
        assert first.demand == 3 and len(first.submitted) == 1, first
        for _ in range(3):
            again = director.cycle().queues["L/host/q"]
            assert again.submitted == [] and again.cancelled == [] and not again.errors, again
        queue = ctx.catalog.queue("L/host/q", ctx.settings.vo)
        assert list(director.provisioned(queue, director.backend(queue))) == first.submitted
    finally:
        director.stop_all()
        director.close()


@pytest.mark.parametrize(
    ("ete", "needs", "wall"),
    [(100.0, None, 240), (20.0, None, 120), (350.0, None, 600), (30.0, "5m", 360), (590.0, "2m", 180)],
)
def test_the_wall_a_pilot_asks_is_what_its_jobs_need_rounded_with_headroom_and_capped(
    ctx: Context, in_tmp: Path, ete: float, needs: str | None, wall: int
) -> None:
    """What the job needs (its wall, else its estimate x 1.5) rounded up to wall_granularity (60 s), one more
    step of headroom, within the shape's 10 minutes. Issue 19: a job of wall 5m got a pilot of 120 s."""
    placeholders = Placeholders()
    director = Director(ctx, pilot_command=placeholders, log_dir=str(in_tmp / "logs"))
    try:
        Submitter.of(ctx).submit([job("long", "L", ete=ete, wall=needs)], name="walls")
        [batch_id] = [b for q in director.cycle().queues.values() for b in q.submitted]
        assert placeholders.walls == [("L/host/q", wall)] or placeholders.walls == [("L/host/long", wall)]
        queue = ctx.catalog.queue(placeholders.walls[0][0], ctx.settings.vo)
        assert director.provisioned(queue, director.backend(queue))[batch_id]["wall"] == wall
    finally:
        director.stop_all()
        director.close()


def test_a_job_needing_a_shapes_whole_wall_is_unplaceable_not_given_pilots_that_cannot_take_it(
    ctx: Context, in_tmp: Path
) -> None:
    """A pilot's time left is below its wall once it runs: a job of wall 10m never fits a 10-minute pilot.
    The director says so (one step of headroom is kept) instead of starting pilots that idle out."""
    placeholders = Placeholders()
    director = Director(ctx, pilot_command=placeholders, log_dir=str(in_tmp / "logs"))
    try:
        [job_id] = Submitter.of(ctx).submit([job("whole", "L", wall="10m")], name="whole").ids.values()
        reports = director.cycle().queues.values()
        assert [b for r in reports for b in r.submitted] == [] and placeholders.walls == []
        why = next(r.unplaceable[job_id] for r in reports if job_id in r.unplaceable)
        assert "wall 600 > 540" in why and "kept for a new pilot's start" in why, why
    finally:
        director.stop_all()
        director.close()


TWO_SITES = """
[sites.A.ces.host]
[sites.A.ces.host.queues.first]
shapes = [{ name = "c2", cpu = 2, mem = "1G", wall = "10m" }]
[sites.B.ces.host]
[sites.B.ces.host.queues.second]
shapes = [{ name = "c2", cpu = 2, mem = "1G", wall = "10m" }]
"""


def test_the_queue_with_the_most_urgent_job_is_planned_first_and_takes_the_shared_jobs(
    in_tmp: Path, redis_url: str
) -> None:
    """Catalog order is A then B. B's own job is the most urgent, so B is planned first and packs the job that
    either queue can run beside it (in catalog order, A would have taken it)."""
    ctx = Context(settings_for(in_tmp, redis_url, TWO_SITES))
    director = Director(ctx, pilot_command=Placeholders(), log_dir=str(in_tmp / "logs"))
    try:
        Submitter.of(ctx).submit([job("anywhere", "A")], name="shared")
        Submitter.of(ctx).submit(
            [JobSpec(name="only-b", command="true", requirements={"Site": "B", "cpu": 1})],
            name="urgent",
            priority=600.0,
        )
        anywhere = Submitter.of(ctx).submit(
            [JobSpec(name="either", command="true", requirements={"cpu": 1})], name="either"
        )
        assert ctx.store.pool(ctx.store.jobs(list(anywhere.ids.values()))[0].tq_id) == {"A/host/first", "B/host/second"}
        report = director.cycle()
        assert list(report.queues) == ["B/host/second", "A/host/first"], report.summary()
        assert len(report.queues["B/host/second"].submitted) == 1, report.summary()
        # A still opens a pilot for its own job; the job either queue can run went with B's urgent one.
        assert len(report.queues["A/host/first"].submitted) == 1 and report.queues["A/host/first"].demand == 1
        queue_b = ctx.catalog.queue("B/host/second", ctx.settings.vo)
        [record] = director.provisioned(queue_b, director.backend(queue_b)).values()
        assert record["jobs"] == 2, record
    finally:
        director.stop_all()
        director.close()


# --- the two ways a director cycle is started from outside ---------------------------------------------------


def cli_env(ctx: Context) -> dict[str, str]:
    s = ctx.settings
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": s.redis_url,
        "PILOTFISH_CATALOG": str(s.catalog),
        "PILOTFISH_STATE_DIR": s.state_dir,
        "PILOTFISH_LEASE_SECONDS": "3",
        "PILOTFISH_BACKOFF_SECONDS": "0",
        "PILOTFISH_PILOT_IDLE_TIMEOUT": "2",
        "PILOTFISH_PILOT_EVENTS": "false",
    }


def test_pilotfish_director_once_provisions_and_its_pilot_runs_the_job(ctx: Context, in_tmp: Path) -> None:
    sub = Submitter.of(ctx).submit([job("once", "L")], name="once")
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "director", "--once", "--log-dir", str(in_tmp / "logs")],
        cwd=in_tmp,
        env=cli_env(ctx),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["queues"]["L/host/q"]["submitted"] == 1 and summary["queues"]["L/host/q"]["demand"] == 1, summary
    # The pilot outlives the command (its own session) and runs the job.
    [job_id] = sub.ids.values()
    wait_until(
        lambda: ctx.store.jobs([job_id])[0].state is JobState.DONE, timeout=60, interval=0.3, what="the job done"
    )
    assert list((in_tmp / "logs").glob("pfl-q-c1-local-*.out")), "the pilot's log is in --log-dir"
    assert {p.name for p in in_tmp.iterdir()} <= {"catalog.toml", "empty-bin", "logs", "state"}, "written to the cwd"
    wait_pilots_stopped(ctx)


@pytest.fixture
def worker(ctx: Context, in_tmp: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``pilotfish matcher --no-beat``: a real Celery worker on the test's Redis, nothing scheduled."""
    log = (in_tmp / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "matcher.cli", "matcher", "--no-beat", "--concurrency", "1"],
        cwd=in_tmp,
        env=cli_env(ctx),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_the_celery_director_task_provisions_and_its_pilot_runs_the_job(
    ctx: Context, in_tmp: Path, worker: subprocess.Popen[bytes]
) -> None:
    sub = Submitter.of(ctx).submit([job("celery", "L")], name="celery")
    [job_id] = sub.ids.values()
    client = Celery("pilotfish-test", broker=ctx.redis_url)
    try:
        client.send_task("pilotfish.director")
        wait_until(
            lambda: ctx.store.jobs([job_id])[0].state is JobState.DONE, timeout=90, interval=0.3, what="the job done"
        )
    finally:
        client.close()
    assert worker.poll() is None, (in_tmp / "worker.log").read_text()[-2000:]
    done = ctx.store.jobs([job_id])[0]
    assert done.pilot and done.pilot.startswith("local-"), done
    records = list(ctx.store.pilot_records().values())
    assert [r["queue"] for r in records] == ["L/host/q"], records
    wait_pilots_stopped(ctx)
