"""How long ``pilotfish jobs`` takes on a store of many waiting jobs (10^6 by default).

Fills a private redis-server with N waiting jobs through the store's own ``submit`` (batches of
``--batch`` jobs, each batch one request, spread over ``--task-queues`` task queues in two catalog queues,
urgency scores at random), then times, ``--runs`` times each (median reported):

* the command a person runs, ``pilotfish jobs --limit 50`` and the same with each filter, as a subprocess
  (Python's start and the CLI's imports included: ``pilotfish --version`` is timed as that floor);
* the listing itself (:func:`matcher.joblist.list_jobs`) in this process, without that start.

Usage: ``python scripts/bench_jobs.py [-n 1000000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from matcher.joblist import JobFilter, list_jobs, parse_states  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.records import NewJob  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUES = ("site/ce/q0", "site/ce/q1")


def fill(store: Store, n: int, batch: int, task_queues: int, seed: int = 1) -> list[str]:
    """Submit ``n`` waiting jobs in batches (one request each); returns the request ids."""
    rng = random.Random(seed)
    requests = []
    for start in range(0, n, batch):
        jobs = []
        for i in range(start, min(n, start + batch)):
            tq = i % task_queues
            queues = (QUEUES[tq % 2],)
            jobs.append(
                NewJob(
                    command="true",
                    tq_id=f"tq{tq:03d}",
                    tq_def=json.dumps({"class": tq}),
                    queues=queues,
                    cpu=1,
                    mem=100,
                    ete=60,
                    score=rng.uniform(0, 1e6),
                    name=f"job-{i}",
                )
            )
        request = f"r{start // batch:05d}"
        store.submit(jobs, (request, {"name": request}))
        requests.append(request)
    return requests


def timed(action: Callable[[], object], runs: int) -> float:
    """Median seconds of ``runs`` calls of ``action``."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="waiting jobs")
    parser.add_argument("--batch", type=int, default=5_000, help="jobs per submission (one request each)")
    parser.add_argument("--task-queues", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            store = Store(redis.Redis.from_url(server.url, socket_timeout=600))  # a big submission on a busy host
            began = time.perf_counter()
            requests = fill(store, args.n, args.batch, args.task_queues)
            print(
                f"filled {args.n} waiting jobs ({len(requests)} requests, {args.task_queues} task queues) in "
                f"{time.perf_counter() - began:.1f} s; Redis uses {store.client.info('memory')['used_memory_human']}"
            )
            middle = requests[len(requests) // 2]
            cases: list[tuple[str, list[str], JobFilter]] = [
                ("", [], JobFilter(limit=50)),
                (f"--request {middle}", ["--request", middle], JobFilter(request=middle, limit=50)),
                ("--task-queue tq007", ["--task-queue", "tq007"], JobFilter(task_queue="tq007", limit=50)),
                (f"--queue {QUEUES[1]}", ["--queue", QUEUES[1]], JobFilter(queue=QUEUES[1], limit=50)),
                ("--state blocked", ["--state", "blocked"], JobFilter(parse_states(["blocked"]), limit=50)),
                ("--state finished", ["--state", "finished"], JobFilter(parse_states(["finished"]), limit=50)),
                ("--pilot nobody", ["--pilot", "nobody"], JobFilter(pilot="nobody", limit=50)),
            ]
            env = {
                **os.environ,
                "PILOTFISH_REDIS_URL": server.url,
                "PILOTFISH_CATALOG": "",
                "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            }
            cli = [sys.executable, "-m", "matcher.cli"]

            def run(*extra: str) -> None:
                done = subprocess.run([*cli, *extra], env=env, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise SystemExit(f"pilotfish {' '.join(extra)} failed: {done.stderr}")

            floor = timed(lambda: run("--version"), args.runs)
            print(f"pilotfish --version (Python start and imports): {floor * 1000:.0f} ms")
            print(f"{'command':<52} {'CLI ms':>8} {'listing ms':>11} {'rows':>5}")
            for label, extra, flt in cases:
                command = f"pilotfish jobs --limit 50 {label}".strip()
                wall = timed(lambda extra=extra: run("jobs", "--limit", "50", *extra), args.runs)
                rows = len(list_jobs(store, flt).rows)
                inner = timed(lambda flt=flt: list_jobs(store, flt), args.runs)
                print(f"{command:<52} {wall * 1000:>8.0f} {inner * 1000:>11.1f} {rows:>5}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
