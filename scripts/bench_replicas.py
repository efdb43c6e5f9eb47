#!/usr/bin/env python3
"""What ``submit_replicas = 1`` (the default: WAIT for one replica) costs a submitter: submissions and jobs
per second.

A primary and one replica (the project's server binary, on loopback), one client; submissions of
``--jobs`` jobs each, with ``submit_replicas`` 0 and 1 in alternating slices (the load of a shared machine
moves within a run), ``--rounds`` slices of ``--calls`` submissions each; the best slice of each is shown.
Beside them, the same submissions to a primary without a replica (nothing to wait for). With
``submit_replicas = 0`` a submission still waits for a replica once per 10,000 job ids (the id ceiling that
keeps ids unique across a failover, submit.lua), so the column shows that cost too.
Usage: python scripts/bench_replicas.py [--jobs 1,100] [--calls 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskqueues.store import Store
from taskqueues.store.records import NewJob
from taskqueues.store.redis_server import RedisServer


def jobs(n: int) -> list[NewJob]:
    return [
        NewJob(
            command="true",
            tq_id="tq",
            tq_def='{"class": "tq"}',
            queues=("s/c/q",),
            cpu=1,
            mem=100,
            requirements='{"cpu":1,"mem":100}',
        )
        for _ in range(n)
    ]


def rate(store: Store, batch: list[NewJob], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        store.submit(batch)
    return calls / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,100")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        primary = RedisServer(Path(tmp) / "primary").start()
        replica = RedisServer(Path(tmp) / "replica", options=("--replicaof", "127.0.0.1", str(primary.port))).start()
        alone = RedisServer(Path(tmp) / "alone").start()
        try:
            while redis.Redis(port=replica.port).info("replication").get("master_link_status") != "up":
                time.sleep(0.05)
            client = redis.Redis(port=primary.port)
            single = redis.Redis(port=alone.port)
            stores = {"alone": Store(single), 0: Store(client, submit_replicas=0), 1: Store(client)}
            print("submissions per second (jobs per second), one client, primary + one replica on loopback;")
            print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the start")
            header = " | ".join(f"{h:>22}" for h in ("no replica", "submit_replicas=0", "submit_replicas=1 (default)"))
            print(f"{'jobs/submission':>16} | {header} | cost of 1 against 0")
            for n in (int(x) for x in opts.jobs.split(",")):
                batch = jobs(n)
                best: dict[str | int, float] = dict.fromkeys(stores, 0.0)
                for _ in range(opts.rounds):
                    for replicas, store in stores.items():
                        best[replicas] = max(best[replicas], rate(store, batch, opts.calls))
                    client.flushall()
                    single.flushall()
                cells = " | ".join(f"{best[r]:>9,.0f} ({best[r] * n:>9,.0f})" for r in stores)
                print(f"{n:>16} | {cells} | {1 - best[1] / best[0]:.0%} fewer")
            print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
        finally:
            alone.stop()
            replica.stop()
            primary.stop()


if __name__ == "__main__":
    main()
