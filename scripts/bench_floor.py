#!/usr/bin/env python3
"""How far the match is from the floor: the rate of the bare lease no match script can beat, next to the
match and the trivial-FCALL ceiling, on the same server in one run.

One task queue of 1-core jobs; pilots with 1, 2, 4 or 8 free cores and no time limit at its queue, so every
call leases what it asks for (one job, or one per free core). ``floor`` is scripts/floor_lease.lua: the
commands any atomic lease of those jobs needs (take them, set the next head, mark the records, add the
leases), without a walk, an eligibility or a fit check, called and read back exactly as Store.match is.
``match`` is Store.match on the same jobs. Rates are jobs leased per second, in alternating slices
(bench_match.alternate); "%" is against the ceiling measured alongside.

A second table splits the CPU spent per job leased (per call for the ceiling) between the client processes
(their process time) and redis-server (its used_cpu_user + used_cpu_sys), over the same slices. With 8
clients on a machine's few cores the rate is what the cores can give: a kind reaches 40% of the ceiling
only if its clients and the server together spend at most 2.5 times per job what the ceiling spends per call.
Usage: python scripts/bench_floor.py [--calls 8000] [--waiting 100000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import tempfile
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_match import Run, Stock, Tally, alternate, cell, evalsha_worker, load_apart, queue_name, timed, tq_id

from taskqueues.store import Store
from taskqueues.store.packed import HotLine, PackedCall
from taskqueues.store.records import PilotOffer
from taskqueues.store.redis_server import RedisServer, server_version

TQ = tq_id(0)  # bench_match's task queue 0: 1-core jobs at queue 0


def asks(seed: int, fill: bool) -> list[tuple[PilotOffer, int]]:
    """64 pilots at task queue 0's queue, with 1, 2, 4 or 8 free cores and no time limit; with ``fill`` each
    asks for one job per free core, else for one."""
    rng = random.Random(seed)
    cores = [rng.choice([1, 2, 4, 8]) for _ in range(64)]
    return [(PilotOffer(f"p{seed}", queue_name(0), c, c * 2000, 0, None), c if fill else 1) for c in cores]


def worker(url: str, n: int, seed: int, kind: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """``n`` calls of ``kind`` ("floor one", "match fill"...) by the pilots of :func:`asks`."""
    how, ask = kind.split()
    store = Store.from_url(url, lease_seconds=3600)
    pilots = asks(seed, ask == "fill")
    k = store.keys
    floor = PackedCall(
        HotLine.of(store.client),
        load_apart(
            store.client, "bench_floor", "bench_floor_lease", (Path(__file__).parent / "floor_lease.lua").read_text()
        ),
        [k.tq(TQ), k.heads, k.qheads(queue_name(0)), k.jobs, k.leases],
        n_args=12,
    )

    def call(i: int) -> int:
        offer, want = pilots[i % len(pilots)]
        if how == "match":
            return len(store.match(offer, want))
        return len(Store.matched(floor([*store.match_args(offer, want), TQ])))

    timed(call, n, out)


def cpu_split(tally: Tally) -> str:
    """Microseconds of CPU per job leased (per call for the ceiling): client processes / redis-server."""
    return f"{1e6 * tally.client_cpu / tally.done:>5.1f} / {1e6 * tally.server_cpu / tally.done:>5.1f}"


def run(kind: str) -> Run:
    """The workers of ``kind``: worker i's pilots are seeded 100 + i."""
    return worker, lambda i: (100 + i, kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=8000, help="calls per measurement")
    parser.add_argument("--waiting", type=int, default=100_000, help="jobs waiting at the start of each slice")
    args = parser.parse_args()
    kinds = ("floor one", "match one", "floor fill", "match fill")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            client = redis.Redis.from_url(server.url)
            print(
                f"{server_version(client.info('server'))}; jobs leased per second, "
                "% of the trivial FCALL (ceil) measured alongside"
            )
            print(f"{'clients':>7} {'ceil':>7} | " + " | ".join(f"{k:>12}" for k in kinds))
            stock = Stock(Store(client, lease_seconds=3600), 1)
            runs: dict[str, Run] = {"ceil": (evalsha_worker, lambda i: ()), **{kind: run(kind) for kind in kinds}}
            cpu = []
            for procs in (1, 8):
                tallies = alternate(server.url, stock, args.waiting, args.calls, procs, runs)
                ceiling = tallies["ceil"].rate
                print(
                    f"{procs:>7} {ceiling:>7,.0f} | " + " | ".join(cell(tallies[k].rate, ceiling) for k in kinds),
                    flush=True,
                )
                cpu.append(f"{procs:>7} " + " | ".join(map(cpu_split, tallies.values())))
            print("\nCPU per job leased (per call for ceil), us: client processes / redis-server")
            print(f"{'clients':>7} " + " | ".join(f"{k:>13}" for k in ("ceil", *kinds)))
            print("\n".join(cpu))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
