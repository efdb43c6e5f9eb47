#!/usr/bin/env python3
"""Instructions redis-server executes per job for each report of a job's life: match, start, complete, fail.

What the job events (issue 28) cost where they are written: ``start``, ``complete`` and ``fail`` append to
the job's events (``_lib.lua``'s ``save``), ``match`` writes none. Counted by valgrind's callgrind as
``scripts/count_match.py`` does (instruction counts do not move with the load of a shared host); run it on
two trees (copy it into the other one) and compare. Each phase runs ``--jobs`` calls, one job each, after a
warm-up: ``submit`` (one job a call), ``match`` (one job), ``start``, then ``complete`` for half of them and
``fail`` for the other half.

Then what one job costs **as scripts/bench_e2e.py sends it** (``--batch`` jobs of ``true``, every figure per
job): ``submit/batch``, the jobs submitted by the matcher's Submitter (one request of ``--batch`` jobs, one
``submit`` call); ``exchange``, a pilot's exchange (``Store.exchange``) carrying the completion of the job it ran,
whose start travels inside it (the pilot reports a start on its own only after its payload ran 50 ms:
pilot/agent/reports.py), and the match of the next job; ``exchange, start apart``, the same exchange with the
start as a report of its own beside the completion (the two reports of a job that started and ended between
two exchanges, which the pilot never sends: it puts the start inside the completion). ``per job`` adds the
submission and the exchange.
Usage: python scripts/count_life.py [--jobs 300] [--batch 1000]
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

from matcher.submission import JobSpec, Submitter
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import Job, NewJob, PilotOffer, RunResult

QUEUE = "site/ce/q1"
#: The catalog queue of scripts/bench_e2e.py's pilots, and what a pilot there reports of one `true`.
BENCH_QUEUE = "local/localhost/local"
RESULT = RunResult(exit_code=0, wall=0.002, cpu_time=0.001, peak_mem=1.5)
WARM = 200


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


def bench_phases(server: Counted, state_dir: Path, jobs: int, batch: int) -> dict[str, float]:
    """Instructions per job of the benchmark's calls: the submission in batches, then one exchange per job."""
    server.client.flushall()
    context = Context(Settings(redis_url=f"redis://127.0.0.1:{server.port}", state_dir=str(state_dir)))
    store, submitter = context.store, Submitter.of(context)
    offer = PilotOffer("bench-pilot", BENCH_QUEUE, 1, 1000, 1000)

    def submit(n: int, name: str) -> None:
        for first in range(0, n, batch):
            specs = [JobSpec(name=f"true-{i}", command="true") for i in range(first, min(n, first + batch))]
            submitter.submit(specs, name=f"{name}-{first // batch}")

    def run(job: Job, n: int, *, apart: bool) -> Job | None:
        """Run n jobs from ``job`` on, one exchange each; the job the last exchange matched."""
        for _ in range(n):
            started = store.clock()
            if apart:
                ex = store.exchange(
                    offer.pilot,
                    starts=[(job.id, job.attempt, started)],
                    completions=[(job.id, job.attempt, RESULT)],
                    offer=offer,
                )
            else:
                result = RunResult(RESULT.exit_code, RESULT.wall, RESULT.cpu_time, RESULT.peak_mem, started=started)
                ex = store.exchange(offer.pilot, completions=[(job.id, job.attempt, result)], offer=offer)
            if ex.refused:
                raise SystemExit(f"the store refused a report: {ex.refused}")
            if not ex.matched:
                return None
            job = ex.matched[0]
        return job

    # Every script loaded, and the indexes of ended jobs past Redis's small encoding (128 entries), as after the
    # first jobs of a benchmark: an insert into a small sorted set rewrites it, which would count in the first phase.
    submit(WARM, "warm-up")
    (job,) = store.match(offer)
    run(job, WARM - 1, apart=False)
    out: dict[str, float] = {}
    server.dump()
    total = -(-(2 * jobs + 1) // batch) * batch  # whole batches, enough for both exchanges' jobs
    submit(total, "bench")
    out["submit/batch"] = server.dump() / total
    (job,) = store.match(offer)
    server.dump()
    for label, apart in (("exchange", False), ("exchange, start apart", True)):
        last = run(job, jobs, apart=apart)
        out[label] = server.dump() / jobs
        if last is None:
            raise SystemExit("the benchmark's jobs ran out")
        job = last
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1000, help="jobs a submission carries in the benchmark's part")
    args = parser.parse_args()
    if args.jobs < 2 or args.batch < 1:
        parser.error("--jobs must be at least 2 and --batch positive")
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install --no-install-recommends valgrind)")
    print(f"load average {os.getloadavg()[0]:.2f} (instruction counts do not depend on it)")
    with tempfile.TemporaryDirectory() as tmp:
        server = Counted(Path(tmp))
        try:
            counts = phases(server, args.jobs)
            bench = bench_phases(server, Path(tmp) / "state", args.jobs, args.batch)
        finally:
            server.stop()
    print(f"{'phase':>9} {'instr/call':>11}")
    for phase, n in counts.items():
        print(f"{phase:>9} {n / 1000:>10.0f}k")
    print(f"per job as scripts/bench_e2e.py sends it (submissions of {args.batch}):")
    print(f"{'call':>22} {'instr/job':>10}")
    for call, n in bench.items():
        print(f"{call:>22} {n / 1000:>9.0f}k")
    for label, call in (("per job", "exchange"), ("per job, start apart", "exchange, start apart")):
        print(f"{label:>22} {(bench['submit/batch'] + bench[call]) / 1000:>9.0f}k")


if __name__ == "__main__":
    main()
