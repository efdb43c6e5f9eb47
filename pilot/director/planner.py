"""The provisioning planner: how many pilots, of which shape, a queue's waiting demand needs.

The site director calls :func:`plan` once per queue and cycle with the jobs that queue can serve, the
queue's pilot shapes and the pilots it already has in the batch system. The answer says which jobs the
existing pilots will take, which new pilots to submit (and for how long), which queued pilots to cancel
because their demand is gone, and which jobs no shape can hold.

The model is the Seven Bridges one: a job reserves its cores, memory and scratch in one pilot for its
whole run, so packing is *spatial* (at no moment do a pilot's jobs add up to more than its shape), and
the cost of a plan is the sum of its new pilots' cost per hour. Time enters in two places: a job whose
run time exceeds a shape's wall (or an existing pilot's time left) cannot go there, and each new pilot
asks the batch system for the wall its jobs need (:func:`pilot_wall`).

Two packers share the same first-fit core (:func:`plan_seed` is the seed's algorithm as written):

* **seed** — order jobs by the cost of the cheapest shape that holds them, most expensive first;
  first-fit them into pilots ordered least free room first; for the first job left over, open the
  cheapest shape that holds it (or its instance-type hint) and repeat.
* **ours** — the same order (then by urgency), the same first-fit into the existing pilots, but when
  a pilot must be opened every shape that holds the first left-over job is tried: each is filled,
  greedily and in order, from the remaining demand, and the shape with the lowest cost per unit of
  packed work wins (see :func:`_job_value`). Then under-filled new pilots are consolidated: each moves
  to the cheapest shape that still holds its jobs, and pairs merge while one shape holding both is
  cheaper than the two.

:func:`plan` runs both packers on what the existing pilots left, consolidates both, and keeps the
cheaper; so its new pilots never cost more than the seed's, and ``scripts/bench_provision.py`` measures
how often and by how much our packer alone wins.

Caps (open-lmake's ``n_max_queued_jobs``): at most ``n_max_queued`` queued pilots (existing queued ones
that keep work plus new ones) per shape, running pilots not counted; at most ``max_running`` pilots in
all (running + queued + new) for the queue. When a cap cuts, the new pilots whose most urgent job is
most urgent are kept, the jobs of the dropped ones are first-fitted into the spare room of the kept
ones (most urgent first), and the rest are packed again onto the shapes that still have room under
their cap. Pilots are kept as an urgency prefix: once a cap cuts one, the less urgent pilots behind it
are packed again in the next round even if their shape has room, so a cheap-to-keep tail pilot never
displaces more urgent work. What no shape may take is *deferred* to the next cycle, with the reason.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from taskqueues.errors import ConfigError, ValidationError
from taskqueues.shapes import Shape

#: Relative tolerance when comparing costs and packing scores (floats summed in different orders).
_EPS = 1e-9
#: How many of the least filled new pilots the pair-merge step considers (it is quadratic in this).
_MERGE_WINDOW = 48


@dataclass(frozen=True)
class Demand:
    """One waiting job a queue can serve, with its exact resources (cores, MB, MB, seconds).

    ``start_by`` is the job's urgency score (the date it should start by; lower is more urgent) and
    ``shape_hint`` the Seven Bridges instance-type hint: when set, the job runs on that shape only.
    """

    job: str
    cpu: int
    mem: int
    tmp: int = 0
    wall: float = 0.0
    start_by: float = 0.0
    shape_hint: str | None = None


@dataclass
class ExistingPilot:
    """A pilot of this queue already running (``queued=False``) or waiting in the batch system."""

    id: str
    shape: Shape
    queued: bool
    free_cpu: int
    free_mem: int
    free_tmp: int
    time_left: float


@dataclass
class PlannedPilot:
    """A new pilot to submit: its shape, the jobs planned onto it, the wall to ask for (s), its priority."""

    shape: Shape
    jobs: list[Demand]
    wall: int
    start_by: float

    @property
    def cost(self) -> float:
        """Cost per hour of this pilot (its shape's)."""
        return self.shape.cost


@dataclass
class Plan:
    """What the director should do for one queue this cycle.

    ``placed`` maps a job to the existing pilot expected to take it; ``cancel`` lists queued pilots with
    nothing planned for them; ``unplaceable`` and ``deferred`` map a job to the reason it got no pilot
    (no shape can ever hold it / a cap stopped it this cycle).
    """

    new: list[PlannedPilot] = field(default_factory=list)
    placed: dict[str, str] = field(default_factory=dict)
    cancel: list[str] = field(default_factory=list)
    unplaceable: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)

    @property
    def cost(self) -> float:
        """Cost per hour of the new pilots (existing pilots are already paid for)."""
        return math.fsum(p.shape.cost for p in self.new)


