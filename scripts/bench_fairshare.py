#!/usr/bin/env python3
"""Fair share on a simulated clock: groups served in proportion to their shares, late workflows not starved.

    python scripts/bench_fairshare.py [--flood N] [--pilots P] [--cores C] [--seed S] [--halflife H] [--catchup X]
                                      [--only flood|staggered] [--owners-in-group]

The simulation of ``bench_schedule.py`` (a simulated clock, the REAL store and match on a REAL redis-server
started on a free port, the real Submitter), with requests that arrive over time, each with an owner and a
group, and a shares policy stored (:mod:`taskqueues.store.fairshare`). Only time is simulated.

Scenario "flood": three groups with shares 50/30/20. ``prod`` submits ``--flood`` short independent jobs at
t = 0 (log-normal run times, mean 60 s; in requests of 5,000); ``ana`` submits a CyberShake-shaped workflow at
t = 1,800 s and ``user`` a wide layered workflow at t = 2,400 s. Printed:

* each group's part of the core-seconds used, per window of 10 x the mean job length, against its share;
  the target (every group within +-5 points of its share over every window once all are busy) is checked
  on the windows where every group had a ready job waiting the whole time (a group that cannot use its
  share leaves it to the others: that is not unfairness);
* each late workflow's completion time against its makespan alone on the same pilots; target: within
  1.5 x solo x (1 / its group's share of the shares);
* per-request stretch (completion / the request's own lower bound alone), mean and max.

Scenario "staggered": four requests of four different owners in four groups of equal shares, arriving at
0, 600, 1,200 and 1,500 s (a Montage, an Epigenomics, a CyberShake and a small 271-second chain: the shapes
this tree's workloads.py generates), run once without a policy (today) and once with equal shares (and the
``--catchup`` cap); with ``--owners-in-group`` the four owners share one group with equal owner shares inside
it. Targets (issue 29): no request's stretch above 4 with shares, and the makespan within 1.05 x today's.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_schedule import CATALOG, PILOT_MEM_MB, QUEUE, T0, SimClock, memory_of
from workloads import Request, Task, cybershake, epigenomics, lower_bound, montage, random_layered

from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.records import PilotOffer, RunResult
from taskqueues.store.redis_server import RedisServer

SHARE_TOLERANCE = 0.05
LATE_TARGET = 1.5
STRETCH_TARGET = 4.0
MAKESPAN_TARGET = 1.05
MEAN_JOB = 60.0
FLOOD_CHUNK = 5000


@dataclass(frozen=True)
class Arrival:
    at: float
    group: str
    owner: str
    request: Request


@dataclass
class Outcome:
    """One simulated run: every job's (group, start, end), each request's arrival and end, and when every
    group had a ready job waiting (intervals)."""

    runs: list[tuple[str, float, float]] = field(default_factory=list)
    arrived: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    all_busy: list[tuple[float, float]] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max(self.ended.values())

    def completion(self, request: str) -> float:
        return self.ended[request] - self.arrived[request]


def simulate(
    client: redis.Redis, arrivals: Sequence[Arrival], policy: Policy | None, *, pilots: int, cores: int
) -> Outcome:
    """Run the arrivals to completion; see the module docstring."""
    client.flushdb()
    clock = SimClock()
    store = Store(client, clock=clock, lease_seconds=1e12)
    store.shares.publish(policy)
    catalog = Catalog.loads(CATALOG)
    submitter = Submitter(store, catalog, clock=clock, capacity=lambda: float(pilots * cores))
    kinds = sorted({t.kind for a in arrivals for t in a.request.tasks})
    out = Outcome()
    info: dict[str, tuple[Task, str, str]] = {}  # job id -> task, request, group
    missing: dict[str, int] = {}  # job id -> unfinished dependencies
    dependents: dict[str, list[str]] = defaultdict(list)
    ready: dict[str, int] = defaultdict(int)  # group -> jobs ready and not started
    groups = sorted({a.group for a in arrivals})
    free = {f"pilot{i}": cores for i in range(pilots)}
    running: list[tuple[float, int, str, int, str]] = []
    pending = sorted(arrivals, key=lambda a: a.at)
    seq, now, busy_since = 0, 0.0, None

    def arrive(a: Arrival) -> None:
        jobs = [
            JobSpec(t.name, f"run {t.kind}", {"cpu": 1, "mem": memory_of(t.kind, kinds)}, deps=t.deps, ete=t.runtime)
            for t in a.request.tasks
        ]
        ids = submitter.submit(jobs, name=a.request.name, owner=a.owner, group=a.group).ids
        out.arrived[a.request.name] = now
        for t in a.request.tasks:
            jid = ids[t.name]
            info[jid] = (t, a.request.name, a.group)
            missing[jid] = len(t.deps)
            for d in t.deps:
                dependents[ids[d]].append(jid)
            if not t.deps:
                ready[a.group] += 1

    def fill() -> None:
        nonlocal seq
        for pilot, n in free.items():
            if n <= 0:
                continue
            for job in store.match(PilotOffer(pilot, QUEUE, n, PILOT_MEM_MB), max_jobs=n):
                task, _, group = info[job.id]
                ready[group] -= 1
                free[pilot] -= 1
                seq += 1
                heapq.heappush(running, (now + task.runtime, seq, job.id, job.attempt, pilot))

    while pending or running:
        upcoming = [running[0][0]] if running else []
        upcoming += [pending[0].at] if pending else []
        now = min(upcoming)
        clock.now = T0 + now
        while running and running[0][0] <= now:
            end, _, jid, attempt, pilot = heapq.heappop(running)
            task, request, group = info[jid]
            store.complete(jid, attempt, pilot, RunResult(wall=task.runtime))
            free[pilot] += 1
            out.runs.append((group, end - task.runtime, end))
            out.ended[request] = max(out.ended.get(request, 0.0), end)
            for d in dependents.pop(jid, []):
                missing[d] -= 1
                if missing[d] == 0:
                    ready[info[d][2]] += 1
        while pending and pending[0].at <= now:
            arrive(pending.pop(0))
        fill()
        everyone = all(ready[g] > 0 for g in groups)
        if everyone and busy_since is None:
            busy_since = now
        elif not everyone and busy_since is not None:
            out.all_busy.append((busy_since, now))
            busy_since = None
    return out


def windows(out: Outcome, length: float) -> list[tuple[float, dict[str, float]]]:
    """Each group's part of the core-seconds in consecutive windows of ``length``, from the first arrival."""
    end = out.makespan
    n = math.ceil(end / length)
    used: list[dict[str, float]] = [defaultdict(float) for _ in range(n)]
    for group, start, stop in out.runs:
        i = int(start // length)
        while i < n and i * length < stop:
            lo, hi = max(start, i * length), min(stop, (i + 1) * length)
            used[i][group] += max(0.0, hi - lo)
            i += 1
    return [(i * length, {g: v / (sum(w.values()) or 1) for g, v in w.items()}) for i, w in enumerate(used)]


def in_busy(out: Outcome, lo: float, hi: float) -> bool:
    return any(a <= lo and hi <= b for a, b in out.all_busy)


def mark(ok: bool) -> str:
    return "ok" if ok else "MISS"


def flood_scenario(client: redis.Redis, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    shares = {"prod": 50.0, "ana": 30.0, "user": 20.0}
    policy = Policy(halflife=args.halflife, shares=shares, catchup=args.catchup or None)
    flood = [
        Task(f"f{i}", "flood", max(1.0, round(rng.lognormvariate(math.log(MEAN_JOB) - 0.18, 0.6), 3)))
        for i in range(args.flood)
    ]
    arrivals = [
        Arrival(0.0, "prod", "prod-bot", Request(f"flood{k // FLOOD_CHUNK}", tuple(flood[k : k + FLOOD_CHUNK])))
        for k in range(0, len(flood), FLOOD_CHUNK)
    ]
    late = [
        Arrival(1800.0, "ana", "alice", cybershake(rng, sgts=4, synth=497, prefix="cy.")),
        Arrival(
            2400.0,
            "user",
            "bob",
            random_layered(random.Random(args.seed + 7), layers=12, width=(40, 120), name="layered").requests[0],
        ),
    ]
    late = [
        Arrival(a.at, a.group, a.owner, Request(n, a.request.tasks))
        for a, n in zip(late, ("cybershake", "layered"), strict=True)
    ]
    cores = args.pilots * args.cores
    started = time.monotonic()
    out = simulate(client, arrivals + late, policy, pilots=args.pilots, cores=args.cores)
    took = time.monotonic() - started
    print(
        f"== flood: {args.flood} jobs of group prod at t=0, cybershake (ana) at 1800 s, layered (user) at "
        f"2400 s; {args.pilots} pilots x {args.cores} cores; shares 50/30/20; half-life {args.halflife:g} s; "
        f"catch-up cap {args.catchup or 'none'}; "
        f"simulated {out.makespan:.0f} s in {took:.0f} s"
    )
    length = 10 * MEAN_JOB
    total = sum(shares.values())
    print(
        f"core-second share per window of {length:.0f} s (10 x mean job), target share in brackets; "
        "* = every group had a ready job waiting all window"
    )
    print(f"{'window':>12} " + " ".join(f"{g + f' ({s / total:.0%})':>12}" for g, s in shares.items()))
    worst: dict[str, float] = {}
    for lo, part in windows(out, length):
        busy = in_busy(out, lo, lo + length)
        if busy:
            for g, s in shares.items():
                worst[g] = max(worst.get(g, 0.0), abs(part.get(g, 0.0) - s / total))
        if busy or lo < 7200 or int(lo // length) % 10 == 0:
            print(f"{lo:>11.0f}{'*' if busy else ' '} " + " ".join(f"{part.get(g, 0.0):>12.1%}" for g in shares))
        if lo > out.ended.get("layered", 0) + 2 * length and not busy:
            print(f"{'...':>12} (the flood alone after this)")
            break
    if worst:
        counted = sum(1 for lo, _ in windows(out, length) if in_busy(out, lo, lo + length))
        for g in shares:
            print(
                f"share {g}: largest gap over {counted} all-busy windows {worst[g]:.1%} points "
                f"(target {SHARE_TOLERANCE:.0%}) {mark(worst[g] <= SHARE_TOLERANCE)}"
            )
    else:
        print("share: no window where every group had a ready job waiting throughout: target not measurable")
    for a in late:
        solo = simulate(
            client, [Arrival(0.0, a.group, a.owner, a.request)], policy, pilots=args.pilots, cores=args.cores
        ).makespan
        share = shares[a.group] / total
        bound = LATE_TARGET * solo / share
        done = out.completion(a.request.name)
        print(
            f"late {a.request.name} ({a.group}, {share:.0%}): completed in {done:.0f} s, alone {solo:.0f} s, "
            f"ratio {done / solo:.2f}; target <= {LATE_TARGET} x solo / share = {bound:.0f} s "
            f"({done / bound:.2f}) {mark(done <= bound)}"
        )
    stretch = {
        a.request.name: out.completion(a.request.name) / lower_bound(list(a.request.tasks), cores)
        for a in arrivals + late
    }
    for label, names in (
        ("every request", list(stretch)),
        ("late workflows", [a.request.name for a in late]),
        (f"flood ({len(arrivals)} requests)", [a.request.name for a in arrivals]),
    ):
        values = [stretch[n] for n in names]
        print(
            f"stretch, {label}: mean {sum(values) / len(values):.2f}, max {max(values):.2f} "
            f"({max(names, key=lambda n: stretch[n])})"
        )


def staggered_scenario(client: redis.Redis, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    small = Request("small", tuple(Task(f"s{i}", "small", 271 / 3, (f"s{i - 1}",) if i else ()) for i in range(3)))
    mix = [
        Arrival(0.0, "g1", "o1", montage(rng, prefix="m.")),
        Arrival(600.0, "g2", "o2", epigenomics(rng, prefix="e.")),
        Arrival(1200.0, "g3", "o3", cybershake(rng, sgts=2, synth=150, prefix="c.")),
        Arrival(1500.0, "g4", "o4", small),
    ]
    mix = [
        Arrival(a.at, a.group, a.owner, Request(n, a.request.tasks))
        for a, n in zip(mix, ("montage", "epigenomics", "cybershake", "small"), strict=True)
    ]
    cores = args.stagger_pilots * args.cores
    catchup = args.catchup or None
    if args.owners_in_group:  # one group, the four owners sharing it equally (owner shares inside a group)
        mix = [Arrival(a.at, "users", a.owner, a.request) for a in mix]
        owner_shares = {("users", a.owner): 1.0 for a in mix}
        equal = Policy(halflife=args.halflife, shares={"users": 1}, owner_shares=owner_shares, catchup=catchup)
        how = "four owners with equal shares inside one group"
    else:
        equal = Policy(halflife=args.halflife, shares={"g1": 1, "g2": 1, "g3": 1, "g4": 1}, catchup=catchup)
        how = "four owners in four groups of equal shares"
    today = simulate(client, mix, None, pilots=args.stagger_pilots, cores=args.cores)
    fair = simulate(client, mix, equal, pilots=args.stagger_pilots, cores=args.cores)
    print(
        f"== staggered: four requests, {how}; catch-up cap {catchup or 'none'}; "
        f"{args.stagger_pilots} pilots x {args.cores} cores"
    )
    print(f"{'request':>12} {'arrives':>8} {'LB alone':>9} {'today':>16} {'shares':>16}")
    worst = 0.0
    for a in mix:
        name = a.request.name
        lb = lower_bound(list(a.request.tasks), cores)
        s0, s1 = today.completion(name) / lb, fair.completion(name) / lb
        worst = max(worst, s1)
        print(
            f"{name:>12} {a.at:>8.0f} {lb:>9.0f} {today.completion(name):>8.0f} s {s0:>5.2f}x "
            f"{fair.completion(name):>8.0f} s {s1:>5.2f}x"
        )
    for label, o in (("today", today), ("shares", fair)):
        st = [o.completion(a.request.name) / lower_bound(list(a.request.tasks), cores) for a in mix]
        print(f"stretch {label}: mean {sum(st) / len(st):.2f}, max {max(st):.2f}; makespan {o.makespan:.0f} s")
    ratio = fair.makespan / today.makespan
    print(
        f"targets: max stretch with shares {worst:.2f} <= {STRETCH_TARGET} {mark(worst <= STRETCH_TARGET)}; "
        f"makespan shares/today {ratio:.3f} <= {MAKESPAN_TARGET} {mark(ratio <= MAKESPAN_TARGET)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--pilots", type=int, default=8)
    parser.add_argument("--stagger-pilots", type=int, default=4)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--halflife", type=float, default=180.0)
    parser.add_argument(
        "--catchup", type=float, default=1.2, help="the policy's catch-up cap (x >= 1; 0: none, the rule before)"
    )
    parser.add_argument("--only", choices=("flood", "staggered"))
    parser.add_argument(
        "--owners-in-group", action="store_true", help="staggered: the four owners share one group (owner shares)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fairshare-") as tmp:
        server = RedisServer(Path(tmp)).start()
        client = redis.Redis.from_url(server.url)
        try:
            if args.only != "flood":
                staggered_scenario(client, args)
            if args.only != "staggered":
                flood_scenario(client, args)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
