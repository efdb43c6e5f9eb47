#!/usr/bin/env python3
"""Benchmark of the task-queue store against a real redis-server (started here on a free port).

Prints, in one run: the submit rate; the match rate with 1 and 8 client processes for 10^4, 10^5 and 10^6
waiting jobs in 10, 100 and 1000 task queues (each pilot's queue eligible for about 10% of them); Redis
memory per waiting job with a 64-byte command (the data only: not the cached scripts, nor the clients'
query buffers, which a 1000-job submit grows for a while); and, on the same server, the rate of a trivial
FCALL (the ceiling). The match rate counts jobs matched, not calls (a call that finds nothing counts for
nothing), two ways: calls asking for one job ("one"), and calls asking for as many jobs as the pilot has
free cores ("fill"), which is how a pilot asks (pilot.agent.reports). Pilots have 1, 2, 4 or 8 free cores,
2000 MB per core, and 1000 s or 6000 s left. The ceiling is measured once at the start and again
alongside each match measurement, in alternating slices with the same number of calls and clients: on a
machine shared with other work the load moves within a run, and each row's "%" compares its match rate
with the ceiling measured next to it. Each slice starts with the row's number of jobs waiting, and makes
at most a tenth as many calls.
With ``--running`` every pilot has 8 cores and says what it runs (reservations on, as real pilots send it).
Usage: python scripts/bench_match.py [--sizes 10000,100000,1000000] [--tqs 10,100,1000] [--matches 4000]
       [--running] [--no-guard]
At its end it prints the load average and the match's instructions per call against the stored baseline
(count_match.guard: a later change that makes the match dearer shows there, free of this host's noise);
``--no-guard`` skips that minute under callgrind.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskqueues.store import Store
from taskqueues.store.functions import Function, wrapped
from taskqueues.store.packed import HotLine, PackedCall
from taskqueues.store.records import NewJob, PilotOffer
from taskqueues.store.redis_server import RedisServer, server_version

N_QUEUES = 10
COMMAND = "x" * 64
SHAPES = [(1, 2000), (2, 4000), (4, 8000), (1, 500), (8, 16000)]


def load_apart(client: redis.Redis, library: str, function: str, source: str) -> Function:
    """Load ``source`` as the one function of its own ``library`` (not the store's: a benchmark's floor or
    ceiling), called like the store's functions (``Function``, ``PackedCall``)."""
    client.function_load(f"#!lua name={library}\n" + wrapped(function, source), replace=True)
    return Function(client, function, function=function)


def queue_name(i: int) -> str:
    return f"site{i}/ce/q"


def tq_id(t: int, groups: int = 0) -> str:
    """Task queue t's id; with ``groups``, of the account of group ``g<t % groups>`` (owner ``u``), as
    submissions make them for a community with owners and groups (taskqueues.store.keys.account_tq)."""
    return f"{t:016x}" + (f".g{t % groups}.u" if groups else "")


def make_jobs(tqs: Sequence[int], rng: random.Random, start: int, groups: int = 0) -> list[NewJob]:
    """One job for each entry of ``tqs`` (task-queue numbers), numbered from ``start``; with ``groups``,
    spread over that many groups (:func:`tq_id`)."""
    jobs = []
    for tq in tqs:
        cpu, mem = SHAPES[tq % len(SHAPES)]
        jobs.append(
            NewJob(
                command=COMMAND,
                tq_id=tq_id(tq, groups),
                tq_def=json.dumps({"cpu": cpu, "tq": tq}),
                queues=(queue_name(tq % N_QUEUES),),
                cpu=cpu,
                mem=mem,
                ete=rng.choice([60, 600, 3600]),
                score=1.7e9 + rng.random() * 1e5,
                requirements=json.dumps({"cpu": cpu, "mem": mem}, separators=(",", ":")),
            )
        )
    return jobs


def fill(store: Store, tqs: Sequence[int], start: int, batch: int = 1000, groups: int = 0) -> float:
    """Submit one job per entry of ``tqs``, ``batch`` per call; the submit rate (jobs/s)."""
    rng = random.Random(start)
    t0 = time.perf_counter()
    for off in range(0, len(tqs), batch):
        store.submit(make_jobs(tqs[off : off + batch], rng, start + off, groups))
    return len(tqs) / (time.perf_counter() - t0)


