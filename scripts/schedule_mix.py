"""The heterogeneous part of ``bench_schedule.py``: mixes of 1/2/4/8-core and high-memory jobs, requests
arriving over time, pilots of finite memory, on the REAL store and match (a real redis-server).

Same simulation as the single-core rows (a simulated clock; a job runs from its lease to lease + its true
run time), with these differences: every pilot has ``Mix.cores`` cores and ``Mix.mem`` MB and offers both;
each request is submitted at its arrival time (the pilots match right after); and a pilot tells the match
what it runs (its jobs' cores, memory and estimated ends, from their hints), so the match's reservations
(EASY backfill, ``match.lua``) work as with real pilots. Policies: ``pressure`` (the Submitter, hints = true
run times), ``strict`` (the same, reservations off: the match of old), ``FIFO`` (scores in submission
order, reservations on, the same match), on the mixes of several requests ``EASY``: pressure with the
reservations of EASY backfill (``Settings.bounded_reservations`` false; ``pressure`` has them bounded, the
default), and on the mixes whose requests have owners and groups of their own (tag ``owners``), ``shares``:
pressure under the documented multi-user setting (:func:`shares_policy`). On issue 29's mixes (tag ``late``) a
diagnostic, ``one-eta``: pressure's scores with one ETA for every request (the latest of each request's arrival
plus critical path) instead of each request's own, load included (``matcher.eta``): the same match and
reservations; it tells a loss of the ETA term from one of the match or of the lower bound.

Per request: its completion stretch, (its last end - its arrival) / its own lower bound alone
(:func:`mixes.request_bound`); the table shows the largest and the mean next to the makespans. Where the scores
come from the Submitter (not FIFO, not one-eta) also how long after the ETA it promised the request it ends.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from bench_schedule import QUEUE, T0, SimClock, SimulationError, submit_scored
from mixes import Mix, MixRequest, MixTask, mix_bound, request_bound
from workloads import critical_path

from matcher.submission import JobSpec, SubmissionError, Submitter
from taskqueues import dag
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.records import PilotOffer, RunResult

MIX_POLICIES = ("pressure", "strict", "fifo")
#: The documented multi-user setting (docs/user/scheduling.md): equal shares per group, a half-life of a few
#: mean job lengths, the catch-up capped. Run on the mixes tagged "owners" as the policy "shares". The half-life
#: is 300 s (was 600 s: its makespan passed 1.05 x at seeds 2 and 5; docs/operator/scheduling.md, part 2).
SHARES_HALFLIFE = 300.0
SHARES_STRETCH = 4.0
SHARES_MAKESPAN = 1.05
SHARES_CATCHUP = 1.2


def shares_policy(mix: Mix) -> Policy:
    """Equal shares for the groups of ``mix``'s requests."""
    groups = sorted({r.group for r in mix.requests})
    return Policy(halflife=SHARES_HALFLIFE, shares=dict.fromkeys(groups, 1.0), catchup=SHARES_CATCHUP)


def policies(mix: Mix) -> tuple[str, ...]:
    """The policies a mix runs under: the three of every mix, "easy" for a mix of several requests (its
    per-request stretch with EASY's reservations), "shares" for the multi-owner ones and the diagnostic
    "one-eta" for issue 29's (tag ``late``)."""
    return (
        MIX_POLICIES
        + (("easy",) if len(mix.requests) > 1 else ())
        + (("shares",) if "owners" in mix.tags else ())
        + (("one-eta",) if "late" in mix.tags else ())
    )


CATALOG = """
[sites.bench]
[sites.bench.ces.ce]
[sites.bench.ces.ce.queues.q]
shapes = [{ name = "pilot", cpu = 64, mem = "64G" }]
"""


@dataclass(frozen=True)
class MixResult:
    makespan: float
    stretch: dict[str, float]  # request name -> completion / its own lower bound
    matches: int
    #: request name -> its completion minus the ETA the Submitter promised it (seconds; < 0: early), for the
    #: policies whose scores come from the Submitter (not FIFO's nor one-eta's)
    late: dict[str, float] = field(default_factory=dict)


