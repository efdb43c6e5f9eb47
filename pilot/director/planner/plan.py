"""One queue's plan for this cycle: first fit into its existing pilots, new pilots for the rest within the
caps, queued pilots to cancel, and what waits (with the reason).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from taskqueues.errors import ConfigError
from taskqueues.shapes import Shape

from .bins import Bin, first_fit, planned
from .demand import Demand, ExistingPilot, PlannedPilot, check_inputs, shape_holds, why_unplaceable
from .packers import pack_best
from .scoring import priority_order

__all__ = ["Plan", "can_serve", "plan"]


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


def can_serve(pilot: ExistingPilot, demand: Iterable[Demand]) -> bool:
    """True when some job of ``demand`` fits what ``pilot`` has free now (resources, time left, hint)."""
    room = Bin.of(pilot)
    return any(room.fits(job) for job in demand)


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
        result = plan(
            demand,
            usable,
            existing,
            n_max_queued=n_max_queued,
            max_running=max_running,
            wall_granularity=wall_granularity,
        )
        for opened in result.new:
            opened.shape = real[opened.shape.name]
        for name, why in result.unplaceable.items():
            if "wall" in why:
                result.unplaceable[name] = f"{why} (shape walls less {headroom} s kept for a new pilot's start)"
        return result
    check_inputs(demand, shapes, existing)
    if wall_granularity <= 0:
        raise ConfigError(f"wall_granularity must be > 0 seconds, got {wall_granularity}")
    for name, cap in (("n_max_queued", n_max_queued), ("max_running", max_running)):
        if cap is not None and cap < 0:
            raise ConfigError(f"{name} must be >= 0 or None, got {cap}")
    result = Plan()

    # 1. First-fit into the pilots we already have, least free room first.
    old = [Bin.of(p) for p in existing]
    left = first_fit(old, priority_order(demand, shapes, urgency=True))
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
            result.unplaceable[job.job] = why_unplaceable(job, shapes)

    # 2. Open new pilots within the caps, a round per cap that cuts.
    kept_queued = Counter(b.shape.name for b in old if b.pilot and b.pilot.queued and b.jobs)
    unlimited = math.inf
    shape_room: dict[str, float] = {
        s.name: unlimited if n_max_queued is None else max(0, n_max_queued - kept_queued[s.name]) for s in shapes
    }
    pilots_kept = sum(1 for p in existing if not p.queued) + sum(kept_queued.values())
    total_room = unlimited if max_running is None else max(0, max_running - pilots_kept)
    new: list[Bin] = []
    while todo and total_room > 0:
        allowed = [s for s in shapes if shape_room[s.name] > 0]
        ready = [j for j in todo if any(shape_holds(s, j) for s in allowed)]
        if not ready:
            break
        kept: list[Bin] = []
        dropped: list[Bin] = []
        for bin_ in sorted(pack_best(ready, allowed), key=lambda b: (b.start_by(), -len(b.jobs))):
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
        todo = first_fit(kept, cut) + [j for j in todo if j.job not in ready_ids]
        if not dropped:
            break

    for job in todo:
        if total_room <= 0:
            result.deferred[job.job] = f"max_running={max_running} pilots reached for this queue"
        else:
            full = ", ".join(s.name for s in shapes if shape_holds(s, job))
            result.deferred[job.job] = f"n_max_queued={n_max_queued} queued pilots reached for {full}"
    new_pilots = (planned(b, wall_granularity) for b in new)
    result.new = sorted(new_pilots, key=lambda p: (p.start_by, p.shape.name))
    return result