def queues_for(cpu: int) -> list[int]:
    """The queues where a pilot with ``cpu`` free cores (and 2000 MB each) fits some job: :func:`make_jobs`
    sends task queue t to queue ``t % N_QUEUES`` with shape ``SHAPES[t % len(SHAPES)]``."""
    period = N_QUEUES * len(SHAPES)
    return sorted(
        {
            t % N_QUEUES
            for t in range(period)
            if SHAPES[t % len(SHAPES)][0] <= cpu and SHAPES[t % len(SHAPES)][1] <= cpu * 2000
        }
    )


def pilot_asks(seed: int, fill: bool, running: bool = False) -> list[tuple[PilotOffer, int]]:
    """64 pilots with 1, 2, 4 or 8 free cores and what each asks for: with ``fill``, as many jobs as it has
    free cores, as a pilot does (pilot.agent.reports), else one. Each pilot is at a queue where jobs of some
    shape fit its cores, as a director places pilots (pilot.director sizes them for the waiting work): a
    1-core pilot at a queue whose every job needs 8 cores would ask in vain forever. Whether a head fits
    the pilot's time left (1000 s or 6000 s, against jobs estimated at 60, 600 or 3600 s without a wall, so
    needing 1.5 times that left: 90, 900 or 5400 s; the same fits as 700 s or 4000 s against the
    estimates alone) is left to chance. With ``running``, each pilot has its own id and 8 cores and says what
    it runs, as pilots do (their offers carry it: reservations): ``8 - cpu`` 1-core jobs ending within 60 to
    3600 s; without, the 64 share one id and send no running list (reservations off: the strict match)."""
    rng = random.Random(seed)
    asks = []
    for _ in range(64):
        cpu = rng.choice([1, 2, 4, 8])
        queue, left = queue_name(rng.choice(queues_for(cpu))), rng.choice([1000, 6000])
        busy = tuple((float(rng.randint(60, 3600)), 1, 2000, 0) for _ in range(8 - cpu)) if running else None
        # with what they run, pilots are told apart (a reservation is held by one of them)
        pilot = f"p{seed}.{len(asks)}" if running else f"p{seed}"
        asks.append((PilotOffer(pilot, queue, cpu, cpu * 2000, 0, left, busy), cpu if fill else 1))
    return asks


