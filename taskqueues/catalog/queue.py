"""One queue as a community sees it, and whether it can run a job (the reason when it cannot)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from taskqueues.requirements import Requirements, Value, mismatch
from taskqueues.shapes import Shape

__all__ = ["BATCH_SYSTEMS", "DEFAULT_N_MAX_QUEUED", "DEFAULT_WALL_GRANULARITY", "Queue"]

BATCH_SYSTEMS: tuple[str, ...] = ("local", "slurm", "sge")
DEFAULT_N_MAX_QUEUED = 10
DEFAULT_WALL_GRANULARITY = 60


@dataclass(frozen=True)
class Queue:
    """One batch queue as a given VO sees it: effective parameters, how to start pilots, their shapes."""

    id: str
    site: str
    ce: str
    name: str
    params: Mapping[str, Value]
    batch: str
    batch_options: Mapping[str, object]
    shapes: tuple[Shape, ...]
    n_max_queued: int = DEFAULT_N_MAX_QUEUED
    max_running: int | None = None
    wall_granularity: int = DEFAULT_WALL_GRANULARITY
    #: The wall a new pilot asks for at least (seconds; capped by its shape's wall), so that it lives for
    #: several jobs of its shape, as sites give pilots 24-48 h for jobs of a few hours. None: sized to the
    #: jobs planned onto it (their wall plus one granularity step), which take its only work.
    pilot_lifetime: int | None = None

    def __hash__(self) -> int:
        return hash((self.id, self.shapes))

    def holds(self, req: Requirements) -> bool:
        """True when some shape of this queue holds the job's exact consumables."""
        return any(shape.holds(req.cpu, req.mem, req.tmp, req.wall or 0) for shape in self.shapes)

    def reason(self, req: Requirements) -> str | None:
        """None when the queue can run ``req``; else the first requirement that excludes it, in one line."""
        why = mismatch(req, self.params)
        if why is not None:
            return why
        if self.holds(req):
            return None
        wanted = {"cpu": req.cpu, "mem": req.mem, "tmp": req.tmp, "wall": req.wall or 0}
        units = {"cpu": "", "mem": " MB", "tmp": " MB", "wall": " s"}
        asked = ", ".join(f"{k}={v}{units[k]}" for k, v in wanted.items() if k != "wall" or req.wall is not None)
        short = []
        for shape in self.shapes:
            lacks = [f"{k} {getattr(shape, k)}{units[k]}" for k, v in wanted.items() if getattr(shape, k) < v]
            short.append(f"{shape.name} has {', '.join(lacks)}")
        return f"consumables: wants {asked}; no shape holds it ({'; '.join(short)})"
