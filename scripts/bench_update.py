"""How long the store is held by one ``pilotfish update`` of N jobs (one atomic ``update.lua`` call).

For each N, fills a private redis-server with N waiting jobs in one task queue (the store's own ``submit``),
then updates them all at once into a new task queue with a new priority (``Lifecycle.update``), and prints the
server's time in that update's FCALLs (``INFO commandstats``, so a needkeys retry is counted too) beside the
whole call's time from Python, and the load average (the figures are of a shared machine).

Usage: ``python scripts/bench_update.py [N ...]`` (default 1000 2500 5000 10000)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from taskqueues.store import JobState, JobUpdate, NewJob, Placed, Store  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUE = "site/ce/q1"


def waiting(n: int) -> list[NewJob]:
    return [
        NewJob(
            command="true",
            tq_id="tqA",
            tq_def='{"class":"tqA"}',
            queues=(QUEUE,),
            cpu=1,
            mem=100,
            tmp=0,
            ete=60,
            score=float(i),
            requirements='{"cpu":1,"mem":100,"tmp":0}',
        )
        for i in range(n)
    ]


def fcall_usec(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("usec", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 2500, 5000, 10000])
    sizes = parser.parse_args().sizes
    placed = Placed("tqB", '{"class":"tqB"}', (QUEUE,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder)).start()
        try:
            client = redis.Redis.from_url(server.url)
            for n in sizes:
                client.flushdb()
                store = Store(client)
                ids: list[str] = []
                for start in range(0, n, 1000):
                    ids += store.submit(waiting(min(1000, n - start)))
                changes = [JobUpdate(j, "cpu 1 -> 2; priority 0 -> 10", 10, placed) for j in ids]
                before, started = fcall_usec(client), time.perf_counter()
                states = store.lifecycle.update(changes, "bench")
                whole = time.perf_counter() - started
                moved = sum(j.cpu == 2 and j.priority == 10 for j in store.jobs(ids))
                if states != [JobState.WAITING] * n or moved != n:
                    raise SystemExit(f"{n} jobs: {moved} updated, states {sorted(set(states))}")
                held = (fcall_usec(client) - before) / 1000
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(
                    f"{n:6d} jobs: server {held:8.1f} ms ({held / n * 1000:5.1f} us a job), "
                    f"whole update {whole * 1000:8.1f} ms   load average {load}"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
