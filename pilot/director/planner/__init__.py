"""The provisioning planner: how many pilots, of which shape, a queue's waiting demand needs.

The site director calls :func:`plan` once per queue and cycle with the jobs that queue can serve, the
queue's pilot shapes and the pilots it already has in the batch system. The answer says which jobs the
existing pilots will take, which new pilots to submit (and for how long), which queued pilots to cancel
because their demand is gone, and which jobs no shape can hold.

The model is the Seven Bridges one: a job reserves its cores, memory and scratch in one pilot for its
whole run, so packing is *spatial* (at no moment do a pilot's jobs add up to more than its shape), and
the cost of a plan is the sum of its new pilots' cost per hour. Time enters in two places: a job whose
run time exceeds a shape's wall (or an existing pilot's time left) cannot go there, and each new pilot
asks the batch system for the wall its jobs need (:func:`pilot_wall`).

Two packers share the same first-fit core (:func:`plan_seed` is the seed's algorithm as written):

* **seed** — order jobs by the cost of the cheapest shape that holds them, most expensive first;
  first-fit them into pilots ordered least free room first; for the first job left over, open the
  cheapest shape that holds it (or its instance-type hint) and repeat.
* **ours** — the same order (then by urgency), the same first-fit into the existing pilots, but when
  a pilot must be opened every shape that holds the first left-over job is tried: each is filled,
  greedily and in order, from the remaining demand, and the shape with the lowest cost per unit of
  packed work wins (see :func:`~pilot.director.planner.scoring.job_value`). Then under-filled new
  pilots are consolidated: each moves to the cheapest shape that still holds its jobs, and pairs merge
  while one shape holding both is cheaper than the two.

:func:`plan` runs both packers on what the existing pilots left, and a third and fourth (the balanced
packer of :mod:`~pilot.director.planner.packers`, and ours with the jobs largest first: first fit
decreasing, which packs memory pilots tight and fills their idle cores with the light jobs), consolidates
them all, and keeps the cheapest; so its new pilots never cost more than the seed's, and
``scripts/bench_provision.py`` measures how often and by how much our packer alone wins.

Caps (open-lmake's ``n_max_queued_jobs``): at most ``n_max_queued`` queued pilots (existing queued ones
that keep work plus new ones) per shape, running pilots not counted; at most ``max_running`` pilots in
all (running + queued + new) for the queue. When a cap cuts, the new pilots whose most urgent job is
most urgent are kept, the jobs of the dropped ones are first-fitted into the spare room of the kept
ones (most urgent first), and the rest are packed again onto the shapes that still have room under
their cap. Pilots are kept as an urgency prefix: once a cap cuts one, the less urgent pilots behind it
are packed again in the next round even if their shape has room, so a cheap-to-keep tail pilot never
displaces more urgent work. What no shape may take is *deferred* to the next cycle, with the reason.

Modules: ``demand`` (the jobs, the existing and the new pilots, the checks on them), ``wall`` (how long a
pilot must live), ``bins`` (pilots being filled, first fit), ``scoring`` (job order, shape choice, job
value), ``seed`` (the Seven Bridges algorithm as written), ``packers`` (the packers :func:`plan` tries),
``consolidate`` (shrinking and merging new pilots) and ``plan`` (one queue's plan, with its caps).
"""

from .demand import Demand, ExistingPilot, PlannedPilot, check_hint, shape_holds
from .packers import packer_costs
from .plan import Plan, can_serve, plan
from .seed import plan_seed
from .wall import estimate_wall, pilot_wall

__all__ = [
    "Demand",
    "ExistingPilot",
    "Plan",
    "PlannedPilot",
    "can_serve",
    "check_hint",
    "estimate_wall",
    "packer_costs",
    "pilot_wall",
    "plan",
    "plan_seed",
    "shape_holds",
]
