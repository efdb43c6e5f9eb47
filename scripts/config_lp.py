"""The configuration-LP lower bound of a provisioning plan, by column generation (benchmark only: needs scipy).

A *configuration* is a shape and how many jobs of each kind one pilot of it holds at once (cores, memory
and scratch add up within the shape; every job's wall fits the shape's; a hinted job only on its shape).
The LP relaxation of "cover every job with configurations at the least cost per hour"

    minimise  sum_c cost(c) x_c   subject to  sum_c a_kc x_c >= n_k  for every kind k,  x >= 0

is a lower bound on any plan's cost (an integer plan is a feasible point), and on memory-skewed mixes it is
much tighter than per-resource bounds, because it knows which jobs can share a pilot. There are far too
many configurations to list, so the LP starts from one single-kind configuration per kind and adds, while
one exists, the configuration with the most negative reduced cost: per shape, the integer knapsack
``max sum_k pi_k a_k`` within the shape's resources (``pi`` the duals of the master LP), solved exactly
with HiGHS' MILP. When no shape prices below its cost the LP is optimal and its value is the bound.

Jobs are grouped into kinds by what packing sees: cores, memory, scratch, hint and which shapes' walls
they fit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from pilot.director.planner import Demand, shape_holds
from taskqueues.shapes import Shape

__all__ = ["LpBound", "config_lp_bound"]

#: Reduced costs above this (per hour) count as no improvement: the LP has converged.
TOLERANCE = 1e-7
MAX_ROUNDS = 2000

Kind = tuple[int, int, int, str | None, tuple[bool, ...]]


@dataclass(frozen=True)
class LpBound:
    """The LP optimum (cost per hour), how many columns it used and how many pricing rounds it took."""

    cost: float
    columns: int
    rounds: int


def _kinds(demand: Sequence[Demand], shapes: Sequence[Shape]) -> Counter[Kind]:
    return Counter(
        (j.cpu, j.mem, j.tmp, j.shape_hint, tuple(j.wall <= s.wall for s in shapes))
        for j in demand
        if any(shape_holds(s, j) for s in shapes)
    )


def _fits(kind: Kind, index: int, shape: Shape) -> bool:
    cpu, mem, tmp, hint, walls = kind
    return walls[index] and hint in (None, shape.name) and cpu <= shape.cpu and mem <= shape.mem and tmp <= shape.tmp


def _price(
    kinds: Sequence[Kind], counts: np.ndarray, duals: np.ndarray, index: int, shape: Shape
) -> tuple[float, np.ndarray] | None:
    """The configuration of ``shape`` of greatest dual value (an exact integer knapsack), or None."""
    usable = [k for k, kind in enumerate(kinds) if duals[k] > TOLERANCE and _fits(kind, index, shape)]
    if not usable:
        return None
    size = np.array([[kinds[k][r] for k in usable] for r in range(3)], dtype=float)
    caps = np.array([shape.cpu, shape.mem, shape.tmp], dtype=float)
    upper = np.minimum(
        counts[usable],
        np.floor(np.min(np.where(size > 0, caps[:, None] / np.where(size > 0, size, 1), np.inf), axis=0)),
    )
    result = milp(
        -duals[usable],
        constraints=LinearConstraint(size, -np.inf, caps),
        integrality=np.ones(len(usable)),
        bounds=Bounds(0, upper),
    )
    if result.x is None:
        return None
    column = np.zeros(len(kinds))
    column[usable] = np.round(result.x)
    return float(duals @ column), column


def config_lp_bound(demand: Sequence[Demand], shapes: Sequence[Shape]) -> LpBound:
    """The configuration-LP lower bound of the cost per hour of pilots that run ``demand`` (see the module doc).

    Jobs no shape holds are left out, as the planner reports them unplaceable.
    """
    grouped = _kinds(demand, shapes)
    kinds = list(grouped)
    if not kinds:
        return LpBound(0.0, 0, 0)
    counts = np.array([grouped[k] for k in kinds], dtype=float)
    columns: list[np.ndarray] = []
    costs: list[float] = []
    for k, kind in enumerate(kinds):  # one single-kind configuration per kind, on its cheapest shape
        cheapest = min((s for i, s in enumerate(shapes) if _fits(kind, i, s)), key=lambda s: s.cost)
        cpu, mem, tmp = kind[:3]
        many = min(
            counts[k],
            *(cap // need for cap, need in ((cheapest.cpu, cpu), (cheapest.mem, mem), (cheapest.tmp, tmp)) if need > 0),
        )
        column = np.zeros(len(kinds))
        column[k] = max(1.0, many)
        columns.append(column)
        costs.append(cheapest.cost)
    for rounds in range(1, MAX_ROUNDS + 1):
        matrix = np.array(columns).T
        master = linprog(np.array(costs), A_ub=-matrix, b_ub=-counts, bounds=(0, None), method="highs")
        if master.status != 0:
            raise RuntimeError(f"configuration LP: {master.message}")
        duals = -np.asarray(master.ineqlin.marginals)
        added = 0
        for index, shape in enumerate(shapes):  # every shape's best configuration that prices below its cost
            priced = _price(kinds, counts, duals, index, shape)
            if priced is not None and shape.cost - priced[0] < -TOLERANCE:
                columns.append(priced[1])
                costs.append(shape.cost)
                added += 1
        if not added:
            return LpBound(float(master.fun), len(columns), rounds)
    raise RuntimeError(f"configuration LP did not converge in {MAX_ROUNDS} rounds")
