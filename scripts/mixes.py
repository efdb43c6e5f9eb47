"""Heterogeneous workloads for ``bench_schedule.py``: jobs of 1, 2, 4 and 8 cores with memory up to a
pilot's, requests that arrive over time, and their lower bounds.

Shapes follow published workflow families (the Pegasus workflow gallery: Montage, CyberShake,
Epigenomics, LIGO Inspiral), with core counts and memory per transformation as multi-threaded versions
of those codes ask for them; plus the synthetic case that shows starvation of wide jobs (an alternating
1-core/4-core chain beside a bag of 1-core jobs) and a layered DAG of 1/2/4/8-core and high-memory jobs.

Lower bound of a mix on a pool of ``cores`` cores and ``mem`` MB (no schedule ends sooner): the largest of
the longest chain of each request after its arrival, the core-seconds and the MB-seconds of the requests
arriving at or after each arrival time spread over the whole pool after it, and the same for the jobs that
cannot start before a time (their head) or must leave a time after they end (their tail), and the packing
bound (:func:`packing_bound`): jobs run on ``pilots`` separate pilots, not on one pool of cores and memory, so
what the pilots can hold at once (two 20 GB jobs never share a 32 GB pilot, an 8-core job leaves no core of
its pilot to anyone) bounds the pilot-time they need, by a configuration LP (needs the ``bench`` extra: scipy).
A request's own bound (its stretch's denominator) is the same bound without the packing bound, for the request
alone, from its arrival (so every policy's stretch of a request has the denominator it had before).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from workloads import Request, Task, _runtime, critical_path, cybershake, epigenomics, ligo, montage

__all__ = ["Mix", "MixRequest", "MixTask", "mix_bound", "mixes", "packing_bound", "pilot_time", "request_bound"]


@dataclass(frozen=True)
class MixTask(Task):
    """A job with its cores and memory (MB)."""

    cpu: int = 1
    mem: int = 1000


@dataclass(frozen=True)
class MixRequest(Request):
    """A request, when it is submitted (seconds after time zero), and its owner and group."""

    arrival: float = 0.0
    owner: str = "default"
    group: str = "default"


@dataclass(frozen=True)
class Mix:
    """A heterogeneous workload and the pool it runs on: ``pilots`` x (``cores``, ``mem`` MB)."""

    name: str
    requests: tuple[MixRequest, ...]
    pilots: int
    cores: int
    mem: int
    note: str = ""
    target: float = 1.15
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def tasks(self) -> list[MixTask]:
        return [t for r in self.requests for t in r.tasks]  # type: ignore[misc]


def _bound(requests: Sequence[MixRequest], cores: int, mem: int) -> float:
    arrivals = sorted({r.arrival for r in requests})
    best = 0.0
    for r in requests:
        best = max(best, r.arrival + critical_path(r.tasks))
    for a in arrivals:
        later = [t for r in requests if r.arrival >= a for t in r.tasks]
        work = sum(t.runtime * t.cpu for t in later) / cores  # type: ignore[attr-defined]
        memory = sum(t.runtime * t.mem for t in later) / mem  # type: ignore[attr-defined]
        best = max(best, a + work, a + memory)
    return best


def _timed(requests: Sequence[MixRequest]) -> list[tuple[float, float, MixTask]]:
    """Each job with its head (earliest start: arrival + longest chain of ancestors) and tail (longest chain
    of descendants after it ends)."""
    out = []
    for r in requests:
        by_name = {t.name: t for t in r.tasks}
        head: dict[str, float] = {}
        for t in r.tasks:  # dependencies come first (workloads.check)
            head[t.name] = max((head[d] + by_name[d].runtime for d in t.deps), default=r.arrival)
        after: dict[str, float] = {t.name: 0.0 for t in r.tasks}
        for t in reversed(r.tasks):
            for d in t.deps:
                after[d] = max(after[d], after[t.name] + t.runtime)
        out += [(head[t.name], after[t.name], t) for t in r.tasks]  # type: ignore[misc]
    return out


def _energy(requests: Sequence[MixRequest], cores: int, mem: int) -> float:
    """No job starts before its head and every job must leave its tail after it ends: the work (cores and
    memory) of the jobs whose head is at least h is done after h, and that of the jobs whose tail is at
    least q before the end minus q."""
    timed = _timed(requests)
    best = 0.0
    for key, sign in ((0, -1), (1, -1)):
        work = memory = 0.0
        for item in sorted(timed, key=lambda x: sign * x[key]):
            t = item[2]
            work += t.runtime * t.cpu
            memory += t.runtime * t.mem
            best = max(best, item[key] + work / cores, item[key] + memory / mem)
    return best


#: Column-generation rounds of :func:`pilot_time` at most (the bound stays valid when it stops early).
PRICING_ROUNDS = 500


def pilot_time(jobs: Sequence[MixTask], cores: int, mem: int) -> float:
    """A lower bound on the pilot-seconds that running ``jobs`` takes on pilots of ``cores`` cores and ``mem`` MB.

    At any instant a pilot runs a *configuration*: a set of jobs whose cores and memory fit it. Over a schedule,
    the time each pilot spends in each configuration covers every kind's run time (a kind: a (cores, memory)
    pair; ``w_k`` the run times of its jobs added up), so the configuration LP ``min sum_c x_c`` subject to
    ``sum_c a_kc x_c >= w_k``, ``x >= 0``, bounds the pilot-time from below. It is solved by column generation
    (the knapsack of the duals over one pilot, exactly, by HiGHS' MILP), and the value returned is Farley's
    bound ``sum_k pi_k w_k / max_c pi . a_c`` from the last duals ``pi``: a lower bound on the LP's optimum
    whatever ``pi`` is, so on any schedule even if the pricing stopped early.
    """
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    work: dict[tuple[int, int], float] = {}
    for t in jobs:
        work[(t.cpu, t.mem)] = work.get((t.cpu, t.mem), 0.0) + t.runtime
    kinds = sorted(work)
    if not kinds:
        return 0.0
    if any(c > cores or m > mem for c, m in kinds):
        raise ValueError(f"a job of {max(kinds)} (cores, MB) fits no pilot of {cores} cores and {mem} MB")
    rhs = np.array([work[k] for k in kinds])
    size = np.array([[k[0] for k in kinds], [k[1] for k in kinds]], dtype=float)
    columns = [np.eye(len(kinds))[i] for i in range(len(kinds))]
    best = 0.0
    for _ in range(PRICING_ROUNDS):
        master = linprog(np.ones(len(columns)), A_ub=-np.array(columns).T, b_ub=-rhs, bounds=(0, None), method="highs")
        pi = np.maximum(-master.ineqlin.marginals, 0.0)
        knap = milp(
            -pi,
            constraints=LinearConstraint(size, 0, [cores, mem]),
            integrality=np.ones(len(kinds)),
            bounds=Bounds(0, cores),
            options={"mip_rel_gap": 0.0},
        )
        # The knapsack's proven upper bound, not only the configuration found: Farley's bound needs the maximum.
        top = max(float(pi @ np.round(knap.x)), -float(knap.mip_dual_bound), 1e-12)
        best = max(best, float(pi @ rhs) / top * (1 - 1e-9))
        if top <= 1 + 1e-9:
            break
        columns.append(np.round(knap.x))
    return best


def packing_bound(requests: Sequence[MixRequest], pilots: int, cores: int, mem: int) -> float:
    """The largest, over arrival times ``a``, of ``a`` + the pilot-time of the requests arriving at or after
    ``a`` (:func:`pilot_time`) spread over the ``pilots``: no schedule ends sooner."""
    best = 0.0
    for a in sorted({r.arrival for r in requests}):
        later = [t for r in requests if r.arrival >= a for t in r.tasks]
        best = max(best, a + pilot_time(later, cores, mem) / pilots)  # type: ignore[arg-type]
    return best


def mix_bound(mix: Mix) -> float:
    """The mix's lower bound on its whole pool (see the module doc)."""
    cores, mem = mix.pilots * mix.cores, mix.pilots * mix.mem
    return max(
        _bound(mix.requests, cores, mem),
        _energy(mix.requests, cores, mem),
        packing_bound(mix.requests, mix.pilots, mix.cores, mix.mem),
    )


def request_bound(mix: Mix, request: MixRequest) -> float:
    """The request's own lower bound: alone on the whole pool, from its arrival."""
    cores, mem = mix.pilots * mix.cores, mix.pilots * mix.mem
    return max(_bound([request], cores, mem), _energy([request], cores, mem)) - request.arrival


def _shaped(request: Request, shape: Callable[[Task], tuple[int, int]], arrival: float = 0.0) -> MixRequest:
    tasks = tuple(MixTask(t.name, t.kind, t.runtime, t.deps, *shape(t)) for t in request.tasks)
    return MixRequest(request.name, tasks, arrival)


def chain_and_bag(
    rng: random.Random, *, links: int = 16, link: float = 120.0, bag_mean: float = 30.0, bag: int = 0, cores: int = 16
) -> MixRequest:
    """A chain alternating 1-core and 4-core jobs, beside a bag of 1-core jobs filling the pool for as long."""
    tasks: list[MixTask] = []
    prev: tuple[str, ...] = ()
    for i in range(links):
        name = f"link{i}"
        tasks.append(MixTask(name, "chain4" if i % 2 else "chain1", link, prev, 4 if i % 2 else 1, 2000))
        prev = (name,)
    chain_work = sum(t.runtime * t.cpu for t in tasks)
    room = links * link * cores - chain_work
    bag = bag or int(room / bag_mean)
    for i in range(bag):
        tasks.append(MixTask(f"bag{i}", "bag", _runtime(rng, bag_mean), (), 1, 1500))
    return MixRequest("chain+bag", tuple(tasks))


def layered_mixed(
    rng: random.Random, *, layers: int = 8, width: tuple[int, int] = (6, 24), mem: int = 32_000
) -> MixRequest:
    """A layered DAG whose jobs take 1, 2, 4 or 8 cores, some of them most of a pilot's memory."""
    tasks: list[MixTask] = []
    previous: list[str] = []
    for layer in range(layers):
        current = []
        for i in range(rng.randint(*width)):
            cpu = rng.choice((1, 1, 1, 2, 2, 4, 8))
            big = rng.random() < 0.15
            job_mem = int(mem * rng.uniform(0.5, 0.9)) if big else 1000 * cpu
            deps = tuple(sorted(set(rng.sample(previous, min(len(previous), rng.randint(1, 3)))))) if previous else ()
            name = f"L{layer}_{i}"
            tasks.append(
                MixTask(name, f"k{cpu}{'m' if big else ''}", _runtime(rng, 60.0 * (1 + cpu / 4)), deps, cpu, job_mem)
            )
            current.append(name)
        previous = current
    return MixRequest("layered", tuple(tasks))


_MONTAGE = {
    "mProjectPP": (1, 2000),
    "mDiffFit": (1, 1000),
    "mConcatFit": (2, 4000),
    "mBgModel": (4, 8000),
    "mBackground": (1, 2000),
    "mImgtbl": (1, 1000),
    "mAdd": (8, 24_000),
    "mShrink": (4, 8000),
    "mJPEG": (1, 1000),
}
_CYBERSHAKE = {
    "ExtractSGT": (8, 24_000),
    "SeismogramSynthesis": (1, 3000),
    "PeakValCalcOkaya": (1, 500),
    "ZipSeis": (2, 2000),
    "ZipPSA": (2, 2000),
}
_EPIGENOMICS = {
    "fastqSplit": (2, 2000),
    "filterContams": (1, 1000),
    "sol2sanger": (1, 1000),
    "fastq2bfq": (1, 1000),
    "map": (4, 12_000),
    "mapMerge": (2, 4000),
    "maqIndex": (8, 16_000),
    "pileup": (4, 8000),
}
_LIGO = {"TmpltBank": (2, 2000), "Inspiral": (4, 6000), "Thinca": (1, 1000), "TrigBank": (1, 1000)}


def _by_kind(table: dict[str, tuple[int, int]]) -> Callable[[Task], tuple[int, int]]:
    return lambda t: table[t.kind]


def small_request(prefix: str, jobs: int = 3, runtime: float = 90.0) -> Request:
    """A small late request: a chain of ``jobs`` single-core 1 GB jobs (a user's quick check)."""
    tasks = tuple(Task(f"{prefix}{i}", "small", runtime, (f"{prefix}{i - 1}",) if i else ()) for i in range(jobs))
    return Request("small", tasks)


def late_small(rng: random.Random, *, spread: float, owners: bool) -> tuple[MixRequest, ...]:
    """Issue 29's staggered heterogeneous mix: a layered 1-8 core DAG with high-memory jobs, a CyberShake
    (8-core 24 GB ExtractSGT), an Epigenomics (4-core 12 GB map, 8-core maqIndex), then a small chain
    submitted last, ``spread`` seconds apart (0: all at once). With ``owners`` each request has an owner and
    a group of its own (the multi-user setting); else all share the default account."""
    table = {**_MONTAGE, **_CYBERSHAKE, **_EPIGENOMICS, "small": (1, 1000)}
    layered = layered_mixed(rng, layers=6, width=(6, 16))
    parts = (
        ("layered", layered),
        ("cybershake", _shaped(cybershake(rng, sgts=3, synth=90, prefix="c."), _by_kind(table))),
        ("epigenomics", _shaped(epigenomics(rng, lanes=2, chunks=8, prefix="e."), _by_kind(table))),
        ("small", _shaped(small_request("s."), _by_kind(table))),
    )
    return tuple(
        replace(
            req,
            name=name,
            arrival=i * spread,
            owner=f"u{i}" if owners else "default",
            group=f"g{i}" if owners else "default",
        )
        for i, (name, req) in enumerate(parts)
    )


def mixes(seed: int = 1) -> list[Mix]:
    """The heterogeneous workloads of the benchmark (deterministic for a seed)."""
    rng = random.Random(seed * 7919 + 17)
    mont = _shaped(montage(rng, rows=8, cols=8), _by_kind(_MONTAGE))
    cyber = _shaped(cybershake(rng, sgts=4, synth=200), _by_kind(_CYBERSHAKE))
    epi = _shaped(epigenomics(rng, lanes=4, chunks=12), _by_kind(_EPIGENOMICS))
    lig = _shaped(ligo(rng), _by_kind(_LIGO))
    staggered = tuple(
        replace(_shaped(req, _by_kind(table)), name=name, arrival=at)
        for name, req, table, at in (
            ("montage", montage(rng, rows=6, cols=6, prefix="m."), _MONTAGE, 0.0),
            ("epigenomics", epigenomics(rng, lanes=2, chunks=10, prefix="e."), _EPIGENOMICS, 300.0),
            ("cybershake", cybershake(rng, sgts=2, synth=120, prefix="c."), _CYBERSHAKE, 600.0),
            ("ligo", ligo(rng, groups=(4, 5, 6), prefix="l."), _LIGO, 900.0),
        )
    )
    return [
        Mix(
            "chain1c/4c+bag",
            (chain_and_bag(rng),),
            4,
            4,
            16_000,
            "alternating 1c/4c critical chain beside a bag of 1c jobs",
            target=1.10,
        ),
        Mix("layered 1/2/4/8c+mem", (layered_mixed(rng),), 4, 8, 32_000, "layered DAG, high-memory jobs"),
        Mix("montage mixed", (mont,), 4, 8, 32_000, "mAdd 8c/24G, mBgModel 4c"),
        Mix("cybershake mixed", (cyber,), 4, 8, 32_000, "ExtractSGT 8c/24G beside 1c synthesis"),
        Mix("epigenomics mixed", (epi,), 4, 8, 32_000, "map 4c/12G, maqIndex 8c"),
        Mix("ligo mixed", (lig,), 4, 8, 32_000, "Inspiral 4c"),
        Mix("staggered 4 families", staggered, 4, 8, 32_000, "requests arriving every 300 s"),
        *late_small_mixes(seed),
    ]


def late_small_mixes(seed: int = 1) -> list[Mix]:
    """Issue 29's mixes: a small request submitted last behind heterogeneous ones (staggered by 200 s, or all
    at once), with one account for all, or an owner and group per request (tag ``owners``: the benchmark
    runs these with and without equal shares per group)."""
    out = []
    for spread, label in ((200.0, "staggered"), (0.0, "together")):
        for owners in (False, True):
            rng = random.Random(seed * 104_729 + int(spread))
            requests = late_small(rng, spread=spread, owners=owners)
            out.append(
                Mix(
                    f"late small, {label}" + (", owners" if owners else ""),
                    requests,
                    4,
                    8,
                    32_000,
                    "small chain submitted last behind 1-8 core, high-memory requests",
                    tags=frozenset({"late"} | ({"owners"} if owners else set())),
                )
            )
    return out
