"""Bins: pilots being filled (existing ones with their free room, or new ones of a shape), and first fit."""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable, Sequence

from taskqueues.shapes import Shape

from .demand import Demand, ExistingPilot, PlannedPilot
from .wall import pilot_wall

__all__ = ["Bin", "fill", "first_fit", "job_floor", "planned"]


class Bin:
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
    def fresh(cls, shape: Shape) -> Bin:
        return cls(shape, shape.cpu, shape.mem, shape.tmp, shape.wall, None)

    @classmethod
    def of(cls, pilot: ExistingPilot) -> Bin:
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


def job_floor(jobs: Iterable[Demand]) -> tuple[int, int, int]:
    """The smallest cores, memory and scratch any of ``jobs`` needs (each on its own)."""
    cpu = mem = tmp = None
    for job in jobs:
        cpu = job.cpu if cpu is None else min(cpu, job.cpu)
        mem = job.mem if mem is None else min(mem, job.mem)
        tmp = job.tmp if tmp is None else min(tmp, job.tmp)
    return (cpu or 0, mem or 0, tmp or 0)


def fill(bin_: Bin, queue: Sequence[Demand], floor: tuple[int, int, int]) -> list[Demand]:
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


def first_fit(bins: list[Bin], jobs: Sequence[Demand]) -> list[Demand]:
    """Place each job in the first bin, least free room first, that fits it; return the jobs left over.

    ``bins`` stays sorted by :meth:`Bin.room` as jobs land (a bin that received a job moves forward),
    and bins too full for the smallest job are set aside, so a pass stays cheap on long demand lists.
    """
    floor = job_floor(jobs)
    order = sorted((b for b in bins if not b.starved(floor)), key=Bin.room)
    left: list[Demand] = []
    for job in jobs:
        for i, bin_ in enumerate(order):
            if bin_.fits(job):
                bin_.add(job)
                del order[i]
                if not bin_.starved(floor):
                    insort(order, bin_, key=Bin.room)
                break
        else:
            left.append(job)
    return left


def planned(bin_: Bin, granularity: int) -> PlannedPilot:
    """The new pilot ``bin_`` stands for, its jobs most urgent first, with the wall they need."""
    jobs = sorted(bin_.jobs, key=lambda j: (j.start_by, j.job))
    return PlannedPilot(bin_.shape, jobs, pilot_wall(jobs, bin_.shape, granularity), bin_.start_by())
