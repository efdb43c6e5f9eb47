"""What the history index costs a job's end: ``complete`` with and without ``index_history`` (issue 28).

Loads, beside the store's library, the same ``complete`` script with the one call of ``index_history`` (the ZADD
of the two ``endedby`` entries, in ``_lib.lua``'s ``save``) taken out, as a function apart. Leases 2N jobs to one
pilot, then completes them alternately with each function, in interleaved blocks, so both see the same server
load; prints the mean time per call of each, their ratio and the load average. The machine is shared: the
ratio, measured in one run, is the figure; the times are not.

Usage: ``python scripts/bench_complete_index.py [-n 5000] [--block 50]``
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402
from bench_match import load_apart  # noqa: E402

from taskqueues.store import Store  # noqa: E402
from taskqueues.store.records import NewJob, PilotOffer  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402
from taskqueues.store.scripts import source  # noqa: E402

QUEUE = "site/ce/q0"
CALL = "    index_history(base, rec, before)\n"


def fcall_usec(client: redis.Redis) -> float:
    """Microseconds the server has spent in FCALL so far."""
    stats: dict[str, dict[str, float]] = client.info("commandstats")  # type: ignore[assignment]
    return float(stats.get("cmdstat_fcall", {}).get("usec", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="completions with each function")
    parser.add_argument("--block", type=int, default=50, help="completions in a row with one function")
    args = parser.parse_args(argv)
    text = source("complete")
    if text.count(CALL) != 1:
        raise SystemExit("complete's source no longer calls index_history once: update this bench")
    with tempfile.TemporaryDirectory(prefix="bench-complete-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            store = Store(redis.Redis.from_url(server.url, socket_timeout=600))
            indexed = store._scripts["complete"]
            bare = load_apart(store.client, "bench_noindex", "bench_complete_noindex", text.replace(CALL, ""))
            jobs = [
                NewJob("true", "0123456789abcdef.grp.alice", "{}", (QUEUE,), 1, 100, requirements="{}")
                for _ in range(2 * args.n)
            ]
            for start in range(0, len(jobs), 5000):
                store.submit(jobs[start : start + 5000])
            leased = []
            while len(leased) < len(jobs):
                leased += store.match(PilotOffer("bench", QUEUE, cpu=1000, mem=10**7), 1000)
            keys = store._complete_keys()
            spent = {"with": 0.0, "without": 0.0}
            inside = {"with": 0.0, "without": 0.0}  # the server's own time in FCALL (INFO commandstats), us
            it = iter(leased)
            for _ in range(0, args.n, args.block):
                for label in ("with", "without"):
                    before = fcall_usec(store.client)
                    began = time.perf_counter()
                    for _ in range(args.block):
                        job = next(it)
                        call_args = store._complete_args(job.id, job.attempt, "bench", None, time.time())
                        (indexed if label == "with" else bare)(keys=keys, args=call_args)
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