def _jobs(request: MixRequest) -> list[JobSpec]:
    return [
        JobSpec(t.name, f"run {t.kind}", {"cpu": t.cpu, "mem": t.mem}, deps=t.deps, ete=t.runtime)
        for t in request.tasks
    ]  # type: ignore[attr-defined]


def simulate_mix(client: redis.Redis, mix: Mix, policy: str) -> MixResult:
    """Run ``mix`` to completion under ``policy`` (one of :data:`MIX_POLICIES`) on an emptied database."""
    client.flushdb()
    clock = SimClock()
    # Reservations are bounded (the default) where scores are start-by dates; FIFO's are positions, and "easy" is
    # pressure with EASY's reservations: both have the unbounded rule.
    store = Store(client, clock=clock, lease_seconds=1e9, bounded_reservations=policy not in ("fifo", "easy"))
    store.shares.publish(shares_policy(mix) if policy == "shares" else None)
    catalog = Catalog.loads(CATALOG)
    capacity = float(mix.pilots * mix.cores)
    tasks: dict[str, tuple[MixTask, MixRequest]] = {}
    order = sorted(mix.requests, key=lambda r: r.arrival)
    fifo_next = 0
    one_eta = max(r.arrival + critical_path(r.tasks) for r in mix.requests)
    etas: dict[str, float] = {}  # request name -> the ETA the Submitter gave it, from time zero

    def submit(request: MixRequest) -> None:
        nonlocal fifo_next
        jobs = _jobs(request)
        if policy == "fifo":
            scores = {j.name: T0 + fifo_next + i for i, j in enumerate(jobs)}
            fifo_next += len(jobs)
            ids = submit_scored(store, catalog, jobs, scores, name=request.name, clock=clock)
        elif policy == "one-eta":
            deps = {j.name: j.deps for j in jobs}
            pressure = dag.pressures(dag.check_dag(list(deps), deps), deps, {j.name: float(j.ete or 0) for j in jobs})
            scores = {n: T0 + one_eta - p for n, p in pressure.items()}
            ids = submit_scored(store, catalog, jobs, scores, name=request.name, clock=clock)
        else:
            try:
                submitted = Submitter(store, catalog, clock=clock, capacity=lambda: capacity).submit(
                    jobs, name=request.name, owner=request.owner, group=request.group
                )
                ids, etas[request.name] = submitted.ids, submitted.eta - T0
            except SubmissionError as exc:
                raise SimulationError(f"{mix.name}: {exc}") from None
        by_name = {t.name: t for t in request.tasks}
        tasks.update({job_id: (by_name[n], request) for n, job_id in ids.items()})  # type: ignore[misc]

    names: dict[str, str] = {}
    free = {f"pilot{i}": [mix.cores, mix.mem] for i in range(mix.pilots)}
    held: dict[str, dict[str, tuple[float, int, int]]] = {p: {} for p in free}  # job id -> (est. end, cpu, mem)
    running: list[tuple[float, int, str, int, str]] = []
    ended: dict[str, float] = {}
    seq = matches = 0
    now = 0.0
    reserve = policy != "strict"
    if policy not in policies(mix):
        raise SimulationError(f"{mix.name}: no policy {policy!r} (it runs {', '.join(policies(mix))})")

    def fill() -> None:
        nonlocal seq, matches
        for pilot, (cpu, mem) in free.items():
            if cpu <= 0:
                continue
            ends = tuple((end - now, c, m, 0) for end, c, m in held[pilot].values()) if reserve else None
            got = store.match(PilotOffer(pilot, QUEUE, cpu, mem, 0, None, running=ends), max_jobs=cpu)
            matches += 1
            for job in got:
                task, req = tasks[job.id]
                late = [d for d in task.deps if ended.get(names[d + "@" + req.name], float("inf")) > now]
                if late or job.id in ended or any(job.id == r[2] for r in running):
                    raise SimulationError(f"{mix.name}: job {task.name} started at {now:.3f} too early or twice")
                free[pilot][0] -= task.cpu
                free[pilot][1] -= task.mem
                if free[pilot][0] < 0 or free[pilot][1] < 0:
                    raise SimulationError(f"{mix.name}: pilot {pilot} overcommitted by {task.name}")
                held[pilot][job.id] = (now + task.runtime, task.cpu, task.mem)
                seq += 1
                heapq.heappush(running, (now + task.runtime, seq, job.id, job.attempt, pilot))

    arrivals = list(order)
    while arrivals or running:
        next_end = running[0][0] if running else float("inf")
        if arrivals and arrivals[0].arrival <= next_end:
            now = arrivals[0].arrival
            clock.now = T0 + now
            while arrivals and arrivals[0].arrival <= now:
                request = arrivals.pop(0)
                submit(request)
                names.update({t.name + "@" + request.name: j for j, (t, r) in tasks.items() if r is request})
        else:
            now = next_end
            clock.now = T0 + now
            while running and running[0][0] <= now:
                _, _, job_id, attempt, pilot = heapq.heappop(running)
                task = tasks[job_id][0]
                store.complete(job_id, attempt, pilot, RunResult(wall=task.runtime))
                ended[job_id] = now
                free[pilot][0] += task.cpu
                free[pilot][1] += task.mem
                del held[pilot][job_id]
        fill()
    if len(ended) != len(tasks):
        raise SimulationError(f"{mix.name}: {len(tasks) - len(ended)} jobs never ran")
    last: dict[str, float] = {}
    for job_id, end in ended.items():
        req = tasks[job_id][1]
        last[req.name] = max(last.get(req.name, 0.0), end)
    stretch = {r.name: (last[r.name] - r.arrival) / request_bound(mix, r) for r in mix.requests}
    late = {name: last[name] - eta for name, eta in etas.items()}
    return MixResult(max(ended.values()), stretch, matches, late)


