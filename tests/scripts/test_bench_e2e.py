"""Smoke test of scripts/bench_e2e.py: each of its steps on a tiny workload, real processes, real redis-server.

50 jobs through real pilot subprocesses and a real Celery prefork worker, a few single-job latency trials,
and the tables; so the benchmark cannot rot between runs. The figures themselves are not checked (this
machine may be busy with other tests); what is checked is that every job ran exactly once and that the
measured times are consistent.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

import pytest
import redis

from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store.redis_server import RedisServer
from tests.support.scripts import script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return script("bench_e2e")


def test_percentile_is_nearest_rank(bench: ModuleType) -> None:
    values = [float(v) for v in range(1, 101)]
    assert bench.percentile(values, 0.95) == 95.0
    assert bench.percentile(values, 0.5) == 50.0
    assert bench.percentile([3.0, 1.0, 2.0], 1.0) == 3.0
    assert bench.percentile([7.0], 0.95) == 7.0


def test_small_run_end_to_end(bench: ModuleType, redis_server: RedisServer, redis_url: str, tmp_path: Path) -> None:
    context = Context(Settings(redis_url=redis_url, state_dir=str(tmp_path / "state")))
    n = 50
    with bench.pilots(redis_url, context.store, 1, 2, tmp_path / "pf") as procs:
        pf = bench.run_pilotfish(context, redis_server, [p.pid for p in procs], n, 20, timeout=60)
        trials = bench.measure_latency(context, [0.0, 0.05, 0.1])
        requests = context.store.requests()
    assert pf.jobs == n and pf.rate > 0
    assert 0 <= pf.submit_seconds <= pf.seconds and 0 <= pf.first_start <= pf.seconds
    assert sorted(r["n"] for r in requests.values()) == [1, 1, 1, 10, 20, 20]  # batches of 20, then 3 singles
    assert len(trials) == 3
    for trial in trials:  # store stamps are rounded to 1 ms
        assert -0.002 <= trial.matched <= trial.started + 0.002 <= trial.ended + 0.004 <= trial.seen + 0.006
    # The keyspace notifications the latency phase switched on are switched off again.
    assert redis.Redis.from_url(redis_url).config_get("notify-keyspace-events")["notify-keyspace-events"] == ""

    with bench.celery_worker(redis_url, 2, tmp_path / "celery") as worker:
        cel = bench.run_celery(redis_url, redis_server, worker, n, 20, timeout=60)
    assert cel.jobs == n and cel.rate > 0 and cel.submit_seconds <= cel.seconds

    table = bench.throughput_table(pf, cel, 2, "1 pilot x 2 cores")
    assert "Pilotfish" in table and "Celery" in table and f"{pf.rate / cel.rate:.2f}x, like for like" in table
    assert "target >= 2x" in table and "bwrap / none" not in table
    boxed = dataclasses.replace(pf, system="Pilotfish, bwrap (default)", seconds=2 * pf.seconds)
    table = bench.throughput_table(pf, cel, 2, "2 pilots x 1 core", boxed, pilots=2)
    assert "target >= 2.5x" in table and "Pilotfish, bwrap (default)" in table and "bwrap / none 0.50" in table
    assert "submit -> done seen (total)" in bench.latency_table(trials, "smoke")


def test_fast_poll_pilot_notices_work_within_its_back_off(bench: ModuleType, redis_url: str, tmp_path: Path) -> None:
    """The ``--fast-poll`` pilot (idle back-off capped at 5 ms) runs jobs and sees each well before 2 s
    (the CLI pilot's idle back-off cap), the figure the script compares with."""
    context = Context(Settings(redis_url=redis_url, state_dir=str(tmp_path / "state")))
    with bench.pilots(redis_url, context.store, 1, 1, tmp_path / "fast", fast_poll=True):
        trials = bench.measure_latency(context, [0.3, 0.3, 0.3])
    assert max(t.matched for t in trials) < 1.0


def test_the_ceiling_counts_every_term_of_the_cpu_per_job(bench: ModuleType) -> None:
    """C cores / (spawn floor + agent + redis + submit) CPU seconds per job: dropping any term, or counting
    one twice, moves the figure by more than the approximation allows."""
    floor, agent, redis_cpu, submit = 0.61e-3, 0.35e-3, 0.17e-3, 0.065e-3
    assert bench.ceiling(2, floor, agent, redis_cpu, submit) == pytest.approx(2 / 1.195e-3, rel=1e-9)
    assert bench.ceiling(4, floor, agent, redis_cpu, submit) == pytest.approx(4 / 1.195e-3, rel=1e-9)
    with pytest.raises(ValueError, match="CPU per job must be positive"):
        bench.ceiling(2, 0.0, 0.0, 0.0, 0.0)


def test_the_bound_lines_state_the_terms_the_ceiling_and_the_share_reached(bench: ModuleType) -> None:
    pf = bench.Throughput("Pilotfish", 1000, 1.0, 0.1, 0.01, 0.35, 0.17, 0.065, 0.6, 0.25)
    cel = bench.Throughput("Celery", 1000, 1.25, 1.0, float("nan"), 0.9, 0.3)
    floor = bench.SpawnFloor(("/bin/sh", "-c", "true"), 2, 3300, 1.0, 3300 * 0.61e-3)
    text = bench.bound_lines(pf, cel, floor, 2)
    assert "spawn floor 0.610 + agent 0.350 + redis 0.170 + submit 0.065 = 1.195" in text
    assert "3300 /bin/sh -c true/s" in text and "payloads' own CPU in the round 0.600" in text
    # 2 / 1.195 ms = 1674 jobs/s, against Celery's 800 jobs/s; the round's 1000 jobs/s is 60% of it
    assert "ceiling on 2 cores: 1674 jobs/s = 2.09x this round's Celery; the round reached 60% of it" in text
    assert "host core-time idle 25%" in text and "Pilotfish's own CPU 59% of 2 cores x 1.00 s" in text


def test_the_spawn_floor_spawns_the_argv_and_counts_its_cpu(bench: ModuleType, tmp_path: Path) -> None:
    """Real spawns of a real argv: each one leaves a mark, and the CPU counted includes the children's."""
    marks = tmp_path / "marks"
    floor = bench.spawn_floor(["/bin/sh", "-c", f"echo >> {marks}"], 2, 0.3)
    assert floor.processes == 2 and floor.spawns == len(marks.read_text().splitlines()) > 0
    assert 0 < floor.cpu_per_spawn < 0.3 and floor.rate > 0 and floor.seconds >= 0.3
