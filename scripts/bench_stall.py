#!/usr/bin/env python3
"""Stall benchmark: the longest time jobs wait while there is room for them and nothing starts.

One ``pilotfish run`` (:func:`matcher.cli.run.run_workflow`, in this process: the director, the reaper, real
``pilotfish pilot`` processes of the local backend) on a private ``redis-server``, with a catalog of one
queue of ``--pilots`` 1-core pilots at most (``max_running``; the shape's wall is 2 h, ``wall_granularity``
``--granularity``) and a workflow of ``--jobs`` independent jobs of ``--payload-seconds`` that each ask for
``wall = --job-wall``. Pilots are sized by the director: the wall their planned jobs need plus one
granularity step, or the queue's ``pilot_lifetime`` (``--lifetime``) when it is longer.

**The stall** is read from the store's records after the run: sweeping job starts and ends in time order,
the longest stretch during which some job was waiting, fewer than ``--pilots`` jobs ran (free room) and no
job started. **The bound** is one director interval plus pilot start-up, the latter measured in the same
run as the first job's start after submission (the director's first cycle runs at once, so that is a pilot
start-up and a match). Exit status 0 when the stall is within the bound.

Pilots sized to a 10-minute job's wall plus one step (``--lifetime ""``) take work for their first ~60 s
only (their time left then falls below a job's wall): they idle out while jobs wait, and the queue's
``max_running`` keeps new pilots back until they have gone. With a lifetime, or when the director releases
those pilots at once (their time left is too short for any waiting job), the stall is gone.

Usage: ``python scripts/bench_stall.py [--jobs 2000] [--pilots 4] [--payload-seconds 0.1] [--job-wall 10m]
[--lifetime 2h] [--idle-timeout 30] [--stop-margin 60] [--director-interval 2] [--granularity 60]``
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from matcher.cli.run import run_workflow  # noqa: E402
from taskqueues.context import Context  # noqa: E402
from taskqueues.settings import Settings  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

CATALOG = """
[sites.Stall.ces.host]
[sites.Stall.ces.host.batch_options]
capacity = {{ cpu = {pilots} }}
grace = 2
[sites.Stall.ces.host.queues.q]
n_max_queued = {pilots}
max_running = {pilots}
wall_granularity = {granularity}
{lifetime}shapes = [{{ name = "c1", cpu = 1, mem = "300M", wall = "2h", cost = 1.0 }}]
"""


@dataclass
class Stall:
    """The longest stretch with a job waiting, free room and no start: its length (s) and when it began
    (seconds after the first submission)."""

    seconds: float
    at: float


def longest_stall(runs: Iterable[tuple[float, float, float]], room: int) -> Stall:
    """From each job's (submitted, started, ended) times: the longest stretch during which a job was
    waiting (submitted, not started), fewer than ``room`` jobs ran, and no job started."""
    events: list[tuple[float, int]] = []  # (time, kind): 0 submitted, 1 ended, 2 started (ends free room first)
    for submitted, started, ended in runs:
        events += [(submitted, 0), (started, 2), (ended, 1)]
    events.sort()
    if not events:
        return Stall(0.0, 0.0)
    origin = events[0][0]
    waiting = running = 0
    since: float | None = None  # when the current stretch (waiting, room, no start) began
    best = Stall(0.0, 0.0)
    for at, kind in events:
        if kind == 0:
            waiting += 1
        elif kind == 1:
            running -= 1
        else:
            if since is not None and at - since > best.seconds:
                best = Stall(at - since, since - origin)
            since = None
            waiting -= 1
            running += 1
        if not (waiting > 0 and running < room):
            since = None
        elif since is None:
            since = at
    return best


def workflow_text(jobs: int, payload: float, wall: str) -> str:
    head = f'name = "stall"\n[rules.short]\ncommand = "sleep {payload:g}"\n'
    head += f'requirements = {{ cpu = 1, mem = "50M", wall = "{wall}" }}\nete = "1s"\n'
    return head + "".join(f'[[jobs]]\nname = "j{n}"\nrule = "short"\n' for n in range(jobs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--pilots", type=int, default=4, help="1-core pilots at most at once (max_running)")
    parser.add_argument("--payload-seconds", type=float, default=0.1)
    parser.add_argument("--job-wall", default="10m", help="the wall each job asks for")
    parser.add_argument("--lifetime", default="", help='the queue\'s pilot_lifetime ("" = not set)')
    parser.add_argument("--idle-timeout", type=float, default=30.0)
    parser.add_argument("--stop-margin", type=float, default=60.0)
    parser.add_argument("--director-interval", type=float, default=2.0)
    parser.add_argument("--granularity", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pilotfish-stall-") as tmp:
        base = Path(tmp)
        server = RedisServer(base / "redis").start()
        try:
            lifetime = f'pilot_lifetime = "{args.lifetime}"\n' if args.lifetime else ""
            catalog = base / "catalog.toml"
            catalog.write_text(CATALOG.format(pilots=args.pilots, granularity=args.granularity, lifetime=lifetime))
            workflow = base / "stall.toml"
            workflow.write_text(workflow_text(args.jobs, args.payload_seconds, args.job_wall))
            settings = Settings(
                redis_url=server.url,
                pilot_redis_url=server.url,
                catalog=str(catalog),
                state_dir=str(base / "state"),
                pilot_idle_timeout=args.idle_timeout,
                pilot_stop_margin=args.stop_margin,
                pilot_events=False,
                director_interval=args.director_interval,
            )
            ctx = Context(settings)
            began = time.monotonic()
            summary = run_workflow(
                ctx,
                workflow,
                out=io.StringIO(),
                director_interval=args.director_interval,
                timeout=args.timeout,
            )
            took = time.monotonic() - began
            jobs = ctx.store.request_jobs(summary.request)
            runs = [(j.submitted, j.started, j.ended) for j in jobs if j.started is not None and j.ended is not None]
        finally:
            server.stop()
    load = os.getloadavg()[0]
    stall = longest_stall(runs, args.pilots)
    first_start = min(s for _, s, _ in runs) - min(j.submitted for j in jobs) if runs else float("inf")
    bound = args.director_interval + first_start
    ok = summary.ok and len(runs) == args.jobs and stall.seconds <= bound
    print(
        f"python scripts/bench_stall.py --jobs {args.jobs} --pilots {args.pilots} --payload-seconds "
        f"{args.payload_seconds:g} --job-wall {args.job_wall} --lifetime {args.lifetime!r} --idle-timeout "
        f"{args.idle_timeout:g} --stop-margin {args.stop_margin:g} --director-interval {args.director_interval:g}"
    )
    print(
        f"  run: {len(runs)} of {args.jobs} jobs done in {took:.1f} s, {summary.pilots} pilots "
        f"(load average {load:.1f})"
    )
    print(f"  longest stall (jobs waiting, free room, no start): {stall.seconds:.1f} s, at {stall.at:.1f} s")
    print(
        f"  bound: director interval {args.director_interval:g} s + pilot start-up {first_start:.1f} s = {bound:.1f} s"
        f"  {'ok' if ok else 'MISSED'}"
    )
    print(json.dumps({"ok": ok, "stall": round(stall.seconds, 2), "bound": round(bound, 2), "load": round(load, 1)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
