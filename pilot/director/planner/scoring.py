"""How the packers choose: the order of the jobs, the cheapest shape, what a job is worth on a pilot, and
how two candidate pilots compare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from taskqueues.shapes import Shape

from .demand import Demand, shape_holds

__all__ = ["EPS", "better", "cheapest", "cheapest_holding", "job_value", "priority_order"]

#: Relative tolerance when comparing costs and packing scores (floats summed in different orders).
EPS = 1e-9


def cheapest(shapes: Sequence[Shape], accepts: Callable[[Shape], bool]) -> Shape | None:
    """The cheapest shape ``accepts`` takes; ties go to the earlier shape of the catalog."""
    best: Shape | None = None
    for shape in shapes:
        if accepts(shape) and (best is None or shape.cost < best.cost):
            best = shape
    return best


def cheapest_holding(shapes: Sequence[Shape], job: Demand) -> Shape | None:
    """The seed's ``allocate_new_instances`` choice: the hinted shape, else the cheapest holding ``job``."""
    return cheapest(shapes, lambda s: shape_holds(s, job))


def job_value(job: Demand, shapes: Sequence[Shape]) -> float:
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


def priority_order(jobs: Iterable[Demand], shapes: Sequence[Shape], *, urgency: bool) -> list[Demand]:
    """Most expensive to serve first (the seed's ``prioritize_jobs``); ours breaks ties by urgency."""

    def cost_of(job: Demand) -> float:
        shape = cheapest_holding(shapes, job)
        return math.inf if shape is None else shape.cost

    if urgency:
        return sorted(jobs, key=lambda j: (-cost_of(j), j.start_by, j.job))
    return sorted(jobs, key=lambda j: -cost_of(j))


def better(key: tuple[float, int, float], than: tuple[float, int, float]) -> bool:
    """Compare (score, jobs, -cost) keys with a tolerance on the float score."""
    if not math.isclose(key[0], than[0], rel_tol=EPS):
        return key[0] > than[0]
    return key[1:] > than[1:]