# --------------------------------------------------------------------------------------------------
# Checks on the inputs
# --------------------------------------------------------------------------------------------------


def _shortfall(job: Demand, shape: Shape) -> str:
    """Name every resource of ``job`` that ``shape`` lacks, for error messages."""
    short = [
        f"{name} {need:g} > {have:g}"
        for name, need, have in (
            ("cpu", job.cpu, shape.cpu),
            ("mem", job.mem, shape.mem),
            ("tmp", job.tmp, shape.tmp),
            ("wall", job.wall, shape.wall),
        )
        if need > have
    ]
    return ", ".join(short)


def shape_holds(shape: Shape, job: Demand) -> bool:
    """True when an empty pilot of ``shape`` can run ``job`` (resources, wall, and its hint if any)."""
    return shape.holds(job.cpu, job.mem, job.tmp, job.wall) and job.shape_hint in (None, shape.name)


def check_hint(demand: Demand, shapes: Sequence[Shape]) -> None:
    """Refuse, at submission, an instance-type hint that names no shape or a shape too small for the job.

    The seed raises an error when the hinted instance cannot hold the job; we raise it before the job
    waits, so the user sees it at once rather than as a job that never starts.
    """
    if demand.shape_hint is None:
        return
    by_name = {s.name: s for s in shapes}
    shape = by_name.get(demand.shape_hint)
    if shape is None:
        known = ", ".join(sorted(by_name)) or "none"
        raise ValidationError(
            f"hinted shape {demand.shape_hint!r} is not a shape of this queue (known: {known})",
            job=demand.job,
            field="shape_hint",
        )
    if not shape.holds(demand.cpu, demand.mem, demand.tmp, demand.wall):
        raise ValidationError(
            f"hinted shape {shape.name!r} cannot hold the job ({_shortfall(demand, shape)})",
            job=demand.job,
            field="shape_hint",
        )


def _check_inputs(demand: Sequence[Demand], shapes: Sequence[Shape], existing: Sequence[ExistingPilot]) -> None:
    names: set[str] = set()
    for shape in shapes:
        if shape.name in names:
            raise ConfigError(f"shape {shape.name!r} appears twice in the catalog")
        names.add(shape.name)
        if min(shape.cpu, shape.mem, shape.tmp, shape.wall) < 0 or not shape.cost >= 0:
            raise ConfigError(f"shape {shape.name!r}: cpu, mem, tmp, wall and cost must be >= 0")
    jobs: set[str] = set()
    for job in demand:
        if job.job in jobs:
            raise ValidationError("job appears twice in the demand", job=job.job)
        jobs.add(job.job)
        for name, value in (("cpu", job.cpu), ("mem", job.mem), ("tmp", job.tmp), ("wall", job.wall)):
            if not (value >= 0 and math.isfinite(value)):
                raise ValidationError(f"must be a finite number >= 0, got {value!r}", job=job.job, field=name)
    pilots: set[str] = set()
    for pilot in existing:
        if pilot.id in pilots:
            raise ValidationError(f"pilot {pilot.id!r} appears twice among the existing pilots")
        pilots.add(pilot.id)


def _why_unplaceable(job: Demand, shapes: Sequence[Shape]) -> str:
    if job.shape_hint is not None:
        hinted = [s for s in shapes if s.name == job.shape_hint]
        if not hinted:
            return f"hinted shape {job.shape_hint!r} is not a shape of this queue"
        return f"hinted shape {job.shape_hint!r} cannot hold it ({_shortfall(job, hinted[0])})"
    if not shapes:
        return "the queue has no shapes"
    parts = [f"{s.name}: {_shortfall(job, s)}" for s in shapes]
    return "no shape holds it (" + "; ".join(parts) + ")"