def run_mixes(client: redis.Redis, mixes: Sequence[Mix]) -> list[tuple[Mix, dict[str, MixResult]]]:
    rows = []
    for mix in mixes:
        results = {pol: simulate_mix(client, mix, pol) for pol in policies(mix)}
        lb = mix_bound(mix)
        low = {pol: r.makespan for pol, r in results.items() if r.makespan < lb - 1e-6}
        if low:
            raise SimulationError(f"{mix.name}: {low} ends before the lower bound {lb:.3f}")
        rows.append((mix, results))
    return rows


def print_mixes(rows: Sequence[tuple[Mix, dict[str, MixResult]]]) -> int:
    """The heterogeneous table and its targets; returns how many targets were missed."""
    head = (
        f"{'mix (pilots x cores, GB)':36} {'jobs':>5} {'LB':>7} {'press':>7} {'strict':>7} {'FIFO':>7}"
        f" {'P/LB':>5} {'S/LB':>5} {'F/LB':>5} {'F/P':>5}  {'stretch P max/mean':>18} {'F max':>5}  targets"
    )
    print(head)
    print("-" * len(head))
    missed = 0
    for mix, res in rows:
        lb = mix_bound(mix)
        p, s, f = (res[k].makespan for k in ("pressure", "strict", "fifo"))
        st = list(res["pressure"].stretch.values())
        verdict = []
        ok_lb, ok_fifo = p / lb <= mix.target, p <= f * (1 + 1e-9)
        verdict.append(f"≤{mix.target:.2f}×LB " + ("ok" if ok_lb else "MISS"))
        verdict.append("≤FIFO " + ("ok" if ok_fifo else "MISS"))
        missed += (not ok_lb) + (not ok_fifo)
        label = f"{mix.name} ({mix.pilots}x{mix.cores}, {mix.mem // 1000})"
        print(
            f"{label:36} {len(mix.tasks):5d} {lb:7.0f} {p:7.0f} {s:7.0f} {f:7.0f} {p / lb:5.2f} {s / lb:5.2f}"
            f" {f / lb:5.2f} {f / p:5.2f}  {max(st):9.2f}/{sum(st) / len(st):<8.2f} "
            f"{max(res['fifo'].stretch.values()):5.2f}  {', '.join(verdict)}"
        )
    multi = [(m, r) for m, r in rows if len(m.requests) > 1]
    if multi:
        print(
            "\nPer-request stretch with reservations (bounded: pressure, the default; EASY) and without (strict),"
            "\nand how long after the ETA the Submitter promised it each request ends (seconds), bounded and strict:\n"
        )
        extra = [pol for pol in ("fifo", "shares") if any(pol in r for _, r in multi)]
        head = f"  {'mix':30} {'request':12} {'arrives':>7} {'own LB':>6}  {'bounded':>7} {'EASY':>6} {'strict':>6}"
        print(head + "".join(f" {pol:>6}" for pol in extra) + f"  {'ETA+ b':>6} {'ETA+ s':>6}")
        for mix, res in multi:
            for req in mix.requests:
                cells = "".join(
                    f" {res[pol].stretch[req.name]:6.2f}" if pol in res else f" {'':6}"
                    for pol in ("easy", "strict", *extra)
                )
                print(
                    f"  {mix.name:30} {req.name:12} {req.arrival:7.0f} {request_bound(mix, req):6.0f}"
                    f"  {res['pressure'].stretch[req.name]:7.2f}{cells}"
                    f"  {res['pressure'].late[req.name]:6.0f} {res['strict'].late[req.name]:6.0f}"
                )
    for mix, res in rows:
        if "one-eta" in res:
            lb, one = mix_bound(mix), res["one-eta"]
            print(
                f"  diagnostic, {mix.name}: one ETA for all requests: makespan {one.makespan:.0f}"
                f" ({one.makespan / lb:.3f} x LB, pressure {res['pressure'].makespan / lb:.3f}),"
                f" largest stretch {max(one.stretch.values()):.2f}"
            )
    print(
        "\nLargest request stretch on every mix (one request: its makespan / its LB) with reservations (pressure,"
        " bounded) and without (strict); target: not worse with them.\nWith owners, under the multi-user setting"
        f" (shares): largest stretch <= {SHARES_STRETCH:g} and"
        f" makespan <= {SHARES_MAKESPAN:.2f} x pressure's."
    )
    for mix, res in rows:
        worst = {pol: max(r.stretch.values()) for pol, r in res.items()}
        ok = worst["pressure"] <= worst["strict"] * (1 + 1e-9)
        missed += not ok
        easy = f" (EASY {worst['easy']:5.3f})" if "easy" in worst else f" {'':12}"
        line = f"  {mix.name:34} reservations {worst['pressure']:6.3f}{easy}  strict {worst['strict']:6.3f}  " + (
            "ok" if ok else "MISS"
        )
        if "shares" in res:
            ratio = res["shares"].makespan / res["pressure"].makespan
            ok_shares = worst["shares"] <= SHARES_STRETCH and ratio <= SHARES_MAKESPAN + 1e-9
            missed += not ok_shares
            line += (
                f";  shares: largest {worst['shares']:5.2f}, makespan {ratio:.3f} x pressure"
                f"  {'ok' if ok_shares else 'MISS'}"
            )
        print(line)
    return missed


