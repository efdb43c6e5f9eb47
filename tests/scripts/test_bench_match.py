"""Smoke test of scripts/bench_match.py and scripts/bench_floor.py: their measuring loop on a tiny workload,
real worker processes, real redis-server; so the benchmarks cannot rot between runs. The rates are not
checked (this machine may be busy with other tests); what is checked is that the tallies count exactly
what the workers did, and that both scripts print their tables.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from taskqueues.store import Store
from tests.support.scripts import SCRIPTS

pytestmark = pytest.mark.timeout(600)  # each benchmark run bounded at 300 s

# bench_match forks its workers. Forking this pytest process would also run the after-fork hooks of the
# kombu pools earlier Celery tests left here (one waits forever on an inherited socket), so the
# measuring loop runs in a fresh interpreter, as the scripts themselves do.
ALTERNATE = """
import json, sys
sys.path[:0] = [sys.argv[1]]
import redis
import bench_floor, bench_match
from taskqueues.store import Store
store = Store(redis.Redis.from_url(sys.argv[2]), lease_seconds=3600)
runs = {"ceil": (bench_match.evalsha_worker, lambda i: ()), "match one": bench_floor.run("match one")}
tallies = bench_match.alternate(sys.argv[2], bench_match.Stock(store, 1), 400, 40, 2, runs)
print(json.dumps({"slices": bench_match.slice_count(40, 400), **{kind: vars(t) for kind, t in tallies.items()}}))
"""


def run_script(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_alternate_tallies_the_jobs_the_workers_leased(redis_url: str) -> None:
    tallies = json.loads(run_script("-c", ALTERNATE, str(SCRIPTS), redis_url))
    slices = tallies.pop("slices")
    # bench_floor's pilots always find a job: each call leases one, and so does each worker's first
    # (untimed) call of each slice.
    assert tallies["ceil"]["done"] == tallies["match one"]["done"] == 40
    store = Store(redis.Redis.from_url(redis_url))
    assert store.client.zcard(store.keys.leases) == 40 + 2 * slices
    for tally in tallies.values():
        assert tally["seconds"] > 0 and tally["client_cpu"] > 0 and tally["server_cpu"] > 0


def test_bench_match_prints_its_table() -> None:
    out = run_script(
        str(SCRIPTS / "bench_match.py"), "--sizes", "1000,2000", "--tqs", "10", "--matches", "40", "--no-guard"
    )
    rows = [line.split() for line in out.splitlines() if line.lstrip().startswith("10 ") and "|" in line]
    assert [row[1] for row in rows] == ["1,000", "2,000"]
    assert "match rate at 2,000 waiting / at 1,000" in out


def test_bench_floor_prints_its_rates_and_cpu_tables() -> None:
    out = run_script(str(SCRIPTS / "bench_floor.py"), "--calls", "80", "--waiting", "2000").splitlines()
    cpu_at = next(i for i, line in enumerate(out) if line.startswith("CPU per job leased"))
    for table in (out[:cpu_at], out[cpu_at:]):
        clients = [line.split()[0] for line in table if line.split() and line.split()[0].isdigit()]
        assert clients == ["1", "8"]