# --------------------------------------------------------------------------------------------------
# Wall estimate
# --------------------------------------------------------------------------------------------------


def estimate_wall(jobs: Iterable[Demand], cores: int) -> float:
    """Seconds a pilot with ``cores`` cores needs to run ``jobs``, starting freed cores on the next job.

    Longest job first, each job takes the ``cpu`` least loaded cores and starts when the busiest of them
    frees (list scheduling). When the jobs fit side by side, as the planner packs them, this is the
    longest job; when they do not (a caller stacking more work on a pilot), it is the makespan of that
    greedy order, never less than the longest job.
    """
    lanes = [0.0] * max(cores, 1)
    longest = 0.0
    for job in sorted(jobs, key=lambda j: -j.wall):
        longest = max(longest, job.wall)
        take = min(max(job.cpu, 1), len(lanes))
        lanes.sort()
        start = lanes[take - 1]
        for i in range(take):
            lanes[i] = start + job.wall
    return max(max(lanes), longest)


def pilot_wall(jobs: Iterable[Demand], shape: Shape, granularity: int = 60) -> int:
    """The wall to ask for: :func:`estimate_wall` rounded up to ``granularity``, at least one step,
    at most the shape's wall (jobs longer than that are never planned on the shape)."""
    if granularity <= 0:
        raise ConfigError(f"wall_granularity must be > 0 seconds, got {granularity}")
    need = max(estimate_wall(jobs, shape.cpu), 1.0)
    return min(granularity * math.ceil(need / granularity), shape.wall)


# --------------------------------------------------------------------------------------------------
# Bins: a pilot being filled
# --------------------------------------------------------------------------------------------------


class _Bin:
    """A pilot (existing or new) with the room it has left and the jobs planned onto it."""

    __slots__ = ("cpu", "jobs", "mem", "pilot", "shape", "time_left", "tmp")

    def __init__(self, shape: Shape, cpu: int, mem: int, tmp: int, time_left: float, pilot: ExistingPilot | None):
        self.shape = shape
        self.cpu = cpu
        self.mem = mem
        self.tmp = tmp
        self.time_left = time_left
        self.pilot = pilot
        self.jobs: list[Demand] = []

    @classmethod
    def fresh(cls, shape: Shape) -> _Bin:
        return cls(shape, shape.cpu, shape.mem, shape.tmp, shape.wall, None)

    @classmethod
    def of(cls, pilot: ExistingPilot) -> _Bin:
        return cls(pilot.shape, pilot.free_cpu, pilot.free_mem, pilot.free_tmp, pilot.time_left, pilot)

    def fits(self, job: Demand) -> bool:
        return (
            job.cpu <= self.cpu
            and job.mem <= self.mem
            and job.tmp <= self.tmp
            and job.wall <= self.time_left
            and job.shape_hint in (None, self.shape.name)
        )

    def add(self, job: Demand) -> None:
        self.cpu -= job.cpu
        self.mem -= job.mem
        self.tmp -= job.tmp
        self.jobs.append(job)

    def room(self) -> tuple[int, int, int, float]:
        """Sort key for first-fit: least free room first (cores, then memory, scratch, time)."""
        return (self.cpu, self.mem, self.tmp, self.time_left)

    def starved(self, floor: tuple[int, int, int]) -> bool:
        """True when not even the smallest job (per resource) could still fit."""
        return self.cpu < floor[0] or self.mem < floor[1] or self.tmp < floor[2]

    def hint(self) -> str | None:
        """The shape a hinted job on this bin pins it to, if any."""
        return next((j.shape_hint for j in self.jobs if j.shape_hint is not None), None)

    def start_by(self) -> float:
        return min((j.start_by for j in self.jobs), default=math.inf)


