"""What the planner works on: the waiting jobs (demand), the queue's existing pilots, the new pilots it
plans; and the checks on them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from taskqueues.errors import ConfigError, ValidationError
from taskqueues.shapes import Shape

__all__ = ["Demand", "ExistingPilot", "PlannedPilot", "check_hint", "check_inputs", "shape_holds", "why_unplaceable"]


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


def check_inputs(demand: Sequence[Demand], shapes: Sequence[Shape], existing: Sequence[ExistingPilot]) -> None:
    """Refuse duplicate shapes, jobs or pilots, and negative or non-finite amounts."""
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


def why_unplaceable(job: Demand, shapes: Sequence[Shape]) -> str:
    """Why no shape of the queue can ever hold ``job``, shape by shape."""
    if job.shape_hint is not None:
        hinted = [s for s in shapes if s.name == job.shape_hint]
        if not hinted:
            return f"hinted shape {job.shape_hint!r} is not a shape of this queue"
        return f"hinted shape {job.shape_hint!r} cannot hold it ({_shortfall(job, hinted[0])})"
    if not shapes:
        return "the queue has no shapes"
    parts = [f"{s.name}: {_shortfall(job, s)}" for s in shapes]
    return "no shape holds it (" + "; ".join(parts) + ")"