def timed(call: Callable[[int], int], n: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Put (seconds, total, CPU seconds of this process) of calls 1..n of ``call`` (each returns what it
    counts) on ``out``, after call 0 (scripts loaded, connection made, eligible task queues cached)."""
    call(0)
    got = 0
    cpu, t0 = time.process_time(), time.perf_counter()
    for i in range(1, n + 1):
        got += call(i)
    out.put((time.perf_counter() - t0, got, time.process_time() - cpu))


def match_worker(url: str, n: int, seed: int, fill: bool, running: bool, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """``n`` match calls of the pilots of :func:`pilot_asks`; counts the jobs leased."""
    store = Store.from_url(url, lease_seconds=3600)
    asks = pilot_asks(seed, fill, running)
    timed(lambda i: len(store.match(*asks[i % len(asks)])), n, out)


def trivial_call(client: redis.Redis) -> PackedCall:
    """The ceiling's script, ``return 1``, called the way the store calls match (pre-packed, on a kept
    connection), so the ceiling measures the server and the round trip, not a difference of client paths."""
    return PackedCall(
        HotLine.of(client), load_apart(client, "bench_ceiling", "bench_trivial", "return 1"), [], n_args=0
    )


def evalsha_worker(url: str, n: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """``n`` calls of :func:`trivial_call`; counts calls (the script returns 1)."""
    trivial = trivial_call(redis.Redis.from_url(url))
    timed(lambda i: int(trivial(())), n, out)


def parallel(target, url: str, n_total: int, procs: int, extra) -> Tally:  # type: ignore[no-untyped-def]
    """Run ``procs`` workers at once; what they did in all, over the slowest worker's own loop time."""
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    workers = [ctx.Process(target=target, args=(url, n_total // procs, *extra(i), out)) for i in range(procs)]
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    # Over the slowest worker's own loop (process start-up excluded), as every worker ran at once.
    return Tally(sum(r[1] for r in results), max(max(r[0] for r in results), 1e-9), sum(r[2] for r in results))


SLICES = 4


def slice_count(n_total: int, size: int) -> int:
    """Slices of one measurement: at least ``SLICES``, and enough that no slice makes more calls than a
    tenth of the jobs waiting. Pilots favour the queues whose jobs fit most of them: a longer slice would
    drain those before its end, and its last calls would find nothing to lease."""
    return max(SLICES, -(-n_total * 10 // size))


def stored(client: redis.Redis) -> int:
    """Bytes of Redis memory holding data: used_memory without the clients' buffers."""
    info = client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0)) - int(info.get("mem_clients_slaves", 0))


def server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU redis-server has used."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def fcall_stats(client: redis.Redis) -> tuple[int, int]:
    """(calls, microseconds) of FCALL the server has counted so far (INFO commandstats)."""
    stats = client.info("commandstats").get("cmdstat_fcall", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


@dataclass
class Tally:
    """What some calls did (jobs leased, or calls for the ceiling), over how many seconds, and the CPU
    seconds their clients and the server spent on them."""

    done: int = 0
    seconds: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def add(self, other: Tally) -> None:
        self.done += other.done
        self.seconds += other.seconds
        self.client_cpu += other.client_cpu
        self.server_cpu += other.server_cpu


def cell(matched: float, ceiling: float) -> str:
    """A match rate and its share of the ceiling, as the table prints them."""
    return f"{matched:>6,.0f} {100 * matched / ceiling:>3.0f}%"


class Stock:
    """The waiting jobs of one run: every task queue topped up to its share of the row's size before every
    slice of matches (pilots favour the queues whose jobs fit most of them, and drain those first)."""

    def __init__(self, store: Store, n_tqs: int, groups: int = 0) -> None:
        self.store, self.n_tqs, self.groups = store, n_tqs, groups
        self.submitted = 0
        self.least = 1.0  # the smallest fraction of the row's size left waiting at the end of a slice

    def top_up(self, size: int) -> float:
        """Submit what brings each task queue back to ``size / n_tqs`` waiting jobs, one per task queue in
        turn as at first; the submit rate (jobs/s)."""
        pipe = self.store.client.pipeline(transaction=False)
        for t in range(self.n_tqs):
            pipe.zcard(self.store.keys.tq(tq_id(t, self.groups)))
        short = [size // self.n_tqs - int(n) for n in pipe.execute()]
        tqs = [t for turn in range(max(short)) for t in range(self.n_tqs) if short[t] > turn]
        if not tqs:
            return 0.0
        submit_rate = fill(self.store, tqs, self.submitted, groups=self.groups)
        self.submitted += len(tqs)
        return submit_rate


Worker = Callable[..., None]  # (url, calls, *extra, out queue), as :func:`parallel` starts it
Run = tuple[Worker, Callable[[int], tuple[Any, ...]]]  # a worker, and worker i's extra arguments


def alternate(url: str, stock: Stock, size: int, n_total: int, procs: int, kinds: dict[str, Run]) -> dict[str, Tally]:
    """What each kind of run did, ``n_total`` calls each, in alternating slices, each slice starting with
    ``size`` jobs waiting, with the server's CPU over each slice.

    On a machine shared with other work the load moves within a run; alternating slices
    (:func:`slice_count`) lets every rate see the same load. Every kind but "ceil" counts jobs leased.
    """
    tallies = {kind: Tally() for kind in kinds}
    slices = slice_count(n_total, size)
    for _ in range(slices):
        for kind, (target, extra) in kinds.items():
            stock.top_up(size)
            served = server_cpu(stock.store.client)
            did = parallel(target, url, n_total // slices, procs, extra)
            did.server_cpu = server_cpu(stock.store.client) - served
            tallies[kind].add(did)
            if kind != "ceil":
                stock.least = min(stock.least, 1 - did.done / size)
    return tallies


def side_by_side(
    url: str, stock: Stock, size: int, n_total: int, procs: int, seeds: Callable[[int], int], running: bool = False
) -> tuple[float, float, float]:
    """Jobs matched per second by one-job calls and by filling calls, and the trivial-FCALL rate
    (:func:`alternate`). ``seeds(i)`` is worker i's seed; ``running``: the pilots say what they run
    (:func:`pilot_asks`)."""
    tallies = alternate(
        url,
        stock,
        size,
        n_total,
        procs,
        {
            "ceil": (evalsha_worker, lambda i: ()),
            "one": (match_worker, lambda i: (seeds(i), False, running)),
            "fill": (match_worker, lambda i: (seeds(i), True, running)),
        },
    )
    return tallies["one"].rate, tallies["fill"].rate, tallies["ceil"].rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--tqs", default="10,100,1000")
    parser.add_argument("--matches", type=int, default=4000, help="matches per measurement")
    parser.add_argument(
        "--running",
        action="store_true",
        help="pilots say what they run, as real pilots do (reservations on); without, the strict match",
    )
    parser.add_argument("--no-guard", action="store_true", help="skip the instruction count against the baseline")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    tq_counts = [int(s) for s in args.tqs.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            client = redis.Redis.from_url(server.url)
            version = server_version(client.info("server"))
            ceiling1 = parallel(evalsha_worker, server.url, 20000, 1, lambda i: ()).rate
            ceiling8 = parallel(evalsha_worker, server.url, 40000, 8, lambda i: ()).rate
            print(f"{version}; trivial FCALL ceiling: {ceiling1:,.0f}/s (1 client), {ceiling8:,.0f}/s (8 clients)")
            print(
                "jobs matched per second by one-job calls (one) and by calls asking for as many jobs as the "
                "pilot has free cores (fill), with 1 and 8 client processes; % of the trivial-FCALL rate "
                "(ceil) measured alongside"
            )
            print(
                f"{'tqs':>5} {'waiting':>9} {'submit/s':>9} | {'ceil':>7} {'one':>6} {'%':>4} {'fill':>6} {'%':>4} | "
                f"{'ceil 8':>7} {'one 8':>6} {'%':>4} {'fill 8':>6} {'%':>4} | {'bytes/job':>9}"
            )
            rows = []
            for n_tqs in tq_counts:
                client.flushall()
                store = Store(client, lease_seconds=3600)
                store.reload_scripts()
                mem0 = stored(client)
                stock = Stock(store, n_tqs)
                for size in sizes:
                    rate_submit = stock.top_up(size)
                    # every record stored so far, waiting or leased by the rows before
                    mem_per_job = (stored(client) - mem0) / stock.submitted
                    o1, f1, c1 = side_by_side(server.url, stock, size, args.matches, 1, lambda i: 1, args.running)
                    o8, f8, c8 = side_by_side(
                        server.url, stock, size, args.matches * 2, 8, lambda i: 100 + i, args.running
                    )
                    rows.append((n_tqs, size, o1, f1, o8, f8))
                    print(
                        f"{n_tqs:>5} {size:>9,} {rate_submit:>9,.0f} | {c1:>7,.0f} {cell(o1, c1)} {cell(f1, c1)} | "
                        f"{c8:>7,.0f} {cell(o8, c8)} {cell(f8, c8)} | {mem_per_job:>9,.0f}",
                        flush=True,
                    )
                print(f"      (a slice left at least {100 * stock.least:.0f}% of its row's jobs waiting)")
            print()
            for n_tqs in tq_counts:
                mine = [r for r in rows if r[0] == n_tqs]
                lo, hi = mine[0], mine[-1]
                print(
                    f"{n_tqs:>5} task queues: match rate at {hi[1]:,} waiting / at {lo[1]:,}, one / fill: "
                    f"{hi[2] / lo[2]:.2f} / {hi[3] / lo[3]:.2f} (1 client), "
                    f"{hi[4] / lo[4]:.2f} / {hi[5] / lo[5]:.2f} (8 clients)"
                )
        finally:
            server.stop()
    print(f"load average {os.getloadavg()[0]:.2f}")
    if not args.no_guard:
        from count_match import guard  # count_match imports this module: imported here, once it is loaded

        print(guard())


if __name__ == "__main__":
    main()