def _floor(jobs: Iterable[Demand]) -> tuple[int, int, int]:
    cpu = mem = tmp = None
    for job in jobs:
        cpu = job.cpu if cpu is None else min(cpu, job.cpu)
        mem = job.mem if mem is None else min(mem, job.mem)
        tmp = job.tmp if tmp is None else min(tmp, job.tmp)
    return (cpu or 0, mem or 0, tmp or 0)


def _fill(bin_: _Bin, queue: Sequence[Demand], floor: tuple[int, int, int]) -> list[Demand]:
    """Put into ``bin_``, in queue order, every job that still fits; return the jobs left over."""
    left: list[Demand] = []
    for i, job in enumerate(queue):
        if bin_.fits(job):
            bin_.add(job)
            if bin_.starved(floor):
                left.extend(queue[i + 1 :])
                break
        else:
            left.append(job)
    return left


def _first_fit(bins: list[_Bin], jobs: Sequence[Demand]) -> list[Demand]:
    """Place each job in the first bin, least free room first, that fits it; return the jobs left over.

    ``bins`` stays sorted by :meth:`_Bin.room` as jobs land (a bin that received a job moves forward),
    and bins too full for the smallest job are set aside, so a pass stays cheap on long demand lists.
    """
    floor = _floor(jobs)
    order = sorted((b for b in bins if not b.starved(floor)), key=_Bin.room)
    left: list[Demand] = []
    for job in jobs:
        for i, bin_ in enumerate(order):
            if bin_.fits(job):
                bin_.add(job)
                del order[i]
                if not bin_.starved(floor):
                    insort(order, bin_, key=_Bin.room)
                break
        else:
            left.append(job)
    return left


# --------------------------------------------------------------------------------------------------
# Shape choice
# --------------------------------------------------------------------------------------------------


def _cheapest(shapes: Sequence[Shape], accepts: Callable[[Shape], bool]) -> Shape | None:
    """The cheapest shape ``accepts`` takes; ties go to the earlier shape of the catalog."""
    best: Shape | None = None
    for shape in shapes:
        if accepts(shape) and (best is None or shape.cost < best.cost):
            best = shape
    return best


def _cheapest_holding(shapes: Sequence[Shape], job: Demand) -> Shape | None:
    """The seed's ``allocate_new_instances`` choice: the hinted shape, else the cheapest holding ``job``."""
    return _cheapest(shapes, lambda s: shape_holds(s, job))


def _job_value(job: Demand, shapes: Sequence[Shape]) -> float:
    """What a job is worth, in cost per hour: its dominant share of the shape that runs it most cheaply.

    On a shape, a job uses ``max(cpu/shape.cpu, mem/shape.mem, tmp/shape.tmp)`` of it (no other job can
    use that fraction of the scarcest resource); times the shape's cost, the cheapest such figure over
    the shapes that hold the job is what a perfect packing would pay for it. A candidate pilot's score is
    the summed value of the jobs it would absorb over its cost: 1.0 means it wastes nothing.
    """
    best = math.inf
    for shape in shapes:
        if not shape_holds(shape, job):
            continue
        share = max(
            job.cpu / shape.cpu if shape.cpu else 0.0,
            job.mem / shape.mem if shape.mem else 0.0,
            job.tmp / shape.tmp if shape.tmp else 0.0,
        )
        best = min(best, share * shape.cost)
    return best


def _order(jobs: Iterable[Demand], shapes: Sequence[Shape], *, urgency: bool) -> list[Demand]:
    """Most expensive to serve first (the seed's ``prioritize_jobs``); ours breaks ties by urgency."""

    def cost_of(job: Demand) -> float:
        shape = _cheapest_holding(shapes, job)
        return math.inf if shape is None else shape.cost

    if urgency:
        return sorted(jobs, key=lambda j: (-cost_of(j), j.start_by, j.job))
    return sorted(jobs, key=lambda j: -cost_of(j))


