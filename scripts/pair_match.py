#!/usr/bin/env python3
"""Server time per match call of two versions of match.lua, paired and interleaved on one server.

The working tree's match.lua is the store's function (``pf_match``); the one of a git revision (``--before``,
default ``main``) is loaded beside it as a function of its own library, rendered the same way
(:func:`taskqueues.store.scripts.prelude`). Both are called through the same packed path, with the same keys
and the same pilots' arguments (bench_match.pilot_asks), on the same waiting jobs (topped up before each
block): blocks of ``--calls`` calls alternate between the two versions (AB, then BA), so a load that moves
on this shared machine falls on both alike. The server's time per call is ``INFO commandstats``'s
``cmdstat_fcall`` microseconds over its calls in each block (the time inside the function, Lua and the
commands it runs; not the socket), so the client's speed does not enter.

Kinds: ``one`` (one job per call), ``fill`` (as many as the pilot has free cores), and ``one+r`` / ``fill+r``
with pilots that say what they run (8-core pilots, reservations on, as real pilots send it). Prints per kind
the median over blocks of each version's µs per call, their ratio (the median of the per-pair ratios), and
jobs per call; and the load average at the start and the end.
Usage: python scripts/pair_match.py [--before main] [--kinds one,fill,one+r,fill+r] [--tqs 100]
       [--waiting 100000] [--calls 400] [--blocks 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_match import Stock, fcall_stats, load_apart, pilot_asks

from taskqueues.store import Store
from taskqueues.store.packed import PackedCall
from taskqueues.store.redis_server import RedisServer
from taskqueues.store.scripts import prelude

ROOT = Path(__file__).resolve().parent.parent


def source_at(revision: str) -> str:
    """match.lua of ``revision`` (or a file of that name), as the loader sends it."""
    if Path(revision).is_file():
        text = Path(revision).read_text()
    else:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{revision}:taskqueues/store/lua/match.lua"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return prelude(text) + text


def block(store: Store, calls: dict[str, PackedCall], kind: str, n: int) -> tuple[float, float]:
    """µs of server time per call, and jobs per call, of ``n`` calls of one version."""
    asks = pilot_asks(1, kind.startswith("fill"), kind.endswith("+r"))
    client = store.client
    c0, u0 = fcall_stats(client)
    got = 0
    for i in range(n):
        offer, want = asks[i % len(asks)]
        got += len(calls[offer.queue](store.match_args(offer, want))) // 2
    c1, u1 = fcall_stats(client)
    return (u1 - u0) / max(c1 - c0, 1), got / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git revision of the other match.lua, or its file")
    parser.add_argument("--kinds", default="one,fill,one+r,fill+r")
    parser.add_argument("--tqs", type=int, default=100)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=400, help="calls per block")
    parser.add_argument("--blocks", type=int, default=8, help="blocks per version and kind")
    args = parser.parse_args()
    before_source = source_at(args.before)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"server µs per match call (cmdstat_fcall), median of {args.blocks} blocks of {args.calls} calls each, "
        f"{args.waiting:,} waiting jobs in {args.tqs} task queues; before = {args.before}, after = working tree"
    )
    print(f"{'kind':>7} | {'before µs':>9} {'after µs':>9} {'after/before':>12} | {'jobs/call b':>11} {'a':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            client = redis.Redis.from_url(server.url)
            store = Store(client, lease_seconds=3600)
            store.reload_scripts()
            old = load_apart(client, "bench_before", "pf_match_before", before_source)
            stock = Stock(store, args.tqs)
            for kind in args.kinds.split(","):
                versions: dict[str, dict[str, PackedCall]] = {"before": {}, "after": {}}
                for offer, _ in pilot_asks(1, True, True):
                    after = store._match_call(offer.queue)
                    versions["after"][offer.queue] = after
                    versions["before"][offer.queue] = PackedCall(after.line, old, after.keys, n_args=11)
                times: dict[str, list[float]] = {"before": [], "after": []}
                jobs: dict[str, list[float]] = {"before": [], "after": []}
                for b in range(args.blocks):
                    order = ["before", "after"] if b % 2 == 0 else ["after", "before"]
                    for version in order:
                        stock.top_up(args.waiting)
                        us, per_call = block(store, versions[version], kind, args.calls)
                        times[version].append(us)
                        jobs[version].append(per_call)
                ratio = statistics.median(a / b for a, b in zip(times["after"], times["before"], strict=True))
                print(
                    f"{kind:>7} | {statistics.median(times['before']):>9.1f} {statistics.median(times['after']):>9.1f} "
                    f"{ratio:>12.2f} | {statistics.mean(jobs['before']):>11.2f} {statistics.mean(jobs['after']):>5.2f}",
                    flush=True,
                )
        finally:
            server.stop()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
