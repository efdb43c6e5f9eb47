"""The packers :func:`~pilot.director.planner.plan` tries for the jobs existing pilots cannot take (first fit
with our shape choice, balanced, the seed's, and first fit decreasing), each consolidated; the cheapest plan
wins.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from taskqueues.errors import ValidationError
from taskqueues.shapes import Shape

from .bins import Bin, fill, job_floor
from .consolidate import consolidate
from .demand import Demand, check_inputs, shape_holds, why_unplaceable
from .scoring import EPS, better, job_value, priority_order
from .seed import pack_seed

__all__ = ["pack_best", "packer_costs"]


def _pack_ours(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[Bin]:
    """Like :func:`pack_seed`, but the shape of each new pilot is the one with the best score
    (value absorbed / cost, see :func:`job_value`); ties go to the shape absorbing more jobs (fewer
    pilots to submit), then to the cheaper one."""
    value = {j.job: job_value(j, shapes) for j in jobs}
    bins: list[Bin] = []
    floor = job_floor(jobs)
    left = list(jobs)
    while left:
        first = left[0]
        best: tuple[float, int, float] | None = None
        chosen: tuple[Bin, list[Demand]] | None = None
        for shape in shapes:
            if not shape_holds(shape, first):
                continue
            trial = Bin.fresh(shape)
            rest = fill(trial, left, floor)
            absorbed = math.fsum(value[j.job] for j in trial.jobs)
            score = absorbed / shape.cost if shape.cost > 0 else math.inf
            key = (score, len(trial.jobs), -shape.cost)
            if best is None or better(key, best):
                best, chosen = key, (trial, rest)
        if chosen is None:
            raise ValidationError(why_unplaceable(first, shapes), job=first.job)
        bins.append(chosen[0])
        left = chosen[1]
    return bins


_Kind = tuple[int, int, int, str | None, tuple[bool, ...]]


def _kind(job: Demand, shapes: Sequence[Shape]) -> _Kind:
    """Jobs of one kind are interchangeable for packing: same resources, hint, and shapes whose wall
    they fit in."""
    return (job.cpu, job.mem, job.tmp, job.shape_hint, tuple(job.wall <= s.wall for s in shapes))


def _alignment(bin_: Bin, job: Demand) -> float:
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


def _pack_balanced(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[Bin]:
    """Pilot-centric packing that keeps each pilot's resources in balance.

    Cost-ordered first-fit fills a pilot with the expensive jobs first, so a memory-optimised pilot
    takes only memory-heavy jobs and ends with idle cores while small jobs open pilots of their own.
    Here a pilot is opened for the most expensive job left (shape chosen by the same score as
    :func:`_pack_ours`), then filled by repeatedly adding the job whose demand lines up best with the
    room left (the dot-product rule of vector bin packing, Panigrahy et al. 2011), so memory-heavy and
    core-heavy jobs share pilots. Jobs are grouped by :func:`_kind`, most urgent first inside a kind,
    which keeps each step linear in the number of kinds, not of jobs.
    """
    value = {j.job: job_value(j, shapes) for j in jobs}
    ordered = priority_order(jobs, shapes, urgency=True)
    rank = {j.job: i for i, j in enumerate(ordered)}
    kinds: dict[_Kind, list[Demand]] = {}  # each stack has its earliest-ranked job on top (last)
    for job in reversed(ordered):
        kinds.setdefault(_kind(job, shapes), []).append(job)
    bins: list[Bin] = []
    while kinds:
        head = min(kinds, key=lambda k: rank[kinds[k][-1].job])
        first = kinds[head][-1]
        best: tuple[float, int, float] | None = None
        chosen: tuple[Bin, Counter[_Kind]] | None = None
        for shape in shapes:
            if not shape_holds(shape, first):
                continue
            trial, used = Bin.fresh(shape), Counter({head: 1})
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
            if best is None or better(key, best):
                best, chosen = key, (trial, used)
        if chosen is None:
            raise ValidationError(why_unplaceable(first, shapes), job=first.job)
        bins.append(chosen[0])
        for kind, count in chosen[1].items():
            del kinds[kind][-count:]
            if not kinds[kind]:
                del kinds[kind]
    return bins


def _largest_first(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[Demand]:
    """Jobs by value (:func:`job_value`, their dominant share) decreasing, then by urgency: first fit
    decreasing, the classic bin-packing order, which the urgency-first packers give up on memory-skewed
    mixes (two 30 GB jobs opened together leave no room for a third)."""
    value = {j.job: job_value(j, shapes) for j in jobs}
    return sorted(jobs, key=lambda j: (-value[j.job], j.start_by, j.job))


def _bins_cost(bins: Iterable[Bin]) -> float:
    return math.fsum(b.shape.cost for b in bins)


_PACKERS: dict[str, Callable[[Sequence[Demand], Sequence[Shape]], list[Bin]]] = {
    "first-fit": lambda jobs, shapes: _pack_ours(priority_order(jobs, shapes, urgency=True), shapes),
    "balanced": _pack_balanced,
    "seed": lambda jobs, shapes: pack_seed(priority_order(jobs, shapes, urgency=False), shapes),
    "decreasing": lambda jobs, shapes: _pack_ours(_largest_first(jobs, shapes), shapes),
}


def _packings(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> dict[str, list[Bin]]:
    return {name: consolidate(pack(jobs, shapes), shapes) for name, pack in _PACKERS.items()}


def pack_best(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[Bin]:
    """Every packer, consolidated; the cheapest wins (ties: fewer pilots, then the earlier packer)."""
    best: list[Bin] | None = None
    for bins in _packings(jobs, shapes).values():
        if best is None:
            best = bins
            continue
        cost, best_cost = _bins_cost(bins), _bins_cost(best)
        if math.isclose(cost, best_cost, rel_tol=EPS, abs_tol=EPS):
            if len(bins) < len(best):
                best = bins
        elif cost < best_cost:
            best = bins
    return best or []


def packer_costs(demand: Sequence[Demand], shapes: Sequence[Shape]) -> dict[str, float]:
    """Cost per hour of each packer :func:`plan` tries (after consolidation), on an empty fleet and
    without caps, for benchmarks: ``first-fit`` (our shape choice), ``balanced``, ``seed`` (the seed's
    packing, consolidated). Jobs no shape holds are left out."""
    check_inputs(demand, shapes, ())
    jobs = [j for j in demand if any(shape_holds(s, j) for s in shapes)]
    return {name: _bins_cost(bins) for name, bins in _packings(jobs, shapes).items()}