def _pack_seed(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[_Bin]:
    """The seed's loop for the jobs existing pilots could not take: open the cheapest shape that holds
    the first job left (or its hint), fill it first-fit, repeat. ``jobs`` are in priority order and each
    is held by some shape."""
    bins: list[_Bin] = []
    floor = _floor(jobs)
    left = list(jobs)
    while left:
        first = left[0]
        shape = _cheapest_holding(shapes, first)
        if shape is None:  # the caller filtered these out; keep the loop total anyway
            raise ValidationError(_why_unplaceable(first, shapes), job=first.job)
        bin_ = _Bin.fresh(shape)
        left = _fill(bin_, left, floor)
        bins.append(bin_)
    return bins


def _pack_ours(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[_Bin]:
    """Like :func:`_pack_seed`, but the shape of each new pilot is the one with the best score
    (value absorbed / cost, see :func:`_job_value`); ties go to the shape absorbing more jobs (fewer
    pilots to submit), then to the cheaper one."""
    value = {j.job: _job_value(j, shapes) for j in jobs}
    bins: list[_Bin] = []
    floor = _floor(jobs)
    left = list(jobs)
    while left:
        first = left[0]
        best: tuple[float, int, float] | None = None
        chosen: tuple[_Bin, list[Demand]] | None = None
        for shape in shapes:
            if not shape_holds(shape, first):
                continue
            trial = _Bin.fresh(shape)
            rest = _fill(trial, left, floor)
            absorbed = math.fsum(value[j.job] for j in trial.jobs)
            score = absorbed / shape.cost if shape.cost > 0 else math.inf
            key = (score, len(trial.jobs), -shape.cost)
            if best is None or _better(key, best):
                best, chosen = key, (trial, rest)
        if chosen is None:
            raise ValidationError(_why_unplaceable(first, shapes), job=first.job)
        bins.append(chosen[0])
        left = chosen[1]
    return bins


_Kind = tuple[int, int, int, str | None, tuple[bool, ...]]


def _kind(job: Demand, shapes: Sequence[Shape]) -> _Kind:
    """Jobs of one kind are interchangeable for packing: same resources, hint, and shapes whose wall
    they fit in."""
    return (job.cpu, job.mem, job.tmp, job.shape_hint, tuple(job.wall <= s.wall for s in shapes))


def _alignment(bin_: _Bin, job: Demand) -> float:
    """Dot product of the job's demand and the pilot's free room, both as fractions of the shape."""
    shape = bin_.shape
    return math.fsum(
        (need / size) * (free / size)
        for need, free, size in (
            (job.cpu, bin_.cpu, shape.cpu),
            (job.mem, bin_.mem, shape.mem),
            (job.tmp, bin_.tmp, shape.tmp),
        )
        if size
    )


def _pack_balanced(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[_Bin]:
    """Pilot-centric packing that keeps each pilot's resources in balance.

    Cost-ordered first-fit fills a pilot with the expensive jobs first, so a memory-optimised pilot
    takes only memory-heavy jobs and ends with idle cores while small jobs open pilots of their own.
    Here a pilot is opened for the most expensive job left (shape chosen by the same score as
    :func:`_pack_ours`), then filled by repeatedly adding the job whose demand lines up best with the
    room left (the dot-product rule of vector bin packing, Panigrahy et al. 2011), so memory-heavy and
    core-heavy jobs share pilots. Jobs are grouped by :func:`_kind`, most urgent first inside a kind,
    which keeps each step linear in the number of kinds, not of jobs.
    """
    value = {j.job: _job_value(j, shapes) for j in jobs}
    ordered = _order(jobs, shapes, urgency=True)
    rank = {j.job: i for i, j in enumerate(ordered)}
    kinds: dict[_Kind, list[Demand]] = {}  # each stack has its earliest-ranked job on top (last)
    for job in reversed(ordered):
        kinds.setdefault(_kind(job, shapes), []).append(job)
    bins: list[_Bin] = []
    while kinds:
        head = min(kinds, key=lambda k: rank[kinds[k][-1].job])
        first = kinds[head][-1]
        best: tuple[float, int, float] | None = None
        chosen: tuple[_Bin, Counter[_Kind]] | None = None
        for shape in shapes:
            if not shape_holds(shape, first):
                continue
            trial, used = _Bin.fresh(shape), Counter({head: 1})
            trial.add(first)
            open_kinds = [k for k, stack in kinds.items() if shape_holds(shape, stack[-1])]
            while open_kinds:
                open_kinds = [k for k in open_kinds if used[k] < len(kinds[k]) and trial.fits(kinds[k][-1])]
                if not open_kinds:
                    break
                pick = max(open_kinds, key=lambda k: (_alignment(trial, kinds[k][-1]), -rank[kinds[k][-1].job]))
                trial.add(kinds[pick][-1 - used[pick]])
                used[pick] += 1
            score = math.fsum(value[j.job] for j in trial.jobs) / shape.cost if shape.cost > 0 else math.inf
            key = (score, len(trial.jobs), -shape.cost)
            if best is None or _better(key, best):
                best, chosen = key, (trial, used)
        if chosen is None:
            raise ValidationError(_why_unplaceable(first, shapes), job=first.job)
        bins.append(chosen[0])
        for kind, count in chosen[1].items():
            del kinds[kind][-count:]
            if not kinds[kind]:
                del kinds[kind]
    return bins


def _better(key: tuple[float, int, float], than: tuple[float, int, float]) -> bool:
    """Compare (score, jobs, -cost) keys with a tolerance on the float score."""
    if not math.isclose(key[0], than[0], rel_tol=_EPS):
        return key[0] > than[0]
    return key[1:] > than[1:]


# --------------------------------------------------------------------------------------------------
# Consolidation
# --------------------------------------------------------------------------------------------------


def _rehouse(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> _Bin | None:
    """The cheapest fresh pilot that holds all ``jobs`` side by side, or None."""
    hints = {j.shape_hint for j in jobs if j.shape_hint is not None}
    if len(hints) > 1:
        return None
    cpu = sum(j.cpu for j in jobs)
    mem = sum(j.mem for j in jobs)
    tmp = sum(j.tmp for j in jobs)
    wall = max((j.wall for j in jobs), default=0.0)
    hint = next(iter(hints), None)
    shape = _cheapest(shapes, lambda s: s.holds(cpu, mem, tmp, wall) and hint in (None, s.name))
    if shape is None:
        return None
    bin_ = _Bin.fresh(shape)
    for job in jobs:
        bin_.add(job)
    return bin_


def _fill_ratio(bin_: _Bin) -> float:
    shape = bin_.shape
    return max(
        1 - bin_.cpu / shape.cpu if shape.cpu else 0.0,
        1 - bin_.mem / shape.mem if shape.mem else 0.0,
        1 - bin_.tmp / shape.tmp if shape.tmp else 0.0,
    )


def _consolidate(bins: list[_Bin], shapes: Sequence[Shape]) -> list[_Bin]:
    """Move each new pilot to the cheapest shape holding its jobs, then merge pairs of the least filled
    pilots while one shape holding both costs less than the two (best saving first)."""
    out: list[_Bin] = []
    for bin_ in bins:
        smaller = _rehouse(bin_.jobs, shapes)
        out.append(smaller if smaller is not None and smaller.shape.cost < bin_.shape.cost else bin_)
    out.sort(key=_fill_ratio)
    window, rest = out[:_MERGE_WINDOW], out[_MERGE_WINDOW:]
    while True:
        best: tuple[float, int, int, _Bin] | None = None
        for i in range(len(window)):
            for k in range(i + 1, len(window)):
                pair = window[i].shape.cost + window[k].shape.cost
                if best is not None and pair - best[0] <= 0:
                    continue  # cannot save more than the best found so far
                merged = _rehouse(window[i].jobs + window[k].jobs, shapes)
                if merged is None:
                    continue
                saving = pair - merged.shape.cost
                if saving > _EPS * max(pair, 1.0) and (best is None or saving > best[0]):
                    best = (saving, i, k, merged)
        if best is None:
            break
        _, i, k, merged = best
        window = [b for n, b in enumerate(window) if n not in (i, k)] + [merged]
    return window + rest


def _bins_cost(bins: Iterable[_Bin]) -> float:
    return math.fsum(b.shape.cost for b in bins)


_PACKERS: dict[str, Callable[[Sequence[Demand], Sequence[Shape]], list[_Bin]]] = {
    "first-fit": lambda jobs, shapes: _pack_ours(_order(jobs, shapes, urgency=True), shapes),
    "balanced": _pack_balanced,
    "seed": lambda jobs, shapes: _pack_seed(_order(jobs, shapes, urgency=False), shapes),
}


def _packings(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> dict[str, list[_Bin]]:
    return {name: _consolidate(pack(jobs, shapes), shapes) for name, pack in _PACKERS.items()}


def _pack_best(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[_Bin]:
    """Every packer, consolidated; the cheapest wins (ties: fewer pilots, then the earlier packer)."""
    best: list[_Bin] | None = None
    for bins in _packings(jobs, shapes).values():
        if best is None:
            best = bins
            continue
        cost, best_cost = _bins_cost(bins), _bins_cost(best)
        if math.isclose(cost, best_cost, rel_tol=_EPS, abs_tol=_EPS):
            if len(bins) < len(best):
                best = bins
        elif cost < best_cost:
            best = bins
    return best or []


def packer_costs(demand: Sequence[Demand], shapes: Sequence[Shape]) -> dict[str, float]:
    """Cost per hour of each packer :func:`plan` tries (after consolidation), on an empty fleet and
    without caps, for benchmarks: ``first-fit`` (our shape choice), ``balanced``, ``seed`` (the seed's
    packing, consolidated). Jobs no shape holds are left out."""
    _check_inputs(demand, shapes, ())
    jobs = [j for j in demand if any(shape_holds(s, j) for s in shapes)]
    return {name: _bins_cost(bins) for name, bins in _packings(jobs, shapes).items()}


# --------------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------------


def _planned(bin_: _Bin, granularity: int) -> PlannedPilot:
    jobs = sorted(bin_.jobs, key=lambda j: (j.start_by, j.job))
    return PlannedPilot(bin_.shape, jobs, pilot_wall(jobs, bin_.shape, granularity), bin_.start_by())


def can_serve(pilot: ExistingPilot, demand: Iterable[Demand]) -> bool:
    """True when some job of ``demand`` fits what ``pilot`` has free now (resources, time left, hint)."""
    room = _Bin.of(pilot)
    return any(room.fits(job) for job in demand)


def plan_seed(demand: Sequence[Demand], shapes: Sequence[Shape], *, wall_granularity: int = 60) -> list[PlannedPilot]:
    """The Seven Bridges algorithm as written, on an empty fleet, for comparison with :func:`plan`.

    Its only additions are the ones any valid plan needs: a job's wall must fit the shape's wall, and
    the tmp dimension. Like the seed it raises (:class:`ValidationError`) for a job no shape (or no
    hinted shape) can hold.
    """
    _check_inputs(demand, shapes, ())
    for job in demand:
        check_hint(job, shapes)
        if not any(shape_holds(s, job) for s in shapes):
            raise ValidationError(_why_unplaceable(job, shapes), job=job.job)
    bins = _pack_seed(_order(demand, shapes, urgency=False), shapes)
    return [_planned(b, wall_granularity) for b in bins]


def plan(
    demand: Sequence[Demand],
    shapes: Sequence[Shape],
    existing: Sequence[ExistingPilot],
    *,
    n_max_queued: int | None = 10,
    max_running: int | None = None,
    wall_granularity: int = 60,
    headroom: int = 0,
) -> Plan:
    """Plan one queue's pilots for this cycle (see the module docstring for the algorithm and caps).

    ``n_max_queued`` and ``max_running`` may be None for "no cap". Every job of ``demand`` ends in
    exactly one of ``placed``, a new pilot's ``jobs``, ``unplaceable`` or ``deferred``.

    ``headroom``: seconds of a new pilot's wall kept for its start. A pilot's time left is less than its wall
    as soon as it runs, so a job whose wall is the shape's whole wall would be planned onto pilots that can
    never take it; with a headroom, a new pilot of a shape takes only jobs that leave it that much (the
    director keeps one ``wall_granularity`` step, the step it adds to the wall a pilot asks for).
    """
    if headroom < 0:
        raise ConfigError(f"headroom must be >= 0 seconds, got {headroom}")
    if headroom > 0:
        real = {s.name: s for s in shapes}
        usable = [replace(s, wall=max(0, s.wall - headroom)) for s in shapes]
        result = plan(demand, usable, existing, n_max_queued=n_max_queued, max_running=max_running,
                      wall_granularity=wall_granularity)
        for opened in result.new:
            opened.shape = real[opened.shape.name]
        for name, why in result.unplaceable.items():
            if "wall" in why:
                result.unplaceable[name] = f"{why} (shape walls less {headroom} s kept for a new pilot's start)"
        return result
    _check_inputs(demand, shapes, existing)
    if wall_granularity <= 0:
        raise ConfigError(f"wall_granularity must be > 0 seconds, got {wall_granularity}")
    for name, cap in (("n_max_queued", n_max_queued), ("max_running", max_running)):
        if cap is not None and cap < 0:
            raise ConfigError(f"{name} must be >= 0 or None, got {cap}")
    result = Plan()

    # 1. First-fit into the pilots we already have, least free room first.
    old = [_Bin.of(p) for p in existing]
    left = _first_fit(old, _order(demand, shapes, urgency=True))
    for bin_ in old:
        assert bin_.pilot is not None
        result.placed.update((j.job, bin_.pilot.id) for j in bin_.jobs)
        if bin_.pilot.queued and not bin_.jobs:
            result.cancel.append(bin_.pilot.id)
    # Back to the caller's order: each packer sorts for itself, and the seed's sort is stable, so this
    # keeps its ties exactly as plan_seed() breaks them.
    position = {j.job: i for i, j in enumerate(demand)}
    todo: list[Demand] = []
    for job in sorted(left, key=lambda j: position[j.job]):
        if any(shape_holds(s, job) for s in shapes):
            todo.append(job)
        else:
            result.unplaceable[job.job] = _why_unplaceable(job, shapes)

    # 2. Open new pilots within the caps, a round per cap that cuts.
    kept_queued = Counter(b.shape.name for b in old if b.pilot and b.pilot.queued and b.jobs)
    unlimited = math.inf
    shape_room: dict[str, float] = {
        s.name: unlimited if n_max_queued is None else max(0, n_max_queued - kept_queued[s.name]) for s in shapes
    }
    pilots_kept = sum(1 for p in existing if not p.queued) + sum(kept_queued.values())
    total_room = unlimited if max_running is None else max(0, max_running - pilots_kept)
    new: list[_Bin] = []
    while todo and total_room > 0:
        allowed = [s for s in shapes if shape_room[s.name] > 0]
        ready = [j for j in todo if any(shape_holds(s, j) for s in allowed)]
        if not ready:
            break
        kept: list[_Bin] = []
        dropped: list[_Bin] = []
        for bin_ in sorted(_pack_best(ready, allowed), key=lambda b: (b.start_by(), -len(b.jobs))):
            # Keep an urgency prefix: after the first pilot a cap cuts, less urgent pilots of other
            # shapes are packed again next round rather than kept ahead of more urgent cut work.
            if not dropped and shape_room[bin_.shape.name] > 0 and total_room > 0:
                shape_room[bin_.shape.name] -= 1
                total_room -= 1
                kept.append(bin_)
            else:
                dropped.append(bin_)
        new.extend(kept)
        ready_ids = {j.job for j in ready}
        cut = sorted((j for b in dropped for j in b.jobs), key=lambda j: (j.start_by, j.job))
        todo = _first_fit(kept, cut) + [j for j in todo if j.job not in ready_ids]
        if not dropped:
            break

    for job in todo:
        if total_room <= 0:
            result.deferred[job.job] = f"max_running={max_running} pilots reached for this queue"
        else:
            full = ", ".join(s.name for s in shapes if shape_holds(s, job))
            result.deferred[job.job] = f"n_max_queued={n_max_queued} queued pilots reached for {full}"
    planned = (_planned(b, wall_granularity) for b in new)
    result.new = sorted(planned, key=lambda p: (p.start_by, p.shape.name))
    return result
