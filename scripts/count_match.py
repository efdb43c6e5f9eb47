#!/usr/bin/env python3
"""Instructions redis-server executes per match call, counted by valgrind's callgrind.

Timings on these shared 2-core machines move by a factor of two from one minute to the next; instruction
counts do not (two runs agree within 1%), so this is how two versions of the match script are compared:
run it on each. Kernel time (the socket reads and writes) is not counted. Needs valgrind
(``apt-get install --no-install-recommends valgrind``).

Each row is ``<task queues>:<kind>``: a fresh store with 20,000 waiting jobs in that many task queues (the
jobs and pilots of bench_match.py), 400 calls to warm up, then ``--calls`` calls counted. Kinds: ``fill``
asks for as many jobs as the pilot has free cores, ``one`` for one job, ``trivial`` is the ceiling's
``return 1``. A kind ending in ``+r`` (``fill+r``, ``one+r``) has its pilots say what they run, as real pilots
do (bench_match.pilot_asks with ``running``: reservations on). Prints the instructions per call and per job
matched.
Usage: python scripts/count_match.py [--rows 10:fill,1000:fill,1000:one,1000:fill+r,10:trivial] [--calls 300]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_match import Stock, pilot_asks, trivial_call

from taskqueues.store import Store
from taskqueues.store.redis_server import find_redis_server, free_port


class Counted:
    """A redis-server under callgrind; :meth:`dump` returns the instructions run since the last dump."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.out = tmp / "callgrind.out"
        self.dumps = 0
        self.proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.out}",
                find_redis_server(),
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(tmp),
                # under valgrind a 1000-job submit can pass the 5 s after which the server answers BUSY
                "--busy-reply-threshold",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(port=self.port)
        for _ in range(300):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise SystemExit("redis-server under valgrind did not answer in 30 s")

    def dump(self) -> int:
        subprocess.run(["callgrind_control", "--dump", str(self.proc.pid)], capture_output=True, check=True)
        self.dumps += 1
        part = Path(f"{self.out}.{self.dumps}")
        for _ in range(100):
            text = part.read_text() if part.exists() else ""
            found = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if found:
                return int(found.group(1))
            time.sleep(0.1)
        raise SystemExit(f"callgrind wrote no {part}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def row(server: Counted, n_tqs: int, kind: str, calls: int) -> tuple[float, float]:
    """Instructions per call and jobs matched per call."""
    client = server.client
    client.flushall()
    Stock(Store(client, lease_seconds=3600), n_tqs).top_up(20_000)
    store = Store(client, lease_seconds=3600)
    asks = pilot_asks(1, kind.startswith("fill"), kind.endswith("+r"))
    trivial = trivial_call(client)

    def call(i: int) -> int:
        if kind == "trivial":
            trivial(())
            return 0
        return len(store.match(*asks[i % len(asks)]))

    for i in range(400):
        call(i)
    server.dump()
    got = sum(call(i) for i in range(calls))
    return server.dump() / calls, got / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10:fill,1000:fill,1000:one,1000:fill+r,1000:one+r,10:trivial")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed: apt-get install --no-install-recommends valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        server = Counted(Path(tmp))
        try:
            print(f"{'tqs':>5} {'kind':>7} {'jobs/call':>9} {'instr/call':>10} {'instr/job':>10}")
            for spec in args.rows.split(","):
                n_tqs, kind = spec.split(":")
                per_call, jobs = row(server, int(n_tqs), kind, args.calls)
                per_job = f"{per_call / jobs / 1000:>9,.0f}k" if jobs else f"{'-':>10}"
                print(f"{n_tqs:>5} {kind:>7} {jobs:>9.2f} {per_call / 1000:>9,.0f}k {per_job}", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
