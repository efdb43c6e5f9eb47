"""The pilot's slots: what it holds (cores, memory, scratch), what its payloads use, what its offers reserve.

Resources are reserved exactly as each job requires (``job.cpu``/``job.mem``/``job.tmp``) and never
overcommitted. A match offered to the store reserves what it offered until its reply is read: the jobs the
reply brings then take their share and the rest is free again. What is neither used nor reserved is free,
and it is all the pilot ever offers.
"""

from __future__ import annotations

from pilot.agent.payload import Payload
from taskqueues.store import Job

#: cores, MB of memory, MB of scratch
Amount = tuple[int, int, int]


class Slots:
    """The pilot's size and the payloads running in it (by job id)."""

    def __init__(self) -> None:
        self.cores = self.mem = self.tmp = 0
        self.running: dict[str, Payload] = {}
        self._reserved: Amount = (0, 0, 0)

    def size(self, cores: int, mem: int, tmp: int) -> None:
        """What the pilot holds (MJF, or the operator's overrides), set once at its start."""
        self.cores, self.mem, self.tmp = cores, mem, tmp

    def used(self) -> Amount:
        cpu = mem = tmp = 0
        for payload in self.running.values():
            need = payload.need
            cpu += need[0]
            mem += need[1]
            tmp += need[2]
        return cpu, mem, tmp

    def free(self) -> Amount:
        """What is neither used by a payload nor offered in a match whose reply is still to come."""
        cpu, mem, tmp = self.used()
        held_cpu, held_mem, held_tmp = self._reserved
        return self.cores - cpu - held_cpu, self.mem - mem - held_mem, self.tmp - tmp - held_tmp

    def ends(self, now_mono: float) -> tuple[tuple[float, int, int, int], ...]:
        """What each payload holds and the seconds until its estimated end (0 when overdue): what the match
        reserves cores from (``PilotOffer.running``)."""
        return tuple(
            (
                max(0.0, p.start_mono + p.job.ete - now_mono) if p.start_mono else p.job.ete,
                *p.need,
            )
            for p in self.running.values()
        )

    def fits(self, job: Job) -> bool:
        """Whether ``job`` fits in what is free (never overcommit, even if the store erred)."""
        cpu, mem, tmp = self.free()
        return job.cpu <= cpu and job.mem <= mem and job.tmp <= tmp

    def reserve(self, amount: Amount) -> None:
        """An offer was sent: what it offered is not free until its reply is read (:meth:`unreserve`)."""
        cpu, mem, tmp = self._reserved
        self._reserved = (cpu + amount[0], mem + amount[1], tmp + amount[2])

    def unreserve(self, amount: Amount) -> None:
        cpu, mem, tmp = self._reserved
        self._reserved = (cpu - amount[0], mem - amount[1], tmp - amount[2])
