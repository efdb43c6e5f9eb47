#!/usr/bin/env python3
"""How long moving a big community stalls the Cluster nodes it leaves and joins (taskqueues.store.moves).

A real 3-primary cluster (the project's server binary, on loopback). One community holds ``--jobs`` waiting
jobs (its jobs hash and its task queue, the two keys that grow with it, filled with real records copied from
one submission, plus the community's small keys); it is moved back and forth between two primaries three
ways: the classic move with ``MIGRATE`` of whole keys (as ``valkey-cli --cluster reshard`` does it), the
chunked classic move (no step longer than ``--chunk`` elements), and ``CLUSTER MIGRATESLOTS`` (Valkey 9).
Meanwhile one probe process per node sends ``PING`` without pause: its longest wait is how long that node
stalled every other community it serves. Shown: the move's duration and each node's longest and 99th-percentile
probe wait, with the load average (a shared machine's noise sets the floor of the waits). With ``--command``
each move is made by the operator's command instead, ``pilotfish move big --to HOST:PORT`` (``--classic``,
``--chunk``; whole keys: ``--classic`` with a chunk larger than any key), a process of its own, and the
duration is the one it prints.
Usage: python scripts/bench_slot_move.py [--jobs 200000,500000] [--chunk 1000] [--command]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskqueues.store import Store
from taskqueues.store.keys import Keys
from taskqueues.store.moves import Move, move_slot
from taskqueues.store.records import NewJob
from tests.support.cluster import ClusterSet, cluster_set


def _probe(port: int, stop: Any, out: Any) -> None:
    client = redis.Redis(port=port)
    waits: list[float] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        client.ping()
        waits.append(time.perf_counter() - t0)
    out.put((max(waits), statistics.quantiles(waits, n=100)[98]) if len(waits) > 1 else (0.0, 0.0))


class Probe:
    """A process of its own (not to take the mover's interpreter lock) PINGing one node without pause."""

    def __init__(self, port: int) -> None:
        self.stopping, self.out = multiprocessing.Event(), multiprocessing.Queue()
        self.process = multiprocessing.Process(target=_probe, args=(port, self.stopping, self.out), daemon=True)
        self.process.start()

    def stop(self) -> tuple[float, float]:
        """The longest and the 99th-percentile wait (seconds)."""
        self.stopping.set()
        result: tuple[float, float] = self.out.get(timeout=60)
        self.process.join()
        return result


def populate(cluster: ClusterSet, keys: Keys, jobs: int) -> int:
    """The community's keys on the node that owns its slot, ``jobs`` waiting jobs; returns that node's index."""
    slot = int(cluster.admin(0).execute_command("CLUSTER", "KEYSLOT", keys.jobs))
    owner = cluster.owner(slot)
    node = cluster.admin(owner)
    store = Store(node, keys)
    store.submit(
        [NewJob(command="true", tq_id="tq", tq_def='{"cpu": 1}', queues=("s/c/q",), cpu=1, mem=100, name="one")]
    )
    record = json.loads(node.hget(keys.jobs, "1") or b"{}")
    (member, score) = node.zrange(keys.tq("tq"), 0, 0, withscores=True)[0]
    tail = member.decode().partition(":")[2]
    for start in range(2, jobs + 1, 1000):
        ids = range(start, min(start + 1000, jobs + 1))
        pipe = node.pipeline(transaction=False)
        pipe.hset(keys.jobs, mapping={str(i): json.dumps({**record, "id": str(i)}) for i in ids})
        pipe.zadd(keys.tq("tq"), {f"{i}:{tail}": score + i for i in ids})
        pipe.execute()
    return owner


def by_command(cluster: ClusterSet, keys: Keys, target: int, atomic: bool | None, chunk: int) -> float:
    """Move ``keys``' community to node ``target`` with ``pilotfish move``; the seconds it says it took."""
    argv = ["pilotfish", "move", keys.vo, "--to", f"127.0.0.1:{cluster.nodes[target].port}", "--chunk", str(chunk)]
    env = {**os.environ, "PILOTFISH_REDIS_URL": cluster.url, "PILOTFISH_BROKER_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([*argv, *(["--classic"] if atomic is False else [])], env=env, capture_output=True, text=True)
    said = re.search(r" in ([0-9.]+) s$", done.stdout.strip())
    if done.returncode or not said or (atomic is True) != ("atomically" in done.stdout):
        raise SystemExit(f"{' '.join(argv)}: {done.stdout}{done.stderr}")
    return float(said.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="200000,500000")
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--command", action="store_true", help="move with `pilotfish move` (its own process)")
    opts = parser.parse_args()
    keys = Keys(vo="big")
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the start")
    print(f"{'jobs':>8} | {'how':<31} | {'move s':>7} | {'source max/p99 ms':>17} | {'target max/p99 ms':>17}")
    for jobs in (int(x) for x in opts.jobs.split(",")):
        with tempfile.TemporaryDirectory() as tmp, cluster_set(Path(tmp)) as cluster:
            source = populate(cluster, keys, jobs)
            target = (source + 1) % len(cluster.nodes)
            slot = int(cluster.admin(0).execute_command("CLUSTER", "KEYSLOT", keys.jobs))
            ways = [
                ("classic, MIGRATE of whole keys", {"atomic": False, "chunk": 10**12}),
                (f"chunked classic ({opts.chunk}/step)", {"atomic": False, "chunk": opts.chunk}),
                ("atomic (CLUSTER MIGRATESLOTS)", {"atomic": True}),
            ]
            for how, kwargs in ways:
                probes = [Probe(cluster.nodes[i].port) for i in (source, target)]
                time.sleep(0.5)
                others = [cluster.admin(i) for i in range(len(cluster.nodes)) if i not in (source, target)]
                if opts.command:
                    seconds = by_command(cluster, keys, target, kwargs["atomic"], int(kwargs.get("chunk", opts.chunk)))
                else:
                    move: Move = move_slot(
                        cluster.admin(source), cluster.admin(target), slot, others, first=[keys.stats], **kwargs
                    )
                    seconds = move.seconds
                time.sleep(0.5)
                (smax, sp99), (tmax, tp99) = (probe.stop() for probe in probes)
                held = cluster.admin(target).hlen(keys.jobs)
                assert held == jobs, f"{how}: {held} of {jobs} jobs on the target"
                print(
                    f"{jobs:>8} | {how:<31} | {seconds:>7.2f} | {smax * 1000:>8.1f} / {sp99 * 1000:>6.1f} | "
                    f"{tmax * 1000:>8.1f} / {tp99 * 1000:>6.1f}"
                )
                source, target = target, source
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
