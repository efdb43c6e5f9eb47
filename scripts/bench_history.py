"""How long ``pilotfish history`` takes on a store of many ended jobs (10^6 by default).

Ends a few hundred jobs for real (submit, match, complete or fail: the scripts write the ``ended`` and
``endedby`` indexes), takes one of those records as the template, and loads N more ended jobs with a pipeline
(the bench's own bulk loader: record, ``ended`` entry, the two ``endedby`` entries in the form the real ones
were just checked to have), their ends spread evenly over the last ``--days`` days, owners and groups drawn
from ``--owners`` owners in ``--groups`` groups (``alice`` is one owner like the others: about N / owners jobs).
Then times, ``--runs`` times each (median):

* the command a person runs, as a subprocess (Python's start and the CLI's imports included:
  ``pilotfish --version`` is timed as that floor): ``pilotfish history --since 1d --owner alice`` and others;
* the listing itself (:func:`matcher.history.list_history`) in this process.

The load average is printed with the figures. Usage: ``python scripts/bench_history.py [-n 1000000] [--runs 3]``
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

from matcher.history import HistoryFilter, list_history  # noqa: E402
from taskqueues.store import Store  # noqa: E402
from taskqueues.store.history import end_text  # noqa: E402
from taskqueues.store.records import NewJob, PilotOffer, RunResult  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUE = "site/ce/q0"
PIPE = 5_000


def tq_of(owner: int, groups: int) -> tuple[str, str, str]:
    """(task queue, group, owner) of owner number ``owner``; owner 0 is alice."""
    name = "alice" if owner == 0 else f"user{owner:04d}"
    group = f"grp{owner % groups:02d}"
    return f"0123456789abcdef.{group}.{name}", group, name


def end_for_real(store: Store, n: int, owners: int, groups: int) -> dict[str, str]:
    """Submit, match and end ``n`` jobs through the scripts; returns each one's stored record."""
    jobs = []
    for i in range(n):
        tq, _, _ = tq_of(i % owners, groups)
        reqs = json.dumps({"cpu": 1, "mem": 100})
        jobs.append(NewJob("true", tq, '{"cpu":1}', (QUEUE,), 1, 100, ete=60, requirements=reqs, name=f"real-{i}"))
    store.submit(jobs, ("real", {"name": "real"}))
    records = {}
    for i in range(n):
        [job] = store.match(PilotOffer("bench", QUEUE, cpu=1, mem=1000), 1)
        if i % 10 == 9:
            store.fail(job.id, 1, "bench", RunResult(exit_code=3, wall=42, reason="exit code 3"))
        else:
            store.complete(job.id, 1, "bench", RunResult(exit_code=0, wall=42))
        records[job.id] = store.client.hget(store.keys.jobs, job.id).decode()  # type: ignore[union-attr]
    return records


def entries(job: str, rec: dict[str, object], groups: int) -> tuple[str, str]:
    """The two ``endedby`` entries of an ended record (the form ``_lib.lua``'s ``history_entries`` writes)."""
    _, group, owner = str(rec["t"]).split(".")
    tail = f":{end_text(float(rec['te']))}:{job}:{rec['s']}"  # type: ignore[arg-type]
    return f"o:{owner}{tail}:{group}", f"g:{group}{tail}:{owner}"


def load(store: Store, n: int, template: dict[str, object], days: float, owners: int, groups: int) -> None:
    """``n`` ended jobs written with a pipeline, ids after the real ones, ends spread over ``days``."""
    rng = random.Random(1)
    k = store.keys
    first = int(store.client.incrby(k.seq, n)) - n + 1  # ids no submission will give
    now = time.time()
    for start in range(0, n, PIPE):
        pipe = store.client.pipeline(transaction=False)
        for i in range(start, min(n, start + PIPE)):
            job = str(first + i)
            tq, _, _ = tq_of(rng.randrange(owners), groups)
            end = now - days * 86400 * (n - i) / n
            failed = rng.random() < 0.1
            rec = {**template, "t": tq, "n": f"job-{i}", "te": round(end, 3), "st": round(end - 42, 3)}
            rec.update({"s": "failed", "x": 3, "why": "exit code 3"} if failed else {"s": "done", "x": 0})
            pipe.hset(k.jobs, job, json.dumps(rec, separators=(",", ":")))
            pipe.zadd(k.ended, {job: rec["te"]})
            pipe.zadd(k.endedby, dict.fromkeys(entries(job, rec, groups), 0))
        pipe.execute()


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
    parser.add_argument("-n", type=int, default=1_000_000, help="ended jobs")
    parser.add_argument("--days", type=float, default=2.0, help="their ends spread over the last this many days")
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--real", type=int, default=300, help="jobs ended through the scripts first")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            store = Store(redis.Redis.from_url(server.url, socket_timeout=600))
            real = end_for_real(store, args.real, args.owners, args.groups)
            written = {e.decode() for e in store.client.zrange(store.keys.endedby, 0, -1)}
            expected = {e for job, raw in real.items() for e in entries(job, json.loads(raw), args.groups)}
            if written != expected:
                raise SystemExit(f"the bench's entries differ from the scripts': {sorted(written ^ expected)[:4]}")
            template = json.loads(next(iter(real.values())))
            began = time.perf_counter()
            load(store, args.n, template, args.days, args.owners, args.groups)
            print(
                f"loaded {args.n} ended jobs over {args.days:g} days ({args.owners} owners, {args.groups} groups) "
                f"in {time.perf_counter() - began:.1f} s; Redis uses {store.client.info('memory')['used_memory_human']}"
            )
            env = {
                **os.environ,
                "PILOTFISH_REDIS_URL": server.url,
                "PILOTFISH_CATALOG": "",
                "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            }

            def run(*extra: str) -> None:
                done = subprocess.run(
                    [sys.executable, "-m", "matcher.cli", *extra], env=env, capture_output=True, text=True, timeout=600
                )
                if done.returncode != 0:
                    raise SystemExit(f"pilotfish {' '.join(extra)} failed: {done.stderr}")

            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2-core host shared with others)")
            floor = timed(lambda: run("--version"), args.runs)
            print(f"pilotfish --version (Python start and imports): {floor * 1000:.0f} ms")
            cases = [
                ["--since", "1d", "--owner", "alice"],
                ["--since", "1d", "--owner", "alice", "--limit", "5000"],
                ["--since", "1d", "--group", "grp03", "--state", "failed"],
                ["--since", "1d", "--owner", "alice", "--group", "grp00", "--state", "failed"],
                ["--since", "1d"],
                ["--since", "1d", "--state", "failed"],
            ]
            print(f"{'command':<78} {'CLI ms':>7} {'listing ms':>11} {'rows':>5}")
            for extra in cases:
                words = dict(zip(extra[::2], extra[1::2], strict=True))
                flt = HistoryFilter.of(
                    words["--since"],
                    owner=words.get("--owner"),
                    group=words.get("--group"),
                    states=[words["--state"]] if "--state" in words else [],
                    limit=int(words.get("--limit", 100)),
                )
                wall = timed(lambda extra=extra: run("history", *extra), args.runs)
                rows = len(list_history(store, flt).rows)
                inner = timed(lambda flt=flt: list_history(store, flt), args.runs)
                print(
                    f"{'pilotfish history ' + ' '.join(extra):<78} {wall * 1000:>7.0f} {inner * 1000:>11.1f} {rows:>5}"
                )
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