def seed_lines(mix: Mix, res: dict[str, MixResult], seed: int) -> tuple[str, int]:
    """One mix at one seed, in one line: the largest request stretch with reservations (pressure, bounded) and
    without (strict), the makespan over the lower bound and over FIFO's, and the ``one-eta`` diagnostic's
    makespan over the bound where the mix runs it, and the latest a request ends after its ETA with reservations
    and without (information, no target); on the multi-owner mixes, the multi-user setting's (``shares``) largest
    stretch and makespan over pressure's. Returns the line and how many of its targets (largest stretch not
    worse with reservations, makespan not worse than FIFO's; with owners, the shares' stretch <= 4 and makespan
    <= 1.05 x, one target) it misses."""
    lb = mix_bound(mix)
    p, s = max(res["pressure"].stretch.values()), max(res["strict"].stretch.values())
    ok_stretch = p <= s * (1 + 1e-9)
    ok_fifo = res["pressure"].makespan <= res["fifo"].makespan * (1 + 1e-9)
    one = f"{res['one-eta'].makespan / lb:7.3f}" if "one-eta" in res else f"{'':7}"
    ok_shares, shares = True, ""
    if "shares" in res:  # the multi-user setting: largest stretch and makespan over pressure's
        worst, ratio = max(res["shares"].stretch.values()), res["shares"].makespan / res["pressure"].makespan
        ok_shares = worst <= SHARES_STRETCH and ratio <= SHARES_MAKESPAN + 1e-9
        shares = f"  shares {worst:5.2f} {ratio:5.3f} {'ok' if ok_shares else 'MISS'}"
    line = (
        f"  {seed:4d}  {mix.name:32} {p:7.3f} {s:7.3f} {'ok' if ok_stretch else 'MISS':4}"
        f"  {res['pressure'].makespan / lb:6.3f} {res['pressure'].makespan / res['fifo'].makespan:6.3f}"
        f" {'ok' if ok_fifo else 'MISS':4} {one}"
        f"  {max(res['pressure'].late.values(), default=0.0):6.0f} {max(res['strict'].late.values(), default=0.0):6.0f}"
        + shares
    )
    return line, (not ok_stretch) + (not ok_fifo) + (not ok_shares)


