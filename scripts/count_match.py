#!/usr/bin/env python3
"""Instructions redis-server executes per match call, counted by valgrind's callgrind.

Timings on these shared 2-core machines move by a factor of two from one minute to the next; instruction
counts do not (two runs agree within 1%), so this is how two versions of the match script are compared:
run it on each. Kernel time (the socket reads and writes) is not counted. Needs valgrind
(``apt-get install --no-install-recommends valgrind``).

Each row is ``<task queues>:<kind>[@<waiting>]``: a fresh store with 20,000 waiting jobs (or ``<waiting>``,
submitted uncounted) in that many task queues (the jobs and pilots of bench_match.py), 400 calls to warm up,
then ``--calls`` calls counted. Kinds: ``fill``
asks for as many jobs as the pilot has free cores, ``one`` for one job, ``trivial`` is the ceiling's
``return 1``. A kind with ``+r`` (``fill+r``, ``one+r``) has its pilots say what they run, as real pilots
do (bench_match.pilot_asks with ``running``: reservations on). A kind with ``+s`` (``fill+s``) has a shares
policy stored (``POLICY``: four groups, shares 1 to 4) and its jobs spread over those groups' accounts (the
task queues are as many, each of one group: bench_match.tq_id with ``groups``): the fair-share match. A kind
with ``+f`` (``fill+f``) is the policy's floor: the jobs of ``+s``, no policy stored, and after each (policy-free)
match a call of ``scripts/floor_policy.lua``, the fewest commands a match with a policy must add (the group
states read, one fair write, the index by group); less a ``trivial`` row's count (the second call's own cost),
it is printed as a ratio to the ``fill`` row.
Prints the instructions per call and per job matched, and each row's ratio to the stored baseline
(``scripts/match_baseline.json``) when it holds that row.
The baseline's rows are counted in its own order on one server (a row's count depends a little on the rows
before it), so ``--rows`` and ``--calls`` must be left alone for the ratios to hold; ``--write-baseline``
stores this run's figures as the new baseline (do it in the commit that makes the match cheaper or dearer
on purpose, and say why). bench_match.py and bench_e2e.py print :func:`guard`'s line at their end.
Usage: python scripts/count_match.py [--rows 10:fill,1000:fill,1000:one,1000:fill+r,1000:fill+s,10:trivial]
       [--calls 300]
       [--write-baseline] [--gc]
"""

from __future__ import annotations

import argparse
import json
import os
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

from bench_match import Stock, load_apart, pilot_asks, tq_id, trivial_call

from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.functions import Function
from taskqueues.store.keys import account_of
from taskqueues.store.redis_server import find_redis_server, free_port
from taskqueues.store.scripts import prelude

#: ``--gc``'s function: a full collection of the Lua state the store's functions run in.
GC_LIBRARY = (
    "#!lua name=pfcount\nredis.register_function('pfcount_gc', function() collectgarbage('collect') return 1 end)"
)


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
                # the server's timer runs hz times a second, and what it does is counted with the calls: at
                # the default 10 a loaded host, making the calls slower, made a 1000:fill call look 10% dearer
                "--hz",
                "1",
                "--dynamic-hz",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # redis-py 8 waits 5 s for a reply by default: a 1000-job submit under callgrind on a loaded host takes more
        self.client = redis.Redis(port=self.port, socket_timeout=600)
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

    def instrument(self, on: bool) -> None:
        """Count from now on (``on``), or run uncounted and several times faster (filling a large row)."""
        subprocess.run(
            ["callgrind_control", "--instr=" + ("on" if on else "off"), str(self.proc.pid)],
            capture_output=True,
            check=True,
        )

    def collect(self) -> None:
        """A full cycle of the Lua garbage collector of the functions (run through a library of its own, which the
        store's loader leaves alone): uncounted calls made before it, the counted ones start a cycle afresh."""
        self.client.function_load(GC_LIBRARY, replace=True)
        self.client.fcall("pfcount_gc", 0)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


#: Waiting jobs of a row without ``@<waiting>``.
WAITING = 20_000
#: The shares of the ``+s`` rows: four groups, none of them the default one.
POLICY = Policy(shares={"g0": 1.0, "g1": 2.0, "g2": 3.0, "g3": 4.0})


def floor_call(client: redis.Redis) -> Function:
    """``scripts/floor_policy.lua``, loaded apart (with the constants it names in front, as the store's scripts)."""
    text = (Path(__file__).resolve().parent / "floor_policy.lua").read_text()
    return load_apart(client, "bench_policy_floor", "bench_policy_floor", prelude(text) + text)


def row(server: Counted, n_tqs: int, kind: str, calls: int, gc: bool = False) -> tuple[float, float]:
    """Instructions per call and jobs matched per call; ``kind`` may end with ``@<waiting jobs>`` (20,000 else).
    With ``gc``, the Lua garbage is collected before the counted calls (:meth:`Counted.collect`)."""
    kind, _, size = kind.partition("@")
    waiting = int(size) if size else WAITING
    client = server.client
    client.flushall()
    shares, floor = "+s" in kind, "+f" in kind
    store = Store(client, lease_seconds=3600)
    if shares:
        store.shares.publish(POLICY)
    if waiting != WAITING:
        server.instrument(False)  # a large fill is not what is counted: several times faster uncounted
    Stock(store, n_tqs, groups=len(POLICY.shares) if shares or floor else 0).top_up(waiting)
    if waiting != WAITING:
        server.instrument(True)
    asks = pilot_asks(1, kind.startswith("fill"), "+r" in kind)
    trivial = trivial_call(client)
    policy_floor = floor_call(client) if floor else None
    last = [""]

    def call(i: int) -> int:
        if kind == "trivial":
            trivial(())
            return 0
        offer, want = asks[i % len(asks)]
        jobs = store.match(offer, want)
        if policy_floor is not None:
            last[0] = jobs[0].tq_id if jobs else last[0] or tq_id(0, len(POLICY.shares))
            group, owner, _ = account_of(last[0])
            cores = jobs[0].requirements.get("cpu", 1) if jobs else 0
            base = store.keys.base + ":"
            policy_floor(args=[base, offer.queue, time.time(), group, owner, cores, last[0], 1])
        return len(jobs)

    for i in range(400):
        call(i)
    if gc:
        server.collect()
    server.dump()
    got = sum(call(i) for i in range(calls))
    return server.dump() / calls, got / calls


