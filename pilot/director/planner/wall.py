"""How long a pilot must live: the time its jobs need side by side, and the wall it asks the batch system for."""

from __future__ import annotations

import math
from collections.abc import Iterable

from taskqueues.errors import ConfigError
from taskqueues.shapes import Shape

from .demand import Demand

__all__ = ["estimate_wall", "pilot_wall"]


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
