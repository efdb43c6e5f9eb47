"""The Seven Bridges algorithm as the seed writes it: the reference that :func:`~pilot.director.planner.plan`
is measured against, and one of the packers it tries."""

from __future__ import annotations

from collections.abc import Sequence

from taskqueues.errors import ValidationError
from taskqueues.shapes import Shape

from .bins import Bin, fill, job_floor, planned
from .demand import Demand, PlannedPilot, check_hint, check_inputs, shape_holds, why_unplaceable
from .scoring import cheapest_holding, priority_order

__all__ = ["pack_seed", "plan_seed"]


def pack_seed(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> list[Bin]:
    """The seed's loop for the jobs existing pilots could not take: open the cheapest shape that holds
    the first job left (or its hint), fill it first-fit, repeat. ``jobs`` are in priority order and each
    is held by some shape."""
    bins: list[Bin] = []
    floor = job_floor(jobs)
    left = list(jobs)
    while left:
        first = left[0]
        shape = cheapest_holding(shapes, first)
        if shape is None:  # the caller filtered these out; keep the loop total anyway
            raise ValidationError(why_unplaceable(first, shapes), job=first.job)
        bin_ = Bin.fresh(shape)
        left = fill(bin_, left, floor)
        bins.append(bin_)
    return bins


def plan_seed(demand: Sequence[Demand], shapes: Sequence[Shape], *, wall_granularity: int = 60) -> list[PlannedPilot]:
    """The Seven Bridges algorithm as written, on an empty fleet, to compare with :func:`~pilot.director.planner.plan`.

    Its only additions are the ones any valid plan needs: a job's wall must fit the shape's wall, and
    the tmp dimension. Like the seed it raises (:class:`ValidationError`) for a job no shape (or no
    hinted shape) can hold.
    """
    check_inputs(demand, shapes, ())
    for job in demand:
        check_hint(job, shapes)
        if not any(shape_holds(s, job) for s in shapes):
            raise ValidationError(why_unplaceable(job, shapes), job=job.job)
    bins = pack_seed(priority_order(demand, shapes, urgency=False), shapes)
    return [planned(b, wall_granularity) for b in bins]