def print_seeds(by_seed: Sequence[tuple[int, Sequence[tuple[Mix, dict[str, MixResult]]]]]) -> int:
    """The verdicts of every mix at every seed (``bench_schedule.py --seeds N``); returns the misses."""
    print(
        "Per seed: largest request stretch with reservations (bounded, the default) and without (strict), target"
        " not worse with them;\nmakespan over the lower bound and over FIFO's, target <= 1; one-eta: the"
        " diagnostic's makespan over the bound;\nETA+: the latest a request ends after the ETA the Submitter"
        " promised it (seconds), bounded and strict;\nshares (mixes with owners): the multi-user setting's largest"
        f" stretch (target <= {SHARES_STRETCH:g}) and makespan over pressure's (<= {SHARES_MAKESPAN:.2f}).\n"
    )
    head = (
        f"  {'seed':>4}  {'mix':32} {'bounded':>7} {'strict':>7} {'':4}  {'P/LB':>6} {'P/F':>6} {'':4} {'one-eta':>7}"
        f"  {'ETA+ b':>6} {'ETA+ s':>6}"
    )
    print(head)
    print("  " + "-" * (len(head) - 2))
    missed = 0
    ratios: dict[str, list[float]] = {}  # mix name -> largest stretch bounded / strict, one per seed
    for seed, rows in by_seed:
        for mix, res in rows:
            line, miss = seed_lines(mix, res, seed)
            missed += miss
            print(line)
            worst = (max(res[pol].stretch.values()) for pol in ("pressure", "strict"))
            ratios.setdefault(mix.name, []).append(operator.truediv(*worst))
    print(
        f"\nPer mix over the {len(by_seed)} seeds: largest stretch bounded / strict (geometric mean, largest), and"
        " at how many seeds it is not worse.\n"
    )
    for name, values in ratios.items():
        mean = math.exp(sum(math.log(v) for v in values) / len(values))
        good = sum(v <= 1 + 1e-9 for v in values)
        print(f"  {name:32} {mean:6.3f} {max(values):6.3f}  {good}/{len(values)}")
    return missed
