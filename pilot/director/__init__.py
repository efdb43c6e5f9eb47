"""Pilot provisioning: the planner that turns a queue's waiting demand into pilots, and its lower bound.

The site director and its batch-system backends live beside these modules; the planner itself is pure
Python (no Redis, no batch system), so it can be tested and benchmarked on its own.
"""

from pilot.director.planner import (
    Demand,
    ExistingPilot,
    Plan,
    PlannedPilot,
    can_serve,
    check_hint,
    estimate_wall,
    pilot_wall,
    plan,
    plan_seed,
    shape_holds,
)

__all__ = [
    "Demand",
    "ExistingPilot",
    "Plan",
    "PlannedPilot",
    "can_serve",
    "check_hint",
    "estimate_wall",
    "pilot_wall",
    "plan",
    "plan_seed",
    "shape_holds",
]