BASELINE = Path(__file__).resolve().parent / "match_baseline.json"
DEFAULT_ROWS = "10:fill,1000:fill,1000:one,1000:fill+r,1000:one+r,10:fill+s,100:fill+s,1000:fill+s,10:fill+s@200000"
DEFAULT_CALLS = 300


def baseline(path: Path = BASELINE) -> dict[str, float]:
    """The stored instructions per call, by row (``"1000:fill"``); empty when the file is missing."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {spec: float(v) for spec, v in data["instructions_per_call"].items()}


def ratio_text(spec: str, per_call: float, stored: dict[str, float]) -> str:
    """``1.03x`` of the baseline's figure for ``spec``, or ``-`` when the baseline has none."""
    return f"{per_call / stored[spec]:.2f}x" if stored.get(spec) else "-"


def measure(rows: str, calls: int, show: bool = False, gc: bool = False) -> dict[str, tuple[float, float]]:
    """Instructions and jobs per call of each row, counted in order on one server under callgrind."""
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed: apt-get install --no-install-recommends valgrind")
    stored = baseline()
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = Counted(Path(tmp))
        try:
            if show:
                print(f"{'tqs':>5} {'kind':>7} {'jobs/call':>9} {'instr/call':>10} {'instr/job':>10} {'baseline':>8}")
            for spec in rows.split(","):
                n_tqs, kind = spec.split(":")
                per_call, jobs = row(server, int(n_tqs), kind, calls, gc)
                out[spec] = (per_call, jobs)
                if show:
                    per_job = f"{per_call / jobs / 1000:>9,.0f}k" if jobs else f"{'-':>10}"
                    print(
                        f"{n_tqs:>5} {kind:>7} {jobs:>9.2f} {per_call / 1000:>9,.0f}k {per_job} "
                        f"{ratio_text(spec, per_call, stored):>8}",
                        flush=True,
                    )
        finally:
            server.stop()
    if show:
        for line in policy_ratios(out):
            print(line)
    return out


def policy_ratios(counted: dict[str, tuple[float, float]]) -> list[str]:
    """One line per ``+s`` row whose policy-free ``fill`` row of as many task queues was counted: the cost of the
    shares policy, as a ratio (issue 31's target: at most 1.3, the same at every size)."""
    lines = []
    for spec, (per_call, _) in counted.items():
        n_tqs, kind = spec.split(":")
        free = counted.get(f"{n_tqs}:fill")
        if kind.startswith("fill+s") and free:
            lines.append(f"policy cost {spec}: {per_call / free[0]:.2f}x of {n_tqs}:fill")
        trivial = counted.get(f"{n_tqs}:trivial")
        if kind.startswith("fill+f") and free and trivial:
            floor = per_call - trivial[0]
            lines.append(
                f"policy floor {spec}: {floor / free[0]:.2f}x of {n_tqs}:fill ({floor / 1000:,.0f}k: {spec} less "
                f"{n_tqs}:trivial, the floor's call itself)"
            )
    return lines


def guard() -> str:
    """One line: the match's instructions per call now, each row against the stored baseline (the rows and
    calls of the baseline, so the ratio holds). Free of this host's load: a ratio above 1.00 is the match
    grown dearer. Takes a minute or more (callgrind); says why when it cannot count."""
    stored = baseline()
    if not stored:
        return f"match instructions: no baseline at {BASELINE}"
    if not shutil.which("valgrind"):
        return "match instructions: not counted (valgrind is not installed)"
    counted = measure(",".join(stored), DEFAULT_CALLS)
    cells = [f"{spec} {per / 1000:,.0f}k ({ratio_text(spec, per, stored)})" for spec, (per, _) in counted.items()]
    return "match instructions per call vs baseline (scripts/count_match.py): " + ", ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--write-baseline", action="store_true", help="store this run's figures as the baseline")
    parser.add_argument(
        "--gc",
        action="store_true",
        help="collect the server's Lua garbage before each row's counted calls (steadier: where a full cycle falls "
        "in the counted calls moved 1000:one by up to 14k); the baseline is counted without",
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (instruction counts do not depend on it)")
    if args.gc and args.write_baseline:
        parser.error("--gc: the baseline is counted without it")
    counted = measure(args.rows, args.calls, show=True, gc=args.gc)
    if args.write_baseline:
        rows = {spec: round(per) for spec, (per, _) in counted.items() if not spec.endswith(":trivial")}
        note = "scripts/count_match.py --write-baseline; rows counted in this order on one server"
        data = {"note": note, "calls": args.calls, "instructions_per_call": rows}
        BASELINE.write_text(json.dumps(data, indent=2) + "\n")
        print(f"baseline written: {BASELINE}")


if __name__ == "__main__":
    main()
