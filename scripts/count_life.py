#!/usr/bin/env python3
"""Instructions redis-server executes per job for each report of a job's life: match, start, complete, fail.

What the job events (issue 28) cost where they are written: ``start``, ``complete`` and ``fail`` append to
the job's events (``_lib.lua``'s ``save``), ``match`` writes none. Counted by valgrind's callgrind as
``scripts/count_match.py`` does (instruction counts do not move with the load of a shared host); run it on
two trees (copy it into the other one) and compare. Each phase runs ``--jobs`` calls, one job each, after a
warm-up: ``submit`` (one job a call), ``match`` (one job), ``start``, then ``complete`` for half of them and
``fail`` for the other half.
Usage: python scripts/count_life.py [--jobs 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_match import Counted

from taskqueues.store import Store
from taskqueues.store.records import NewJob, PilotOffer, RunResult

QUEUE = "site/ce/q1"


def new_job(i: int) -> NewJob:
    tq = f"tq{i % 10}"
    return NewJob("true", tq, f'{{"class":"{tq}"}}', (QUEUE,), 1, 100, requirements='{"cpu":1,"mem":100}')


def phases(server: Counted, jobs: int) -> dict[str, float]:
    """Instructions per call of each phase."""
    server.client.flushall()
    store = Store(server.client, lease_seconds=3600)
    offer = PilotOffer("p1", QUEUE, 8, 100_000, 100_000)
    for i in range(50):  # warm-up: every script loaded and run once
        store.submit([new_job(i)])
        (job,) = store.match(offer)
        store.start(job.id, job.attempt, "p1")
        store.complete(job.id, job.attempt, "p1", RunResult())
    out: dict[str, float] = {}
    server.dump()
    for i in range(jobs):
        store.submit([new_job(i)])
    out["submit"] = server.dump() / jobs
    leased = [store.match(offer)[0] for _ in range(jobs)]
    out["match"] = server.dump() / jobs
    for job in leased:
        store.start(job.id, job.attempt, "p1")
    out["start"] = server.dump() / jobs
    half = jobs // 2
    for job in leased[:half]:
        store.complete(job.id, job.attempt, "p1", RunResult())
    out["complete"] = server.dump() / half
    for job in leased[half:]:
        store.fail(job.id, job.attempt, "p1", RunResult(exit_code=1))
    out["fail"] = server.dump() / (jobs - half)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install --no-install-recommends valgrind)")
    print(f"load average {os.getloadavg()[0]:.2f} (instruction counts do not depend on it)")
    with tempfile.TemporaryDirectory() as tmp:
        server = Counted(Path(tmp))
        try:
            counts = phases(server, args.jobs)
        finally:
            server.stop()
    print(f"{'phase':>9} {'instr/call':>11}")
    for phase, n in counts.items():
        print(f"{phase:>9} {n / 1000:>10.0f}k")


if __name__ == "__main__":
    main()
