"""Reservations of the match (EASY backfill): what a pilot tells the match about the jobs it runs, and the
stored reservations as Python reads them (``pilotfish explain``, the invariant checker).

When the most urgent head a pilot could ever hold does not fit what it has free, ``match.lua`` reserves it
on the pilot whose running jobs free enough soonest (by their estimated ends), and that pilot leases a less
urgent job only if the job ends before the reserved start or fits in what the reserved job leaves over (see
the "Reservations" block of ``match.lua``), or, with bounded reservations (``Store.bounded_reservations``, the
default), if its score less its need is before the reserved start (docs/operator/scheduling.md). One
reservation per catalog queue, in ``keys.resv``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from ..errors import StoreError
from .keys import Keys
from .records import text as _text

__all__ = ["DEFAULT_RESERVATION_SLACK", "Reservation", "held_for", "read_reservations", "running_text"]

#: Seconds past its estimated start after which a reservation holds its pilot's cores no more.
DEFAULT_RESERVATION_SLACK = 120.0


def running_text(running: Iterable[tuple[float, int, int, int]] | None) -> str:
    """ARGV[10] of match.lua: "d:cpu:mem:tmp" per running job by ``d`` (seconds until its estimated end,
    0 when overdue); "-" for None (reservations off for this call)."""
    if running is None:
        return "-"
    parts = []
    for d, cpu, mem, tmp in sorted(running):
        if not math.isfinite(d) or min(cpu, mem, tmp) < 0:
            raise StoreError(
                f"running job ({d!r}, {cpu!r}, {mem!r}, {tmp!r}): wants a finite end and non-negative resources"
            )
        parts.append(f"{max(0.0, d):.3f}:{int(cpu)}:{int(mem)}:{int(tmp)}")
    return " ".join(parts)


@dataclass(frozen=True)
class Reservation:
    """One queue's reservation: ``pilot`` holds cores for ``job`` (head of ``task_queue``) from ``start``."""

    queue: str
    active: bool  # False: expired (its start passed by the slack), it holds nothing
    task_queue: str
    job: str
    score: float
    cpu: int
    mem: int
    tmp: int
    need: int
    start: float
    at: float
    pilot: str

    @classmethod
    def parse(cls, queue: str, text: str) -> Reservation:
        """A ``keys.resv`` field as match.lua writes it; ValueError when it is not one."""
        parts = text.split(" ", 10)
        if len(parts) != 11 or parts[0] not in ("r", "x"):
            raise ValueError(
                f"reservation of {queue}: {text!r} is not '<r|x> <tq> <job> <score> <cpu> <mem> "
                "<tmp> <need> <start> <at> <pilot>'"
            )
        st, tq, job, score, cpu, mem, tmp, need, start, at, pilot = parts
        return cls(
            queue,
            st == "r",
            tq,
            job,
            float(score),
            int(cpu),
            int(mem),
            int(tmp),
            int(need),
            float(start),
            float(at),
            pilot,
        )


def read_reservations(client: redis.Redis, keys: Keys) -> tuple[list[Reservation], dict[str, str]]:
    """Every stored reservation, and the fields that cannot be read (queue -> text)."""
    good, bad = [], {}
    for queue, value in client.hgetall(keys.resv).items():
        q, text = _text(queue), _text(value)
        try:
            good.append(Reservation.parse(q, text))
        except ValueError:
            bad[q] = text
    return good, bad


def held_for(
    client: redis.Redis, keys: Keys, queues: Iterable[str], job: str, now: float, *, bounded: bool = False
) -> list[str]:
    """Lines for ``pilotfish explain``: in each of ``queues``, which pilot holds cores for which reserved job
    (``job`` itself, or another that narrower jobs there wait behind), and until when; ``bounded``: the
    store's reservations are bounded (``Store.bounded_reservations``)."""
    wanted = set(queues)
    good, _ = read_reservations(client, keys)
    out = []
    for r in sorted(good, key=lambda r: r.queue):
        if r.queue not in wanted:
            continue
        whom = "this job" if r.job == job else f"job {r.job}"
        when = f"in {r.start - now:.0f} s" if r.start > now else f"{now - r.start:.0f} s ago"
        if not r.active:
            out.append(
                f"queue {r.queue}: the reservation for {whom} on pilot {r.pilot} expired (its start, "
                f"{when}, passed): it holds nothing"
            )
            continue
        why = "" if r.job == job else ": there, jobs that would end later than that wait"
        if bounded and r.job != job:
            why += " (unless due to start before it, less their run)"
        out.append(
            f"queue {r.queue}: pilot {r.pilot} holds cores for {whom} ({r.cpu} cores, {r.mem} MB), "
            f"reserved to start {when}{why}"
        )
    return out
