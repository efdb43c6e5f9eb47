"""What the history index costs a job's end: ``complete`` with and without ``index_history`` (issue 28).

Loads, beside the store's library, the same ``complete`` script with the one call of ``index_history`` (the ZADD
of the two ``endedby`` entries, in ``_lib.lua``'s ``save``) taken out, as a function apart. Leases 2N jobs to one
pilot, then completes them alternately with each function, in interleaved blocks, so both see the same server
load; prints the mean time per call of each, their ratio and the load average. The machine is shared: the
ratio, measured in one run, is the figure; the times are not.

``--count`` counts instructions instead (valgrind's callgrind, as ``count_match.py``): free of the host's load.

Usage: ``python scripts/bench_complete_index.py [-n 5000] [--block 50] [--count]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402
from bench_match import load_apart  # noqa: E402
from count_match import Counted  # noqa: E402

from taskqueues.store import Store  # noqa: E402
from taskqueues.store.functions import Function  # noqa: E402
from taskqueues.store.records import Job, NewJob, PilotOffer  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402
from taskqueues.store.scripts import source  # noqa: E402

QUEUE = "site/ce/q0"
CALL = "    index_history(base, rec, before)\n"


def fcall_usec(client: redis.Redis) -> float:
    """Microseconds the server has spent in FCALL so far."""
    stats: dict[str, dict[str, float]] = client.info("commandstats")  # type: ignore[assignment]
    return float(stats.get("cmdstat_fcall", {}).get("usec", 0))


def prepare(client: redis.Redis, n: int) -> tuple[Store, Function, Function, Iterator[Job]]:
    """The store, complete with and without the index, and 2n jobs leased to one pilot."""
    text = source("complete")
    if text.count(CALL) != 1:
        raise SystemExit("complete's source no longer calls index_history once: update this bench")
    store = Store(client)
    bare = load_apart(client, "bench_noindex", "bench_complete_noindex", text.replace(CALL, ""))
    jobs = [
        NewJob("true", "0123456789abcdef.grp.alice", "{}", (QUEUE,), 1, 100, requirements="{}") for _ in range(2 * n)
    ]
    for start in range(0, len(jobs), 1000):
        store.submit(jobs[start : start + 1000])
    leased: list[Job] = []
    while len(leased) < len(jobs):
        leased += store.match(PilotOffer("bench", QUEUE, cpu=1000, mem=10**7), 1000)
    return store, store._scripts["complete"], bare, iter(leased)


def complete(store: Store, function: Function, jobs: Iterator[Job], n: int) -> None:
    """``n`` completes of the next leased jobs with ``function``."""
    keys = store._complete_keys()
    for _ in range(n):
        job = next(jobs)
        function(keys=keys, args=store._complete_args(job.id, job.attempt, "bench", None, time.time()))


def counted(n: int) -> None:
    """Instructions per call of each, counted by callgrind (one server, the same jobs' shape)."""
    with tempfile.TemporaryDirectory(prefix="bench-complete-") as tmp:
        server = Counted(Path(tmp))
        try:
            store, indexed, bare, jobs = prepare(server.client, n)
            per = {}
            for label, function in (("with", indexed), ("without", bare), ("with (again)", indexed)):
                server.dump()
                complete(store, function, jobs, n // 2 if label != "without" else n)
                per[label] = server.dump() / (n // 2 if label != "without" else n)
        finally:
            server.stop()
    with_index = (per["with"] + per["with (again)"]) / 2
    print(f"instructions per complete (callgrind, {n} calls each): with the history index {with_index:,.0f},")
    print(f"  without {per['without']:,.0f}: +{with_index - per['without']:,.0f} ({with_index / per['without']:.3f}x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="completions with each function")
    parser.add_argument("--block", type=int, default=50, help="completions in a row with one function")
    parser.add_argument("--count", action="store_true", help="instructions per call under callgrind instead")
    args = parser.parse_args(argv)
    if args.count:
        counted(args.n)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-complete-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            store, indexed, bare, jobs = prepare(redis.Redis.from_url(server.url, socket_timeout=600), args.n)
            spent = {"with": 0.0, "without": 0.0}
            inside = {"with": 0.0, "without": 0.0}  # the server's own time in FCALL (INFO commandstats), us
            for _ in range(0, args.n, args.block):
                for label, function in (("with", indexed), ("without", bare)):
                    before = fcall_usec(store.client)
                    began = time.perf_counter()
                    complete(store, function, jobs, args.block)
                    spent[label] += time.perf_counter() - began
                    inside[label] += fcall_usec(store.client) - before
            entries = store.client.zcard(store.keys.endedby)
            per = {k: v / args.n * 1e6 for k, v in spent.items()}
            server_side = {k: v / args.n for k, v in inside.items()}
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2-core host shared with others)")
            print(f"{args.n} completes each, {entries} index entries written")
            for what, got in (("round trip", per), ("inside the server (FCALL)", server_side)):
                print(
                    f"{what}: with the history index {got['with']:.1f} us/call, without {got['without']:.1f} us/call,"
                    f" ratio {got['with'] / got['without']:.3f}"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
