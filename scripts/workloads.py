"""Workflow shapes for the scheduling benchmark (scripts/bench_schedule.py): jobs with names, deps, run times.

Every generator is deterministic for a given ``random.Random`` and returns a :class:`Workload`: one or
more requests submitted at the same moment, each a list of :class:`Task` in *stage order* — the order in
which a workflow engine writes its jobs out (all jobs of one transformation or level before the next, as a
Pegasus DAX lists them). That order is what the FIFO policy of the benchmark follows, so it is part of the
workload's definition and stays fixed; it is always a topological order.

The scientific workflows follow the structures published by Bharathi et al. 2008 ("Characterization of
scientific workflows", WORKS'08) and drawn in the Pegasus workflow gallery. Mean run times per
transformation are the ones that paper reports (rounded, in seconds); each job draws its own run time
around that mean with a log-normal spread (``SPREAD``), because real jobs of one transformation differ.
Sizes stay between 50 and 1000 jobs.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: Log-normal sigma of a job's run time around its transformation's mean (about ±25 % at one sigma).
SPREAD = 0.25

#: Mean run times (s) per transformation, Bharathi et al. 2008, table of task characteristics.
MONTAGE_RUNTIME = {
    "mProjectPP": 1.73,
    "mDiffFit": 0.66,
    "mConcatFit": 143.26,
    "mBgModel": 384.49,
    "mBackground": 1.72,
    "mImgtbl": 2.78,
    "mAdd": 282.37,
    "mShrink": 66.10,
    "mJPEG": 0.64,
}
CYBERSHAKE_RUNTIME = {
    "ExtractSGT": 110.58,
    "SeismogramSynthesis": 79.47,
    "ZipSeis": 265.73,
    "PeakValCalcOkaya": 0.55,
    "ZipPSA": 195.80,
}
EPIGENOMICS_RUNTIME = {
    "fastqSplit": 34.32,
    "filterContams": 2.47,
    "sol2sanger": 0.48,
    "fastq2bfq": 1.40,
    "map": 201.66,
    "mapMerge": 11.03,
    "maqIndex": 43.57,
    "pileup": 55.95,
}
LIGO_RUNTIME = {"TmpltBank": 18.14, "Inspiral": 460.21, "Thinca": 5.37, "TrigBank": 5.11}


@dataclass(frozen=True)
class Task:
    """One job: a unique name, its transformation (the rule), its true run time and its dependencies."""

    name: str
    kind: str
    runtime: float
    deps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """Jobs submitted as one request (one ETA, one critical path), in stage order."""

    name: str
    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class Workload:
    """Requests submitted together at time zero onto the same pilots."""

    name: str
    requests: tuple[Request, ...]
    note: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def tasks(self) -> list[Task]:
        return [t for r in self.requests for t in r.tasks]


class WorkloadError(ValueError):
    """A generated workload is not a DAG of uniquely named jobs with positive run times."""


# -- measures -------------------------------------------------------------------------------------


def check(tasks: Sequence[Task]) -> None:
    """Raise :class:`WorkloadError` unless names are unique, deps earlier in the list and run times > 0.

    "Deps earlier in the list" is what makes the stage order a topological order (FIFO relies on it).
    """
    seen: set[str] = set()
    for task in tasks:
        if task.name in seen:
            raise WorkloadError(f"duplicate job name {task.name!r}")
        missing = [d for d in task.deps if d not in seen]
        if missing:
            raise WorkloadError(f"job {task.name!r} depends on {missing}, not listed before it")
        if not task.runtime > 0 or math.isinf(task.runtime):
            raise WorkloadError(f"job {task.name!r} has run time {task.runtime}")
        seen.add(task.name)


def critical_path(tasks: Sequence[Task]) -> float:
    """Longest sum of run times along a dependency path (tasks in a topological order)."""
    finish: dict[str, float] = {}
    for task in tasks:
        finish[task.name] = task.runtime + max((finish[d] for d in task.deps), default=0.0)
    return max(finish.values(), default=0.0)


def total_work(tasks: Iterable[Task]) -> float:
    return sum(t.runtime for t in tasks)


def lower_bound(tasks: Sequence[Task], cores: int) -> float:
    """No schedule of single-core jobs on ``cores`` cores ends before max(critical path, work / cores)."""
    return max(critical_path(tasks), total_work(tasks) / cores)


def ancestor_bound(tasks: Sequence[Task], cores: int) -> float:
    """A tighter lower bound: for every job j, max(head(j), work of j's ancestors / cores) + tail(j).

    Every ancestor of j must end before j starts, so j cannot start before their work spread over all
    cores, nor before its longest chain of ancestors (head); from its start, the longest path through
    it to a sink (tail, counting j) still has to run. It catches what max(CP, W/m) misses: a long job
    that must wait for a big fan (CyberShake's ZipSeis after every seismogram).
    """
    position = {t.name: i for i, t in enumerate(tasks)}
    ancestors: list[int] = []  # bit i set = task i is an ancestor
    for task in tasks:
        mask = 0
        for d in task.deps:
            i = position[d]
            mask |= ancestors[i] | (1 << i)
        ancestors.append(mask)
    head, tail = _heads_and_tails(tasks)
    best = lower_bound(tasks, cores)
    for i in range(len(tasks)):
        mask, work, bit = ancestors[i], 0.0, 0
        while mask:
            if mask & 1:
                work += tasks[bit].runtime
            mask >>= 1
            bit += 1
        best = max(best, max(head[i], work / cores) + tail[i])
    return best


def _heads_and_tails(tasks: Sequence[Task]) -> tuple[list[float], list[float]]:
    """Per task: its longest chain of ancestors (head, the earliest it can start) and its longest path
    to a sink counting itself (tail, what must still run from its start)."""
    position = {t.name: i for i, t in enumerate(tasks)}
    head: list[float] = []
    for task in tasks:
        head.append(max((head[position[d]] + tasks[position[d]].runtime for d in task.deps), default=0.0))
    dependents: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for d in task.deps:
            dependents[position[d]].append(i)
    tail = [0.0] * len(tasks)
    for i in range(len(tasks) - 1, -1, -1):
        tail[i] = tasks[i].runtime + max((tail[k] for k in dependents[i]), default=0.0)
    return head, tail


def _overload_root(values: Sequence[float], cores: int) -> float:
    """The window length x > 0 below which ``sum(min(x, v))`` exceeds ``cores * x`` (0 if it never does).

    ``f(x) = sum(min(x, v))`` is concave with ``f(0) = 0``, so ``g(x) = cores * x - f(x)`` is convex:
    negative from 0 up to one root when more than ``cores`` values are positive, then non-negative.
    Where k values lie above x, ``g(x) = (cores - k) x - (sum of all but the k largest)``. Going down
    from k = 0 (x above every value), the first k whose zero of that line is not below the (k+1)-th
    largest value is the root: the previous k put its zero above x's interval, where g > 0. So only the
    ``cores + 1`` largest values are needed (k stays below ``cores``: past it, g only decreases).
    """
    top = heapq.nlargest(cores + 1, values)
    if len(top) <= cores:
        return 0.0
    rest = math.fsum(values)
    for k in range(cores):
        x = rest / (cores - k)
        if top[k] <= x or k == cores - 1:  # the last line holds the root in exact arithmetic
            return x
        rest -= top[k]
    raise AssertionError("cores must be >= 1")


def energetic_bound(tasks: Sequence[Task], cores: int) -> float:
    """A lower bound by energetic reasoning (Lopez & Esquirol; Baptiste, Le Pape & Nuijten), at least
    :func:`ancestor_bound`: no non-preemptive schedule of these single-core jobs ends sooner.

    In a schedule ending by T, each job j runs inside [head(j), T - tail(j) + runtime(j)]. Whatever
    its start there, it spends at least ``min(runtime, head + runtime - a, tail - c)`` (0 if negative)
    inside the window [a, T - c] (the less of its overlaps when pushed fully left or fully right), and
    never more than the window's length; ``cores`` cores give the window ``cores x (T - c - a)``. Both
    overlaps are independent of T, so for each window the smallest length that holds its mandatory work
    is :func:`_overload_root`, and T >= a + c + that length. The windows tried start at a head and end a
    tail (or a tail minus its job) before the end. It sees what the other bounds miss: CyberShake's
    seismograms cannot start before their SGT and must end before ZipSeis, and Montage's serial chain
    beside them keeps one core busy through that whole window.
    """
    head, tail = _heads_and_tails(tasks)
    runtime = [t.runtime for t in tasks]
    left_end = [h + p for h, p in zip(head, runtime, strict=True)]
    starts = sorted(set(head))
    ends = sorted(set(tail) | {tl - p for tl, p in zip(tail, runtime, strict=True)})
    # Upper bounds of a window's mandatory work from each side alone, to skip windows that cannot win.
    after = {a: math.fsum(min(p, e - a) for p, e in zip(runtime, left_end, strict=True) if e > a) for a in starts}
    before = {c: math.fsum(min(p, tl - c) for p, tl in zip(runtime, tail, strict=True) if tl > c) for c in ends}
    best = ancestor_bound(tasks, cores)
    for a in starts:
        for c in ends:
            if a + c + min(after[a], before[c]) / cores <= best:
                continue
            work = [min(p, e - a, tl - c) for p, e, tl in zip(runtime, left_end, tail, strict=True) if e > a and tl > c]
            length = _overload_root(work, cores)
            if length > 0:
                best = max(best, a + c + length)
    return best


def greedy_bound(tasks: Sequence[Task], cores: int) -> float:
    """Graham's bound: any schedule that never idles a core while a job is ready ends by W/m + (1-1/m) CP.

    Every policy of the benchmark is such a schedule, so this caps how badly FIFO or random can do, and
    hence how much better than FIFO pressure can possibly be on a workload.
    """
    return total_work(tasks) / cores + (1 - 1 / cores) * critical_path(tasks)


# -- helpers --------------------------------------------------------------------------------------


def _runtime(rng: random.Random, mean: float) -> float:
    """A run time around ``mean`` (log-normal, median-corrected so the mean stays ``mean``), in ms steps."""
    value = mean * math.exp(rng.gauss(-SPREAD * SPREAD / 2, SPREAD))
    return max(0.001, round(value, 3))


class _Builder:
    """Collects tasks of one request in the order they are added."""

    def __init__(self, rng: random.Random, means: Mapping[str, float], prefix: str = "") -> None:
        self.rng = rng
        self.means = means
        self.prefix = prefix
        self.tasks: list[Task] = []

    def add(self, kind: str, label: str, deps: Iterable[str] = ()) -> str:
        name = f"{self.prefix}{kind}_{label}" if label else f"{self.prefix}{kind}"
        self.tasks.append(Task(name, kind, _runtime(self.rng, self.means[kind]), tuple(deps)))
        return name

    def request(self, name: str) -> Request:
        check(self.tasks)
        return Request(name, tuple(self.tasks))


# -- synthetic shapes -----------------------------------------------------------------------------


def random_layered(
    rng: random.Random,
    *,
    layers: int = 12,
    width: tuple[int, int] = (8, 60),
    max_deps: int = 3,
    mean: float = 60.0,
    sigma: float = 0.8,
    name: str = "layered",
) -> Workload:
    """Random layered DAG: each job depends on 1..max_deps jobs of the layers above (mostly the last one).

    Run times are log-normal with a wide spread (``sigma``), so some paths are much longer than others
    and the order among ready jobs matters. Stage order = layer by layer.
    """
    tasks: list[Task] = []
    previous: list[list[str]] = []
    for level in range(layers):
        current = []
        for i in range(rng.randint(*width)):
            deps: set[str] = set()
            if previous:
                for _ in range(rng.randint(1, max_deps)):
                    back = 1 if rng.random() < 0.8 or len(previous) < 2 else rng.randint(2, min(3, len(previous)))
                    deps.add(rng.choice(previous[-back]))
            job = f"L{level}_{i}"
            runtime = max(0.001, round(mean * math.exp(rng.gauss(-sigma * sigma / 2, sigma)), 3))
            tasks.append(Task(job, f"layer{level % 4}", runtime, tuple(sorted(deps))))
            current.append(job)
        previous.append(current)
    check(tasks)
    return Workload(
        name,
        (Request(name, tuple(tasks)),),
        note=f"{len(tasks)} jobs in {layers} layers",
        tags=frozenset({"synthetic"}),
    )


def _chains(rng: random.Random, n_chains: int, length: int, link: float) -> list[Task]:
    """``n_chains`` chains of ``length`` jobs of about ``link`` seconds, listed link level by link level."""
    tasks = []
    for step in range(length):
        for c in range(n_chains):
            deps = (f"chain{c}_{step - 1}",) if step else ()
            tasks.append(Task(f"chain{c}_{step}", "chain", _runtime(rng, link), deps))
    return tasks


def _fan(rng: random.Random, size: int, low: float, high: float) -> list[Task]:
    return [Task(f"fan_{i}", "fan", round(rng.uniform(low, high), 3)) for i in range(size)]


def chains_and_fans(
    rng: random.Random,
    *,
    n_chains: int = 4,
    length: int = 25,
    link: float = 60.0,
    fan: int = 400,
    fan_runtime: tuple[float, float] = (10.0, 50.0),
    split: bool = False,
) -> Workload:
    """Long chains beside a wide fan of short independent jobs.

    One request (stage order: the first link of every chain and the whole fan, then the chains' later
    links level by level — a breadth-first listing), or with ``split`` two requests submitted together:
    the fan as one request (a bag of short jobs) and the chains as another.
    """
    chains = _chains(rng, n_chains, length, link)
    bag = _fan(rng, fan, *fan_runtime)
    note = f"{n_chains} chains x {length} x ~{link:g}s beside {fan} jobs of {fan_runtime[0]:g}-{fan_runtime[1]:g}s"
    if split:
        check(bag)
        check(chains)
        return Workload(
            "chains+fan (2 req)",
            (Request("fan", tuple(bag)), Request("chains", tuple(chains))),
            note=note + ", fan request first",
            tags=frozenset({"synthetic", "multi"}),
        )
    tasks = chains[:n_chains] + bag + chains[n_chains:]
    check(tasks)
    return Workload("chains+fan", (Request("chains+fan", tuple(tasks)),), note=note, tags=frozenset({"synthetic"}))


# -- scientific workflows (Bharathi et al. 2008, Pegasus gallery) ----------------------------------


def montage(rng: random.Random, *, rows: int = 10, cols: int = 10, prefix: str = "") -> Request:
    """Montage mosaic of a rows x cols grid of input images.

    mProjectPP per image; mDiffFit per overlapping pair (right, below and diagonal neighbours), each on
    its two projections; mConcatFit on all fits; mBgModel; mBackground per image on the model and its
    projection; mImgtbl on all corrected images; then mAdd, mShrink, mJPEG in a line.
    """
    b = _Builder(rng, MONTAGE_RUNTIME, prefix)
    proj = {(r, c): b.add("mProjectPP", f"{r}_{c}") for r in range(rows) for c in range(cols)}
    fits = []
    for (r, c), p in proj.items():
        for dr, dc in ((0, 1), (1, 0), (1, 1)):
            other = proj.get((r + dr, c + dc))
            if other is not None:
                fits.append(b.add("mDiffFit", f"{r}_{c}_{r + dr}_{c + dc}", (p, other)))
    concat = b.add("mConcatFit", "", fits)
    model = b.add("mBgModel", "", (concat,))
    backgrounds = [b.add("mBackground", f"{r}_{c}", (model, p)) for (r, c), p in proj.items()]
    table = b.add("mImgtbl", "", backgrounds)
    add = b.add("mAdd", "", (table,))
    shrink = b.add("mShrink", "", (add,))
    b.add("mJPEG", "", (shrink,))
    return b.request(f"{prefix}montage")


def cybershake(rng: random.Random, *, sgts: int = 4, synth: int = 497, prefix: str = "") -> Request:
    """CyberShake hazard curve of one site.

    ExtractSGT per rupture group; SeismogramSynthesis per rupture variation on its group's SGT; a
    PeakValCalcOkaya per seismogram; ZipSeis gathers every seismogram and ZipPSA every peak value.
    """
    b = _Builder(rng, CYBERSHAKE_RUNTIME, prefix)
    extracts = [b.add("ExtractSGT", str(i)) for i in range(sgts)]
    seis = [b.add("SeismogramSynthesis", str(i), (extracts[i * sgts // synth],)) for i in range(synth)]
    peaks = [b.add("PeakValCalcOkaya", str(i), (s,)) for i, s in enumerate(seis)]
    b.add("ZipSeis", "", seis)
    b.add("ZipPSA", "", peaks)
    return b.request(f"{prefix}cybershake")


def epigenomics(rng: random.Random, *, lanes: int = 4, chunks: int = 24, prefix: str = "") -> Request:
    """Epigenomics (USC genome sequencing pipeline).

    fastqSplit per lane cuts it into chunks; each chunk runs filterContams -> sol2sanger -> fastq2bfq ->
    map; mapMerge per lane on its maps; a global mapMerge on the lanes; maqIndex; pileup.
    """
    b = _Builder(rng, EPIGENOMICS_RUNTIME, prefix)
    splits = [b.add("fastqSplit", str(lane)) for lane in range(lanes)]
    stages = ("filterContams", "sol2sanger", "fastq2bfq", "map")
    heads = {(lane, k): splits[lane] for lane in range(lanes) for k in range(chunks)}
    for stage in stages:
        for (lane, k), dep in heads.items():
            heads[lane, k] = b.add(stage, f"{lane}_{k}", (dep,))
    merges = [b.add("mapMerge", str(lane), [heads[lane, k] for k in range(chunks)]) for lane in range(lanes)]
    final = b.add("mapMerge", "all", merges)
    index = b.add("maqIndex", "", (final,))
    b.add("pileup", "", (index,))
    return b.request(f"{prefix}epigenomics")


def ligo(rng: random.Random, *, groups: Sequence[int] = (4, 6, 8, 10, 12, 5, 7, 9), prefix: str = "") -> Request:
    """LIGO Inspiral analysis: independent blocks, one per group of data segments of the given sizes.

    In each block: TmpltBank per segment -> Inspiral on it -> Thinca on all the block's inspirals ->
    TrigBank per segment on the Thinca -> a second Inspiral on each -> a second Thinca on them all.
    Stage order: each stage across all blocks before the next.
    """
    b = _Builder(rng, LIGO_RUNTIME, prefix)
    banks = {(g, i): b.add("TmpltBank", f"{g}_{i}") for g, n in enumerate(groups) for i in range(n)}
    first = {key: b.add("Inspiral", f"{key[0]}_{key[1]}_a", (bank,)) for key, bank in banks.items()}
    thinca1 = {g: b.add("Thinca", f"{g}_a", [first[g, i] for i in range(n)]) for g, n in enumerate(groups)}
    trig = {(g, i): b.add("TrigBank", f"{g}_{i}", (thinca1[g],)) for g, n in enumerate(groups) for i in range(n)}
    second = {key: b.add("Inspiral", f"{key[0]}_{key[1]}_b", (t,)) for key, t in trig.items()}
    for g, n in enumerate(groups):
        b.add("Thinca", f"{g}_b", [second[g, i] for i in range(n)])
    return b.request(f"{prefix}ligo")


def scientific(name: str, request: Request, note: str) -> Workload:
    return Workload(name, (request,), note=note, tags=frozenset({"scientific"}))


def standard(seed: int = 1) -> list[Workload]:
    """The benchmark's workload set, all drawn from one seed."""
    rng = random.Random(seed)
    mont = montage(rng)
    cyber = cybershake(rng)
    epi = epigenomics(rng)
    lig = ligo(rng)
    out = [
        random_layered(random.Random(seed * 1000 + 1), name="layered A"),
        random_layered(random.Random(seed * 1000 + 2), layers=20, width=(4, 30), max_deps=2, name="layered B"),
        random_layered(random.Random(seed * 1000 + 3), layers=6, width=(30, 120), max_deps=4, name="layered C"),
        chains_and_fans(random.Random(seed * 1000 + 4)),
        chains_and_fans(random.Random(seed * 1000 + 4), split=True),
        scientific("montage", mont, "10x10 images"),
        scientific("cybershake", cyber, "4 SGT, 497 seismograms"),
        scientific("epigenomics", epi, "4 lanes x 24 chunks"),
        scientific("ligo", lig, "8 blocks of 4-12 segments"),
        Workload(
            "montage+cybershake (2 req)",
            (montage(rng, rows=6, cols=6, prefix="m."), cybershake(rng, sgts=2, synth=150, prefix="c.")),
            note="a 6x6 Montage and a 150-seismogram CyberShake submitted together",
            tags=frozenset({"scientific", "multi"}),
        ),
    ]
    for workload in out:
        check(workload.tasks)
    return out


# -- a workflow with a widely spread rule (estimates: issue 17 part 2) ---------------------------------

#: Mean run times (s) of SIPHT's steps, Bharathi et al. 2008. The five Blast steps run one program on
#: inputs of very different sizes: one rule, ``blast``, whose run times spread from 0.6 s to 3311 s.
SIPHT_RUNTIME = {
    "Patser": 0.96,
    "Patser_concate": 0.03,
    "Transterm": 32.41,
    "Findterm": 594.94,
    "RNAMotif": 25.69,
    "Blast": 3311.12,
    "SRNA": 12.44,
    "FFN_parse": 0.73,
    "Blast_synteny": 3.37,
    "Blast_candidate": 0.6,
    "Blast_QRNA": 440.88,
    "Blast_paralogues": 0.68,
    "SRNA_annotate": 0.14,
}
SIPHT_RULE = {step: "blast" if step.startswith("Blast") else step for step in SIPHT_RUNTIME}


def sipht(rng: random.Random, *, replicons: int = 24, patsers: int = 12, prefix: str = "") -> Request:
    """SIPHT (sRNA search) over ``replicons`` genomes: per replicon, ``patsers`` Patser jobs and their
    Patser_concate; Transterm, Findterm, RNAMotif and Blast, all feeding SRNA; after SRNA, FFN_parse and
    the four other Blast steps; SRNA_annotate on them all and the Patser_concate.

    Each task's kind is its *rule* (:data:`SIPHT_RULE`): the five Blast steps share the rule ``blast``, so
    a rule's learnt mean says nothing of which of its jobs is the long one; only a job's own hint does.
    """
    b = _Builder(rng, SIPHT_RUNTIME, prefix)

    def add(step: str, label: str, deps: Iterable[str] = ()) -> str:
        name = b.add(step, label, deps)
        last = b.tasks[-1]
        b.tasks[-1] = Task(last.name, SIPHT_RULE[step], last.runtime, last.deps)
        return name

    for r in range(replicons):
        concat = add("Patser_concate", str(r), [add("Patser", f"{r}_{i}") for i in range(patsers)])
        srna = add("SRNA", str(r), [add(step, str(r)) for step in ("Transterm", "Findterm", "RNAMotif", "Blast")])
        after = [
            add(step, str(r), (srna,))
            for step in ("FFN_parse", "Blast_synteny", "Blast_candidate", "Blast_QRNA", "Blast_paralogues")
        ]
        add("SRNA_annotate", str(r), [*after, concat])
    return b.request(f"{prefix}sipht")
