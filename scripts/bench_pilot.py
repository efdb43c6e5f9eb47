"""Benchmark the pilot's fill loop: one 2-core pilot, 2,000 tiny payloads in one task queue, real redis-server.

Two runs, each a real ``python -m pilot.agent.command`` process against a private redis-server:

1. ``true`` x N: payloads per second (N over the span from the first payload's start to the last one's
   end, as the store recorded them) and the pilot's own peak RSS (psutil, the pilot process only, sampled
   every 10 ms; its payloads are separate processes and not counted).
2. The gap: each payload stamps itself, ``exec bash -c 'echo "s $EPOCHREALTIME ..." >> F; echo "e
   $EPOCHREALTIME ..." >> F'`` (``$EPOCHREALTIME`` is a bash builtin: no fork, no clock program in the
   measurement). With 2 cores, each start after the first two takes the core freed by the earliest
   end not yet taken; the gap is that start stamp minus that end stamp. It is what a core loses between
   two payloads: the end of one payload's process, the pilot noticing (pidfd), ``wait4``, one exchange
   with the store (the completion and the match in one round trip), the payload's slot ($JOBFEATURES,
   $TMPDIR), the spawn, and the new payload's ``sh`` exec'ing ``bash``. So it is an upper bound of the
   pilot's own share.

Targets: median gap <= 20 ms, pilot RSS <= 80 MB.
The pilot runs its payloads in the sandbox ``--sandbox`` names (bwrap, the default, or none); ``both`` runs
each in turn on the same server and prints the ratios (the sandbox's cost: one more exec and its
namespaces per payload).
Usage: ``python scripts/bench_pilot.py [-n 2000] [--work SECONDS] [--events] [--sandbox bwrap|none|both]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taskqueues.store import Store  # noqa: E402
from taskqueues.store.records import NewJob  # noqa: E402
from taskqueues.store.redis_server import RedisServer  # noqa: E402

QUEUE = "bench/ce/q"
_FOREIGN = ("SLURM_", "SGE_", "JOB_ID", "NSLOTS", "MACHINEFEATURES", "JOBFEATURES", "JOBSTATUS")


def submit(store: Store, n: int, command: str, writable: str = "") -> list[str]:
    """``n`` jobs of ``command``; ``writable``: a directory their sandbox must let them write (sandbox_rw)."""
    reqs = json.dumps({"cpu": 1, "mem": 10, "tmp": 0, **({"sandbox_rw": writable} if writable else {})})
    jobs = [
        NewJob(
            command=command,
            tq_id="bench",
            tq_def=json.dumps({"class": "bench"}),
            queues=(QUEUE,),
            cpu=1,
            mem=10,
            score=float(i),
            requirements=reqs,
        )
        for i in range(n)
    ]
    ids: list[str] = []
    for start in range(0, n, 500):
        ids += store.submit(jobs[start : start + 500])
    return ids


def run_pilot(url: str, workdir: Path, extra: list[str]) -> tuple[float, int, str]:
    """Run one pilot to its idle exit; returns (wall seconds, its peak RSS in bytes, its stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(ROOT)
    env["JOBSTATUS"] = str(workdir / "jobstatus")
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pilot.agent.command",
            "--redis-url",
            url,
            "--queue",
            QUEUE,
            "--cores",
            "2",
            "--idle-timeout",
            "1",
            "--workdir",
            str(workdir / "work"),
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        me = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak = max(peak, me.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, err = proc.communicate()
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"pilot failed ({proc.returncode}):\n{err}")
    return time.monotonic() - started, peak, err


def throughput(store: Store, ids: list[str]) -> tuple[float, float]:
    """(payloads/s over first start .. last end, span seconds) from the store's records; all must be done."""
    jobs = store.jobs(ids)
    bad = [j.id for j in jobs if j.state != "done"]
    if bad:
        raise SystemExit(f"{len(bad)} jobs not done, e.g. {store.job(bad[0])}")
    span = max(float(j.ended or 0) for j in jobs) - min(float(j.started or 0) for j in jobs)
    return len(jobs) / span, span


def gaps(stamps: Path, cores: int) -> list[float]:
    """Seconds from each payload end to the start that took its core (see the module docstring)."""
    events = []
    for line in stamps.read_text().splitlines():
        kind, text = line.split()[:2]
        events.append((float(text), kind))
    events.sort(key=lambda e: (e[0], e[1] != "e"))
    free: list[float] = []
    out: list[float] = []
    seen_starts = 0
    for stamp, kind in events:
        if kind == "e":
            free.append(stamp)
        else:
            seen_starts += 1
            if seen_starts > cores:
                if not free:
                    raise SystemExit("a payload started with no core free: the pilot overcommitted")
                out.append(stamp - free.pop(0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="payloads per run")
    parser.add_argument(
        "--work",
        type=float,
        default=0.0,
        help="seconds each stamped payload of run 2 sleeps between its stamps (0: none)",
    )
    parser.add_argument("--events", action="store_true", help="run the pilots with --events (Celery observer)")
    parser.add_argument(
        "--sandbox",
        choices=("bwrap", "none", "both"),
        default="bwrap",
        help="the pilots' payload sandbox; both: each in turn, and their ratios",
    )
    args = parser.parse_args()
    kinds = ["none", "bwrap"] if args.sandbox == "both" else [args.sandbox]
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pilot-") as tmp:
        base = Path(tmp)
        server = RedisServer(base / "redis").start()
        try:
            store = Store.from_url(server.url)
            for kind in kinds:
                figures[kind] = bench(store, server.url, base / kind, args.n, args.work, args.events, kind)
        finally:
            server.stop()
    if len(figures) == 2:
        (rate_none, gap_none), (rate_bwrap, gap_bwrap) = figures["none"], figures["bwrap"]
        print(
            f"bwrap / none: payloads/s x{rate_bwrap / rate_none:.2f}, median gap x{gap_bwrap / gap_none:.2f} "
            f"({(gap_bwrap - gap_none) * 1000:+.1f} ms); load average {os.getloadavg()[0]:.2f}"
        )


def bench(store: Store, url: str, base: Path, n: int, work_s: float, events: bool, kind: str) -> tuple[float, float]:
    """Both runs with the payload sandbox ``kind``; returns (run 1 payloads/s, run 2 median gap seconds)."""
    base.mkdir()
    extra = [*(["--events"] if events else []), "--payload-sandbox", kind, "--payload-shared-paths", str(base)]
    ids = submit(store, n, "true")
    wall, rss, _ = run_pilot(url, base / "a", extra)
    rate, span = throughput(store, ids)
    print(
        f"[{kind}] run 1: {n} x true: {rate:.0f} payloads/s ({span:.2f} s first start to last end, "
        f"{wall:.2f} s with start-up and the 1 s idle exit); pilot peak RSS {rss / 1e6:.1f} MB; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    shared = base / "shared"  # a sandboxed payload may write only there (sandbox_rw)
    shared.mkdir()
    stamps = shared / "stamps"
    work = f"sleep {work_s}; " if work_s > 0 else ""
    command = f'exec bash -c \'echo "s $EPOCHREALTIME" >> {stamps}; {work}echo "e $EPOCHREALTIME" >> {stamps}\''
    ids = submit(store, n, command, str(shared))
    _, rss2, _ = run_pilot(url, base / "b", extra)
    rate2, _ = throughput(store, ids)
    measured = sorted(gaps(stamps, 2))
    p95 = measured[int(0.95 * (len(measured) - 1))]
    median = statistics.median(measured)
    label = f"stamped bash{f' sleeping {work_s:g} s' if work else ''}"
    print(
        f"[{kind}] run 2: {n} x {label}: {rate2:.0f} payloads/s; gap end -> next start over "
        f"{len(measured)} starts: median {median * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {measured[-1] * 1000:.1f} ms; pilot peak RSS {rss2 / 1e6:.1f} MB; load average {os.getloadavg()[0]:.2f}"
    )
    ok = median <= 0.020 and max(rss, rss2) <= 80e6
    print(f"[{kind}] targets (median gap <= 20 ms, pilot RSS <= 80 MB): {'met' if ok else 'NOT met'}")
    return rate, median


if __name__ == "__main__":
    main()
