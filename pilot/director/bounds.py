"""A lower bound on the cost per hour of any plan for a demand: what a planner could at best achieve.

The bound is the optimum of a linear-programming relaxation of the packing, where pilots may be
fractional and jobs divisible, but each job's work must still land on shapes able to hold it:

    minimise    sum_s cost_s * x_s                         over x_s >= 0 (pilots of shape s)
    subject to  sum_{s in T} r_s * x_s  >=  sum_{j : H(j) ⊆ T} r_j     for r in (cpu, mem, tmp)

for every set ``T`` in the family of *holding sets* ``H(j)`` (the shapes that hold job ``j``, with its
wall and its instance-type hint) and their unions, the whole catalog included. Any real plan satisfies
these rows — the jobs whose every possible shape lies in ``T`` run on pilots of ``T`` — so the LP
optimum is a valid lower bound. We return the larger of it and the cost of the cheapest shape able to
hold the most demanding job (at least one such pilot is needed; this matters for tiny demands).

The LP has one variable per shape (a handful) and at most three rows per holding set, so we solve its
dual exactly with Fractions by a small simplex (Bland's rule, no degeneracy cycling):

    maximise  b·y  subject to  Aᵀ y <= cost,  y >= 0

whose starting point ``y = 0`` is feasible because costs are >= 0. By strong duality the optimum is the
primal one, and the primal ``x`` is read from the final reduced costs of the slack columns. No scipy:
the runtime must not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from pilot.director.planner import Demand, shape_holds
from taskqueues.errors import ConfigError
from taskqueues.shapes import Shape

#: Beyond this many shapes the union closure of the holding sets (at most 2**shapes sets) is skipped:
#: the bound stays valid, only possibly looser.
_MAX_SHAPES_FOR_UNIONS = 10


@dataclass(frozen=True)
class Bound:
    """The lower bound on cost per hour, and the fractional pilot mix ``x`` (shape name -> pilots)
    that attains the LP part of it."""

    cost: float
    lp: Fraction
    pilots: dict[str, float]


def solve_covering_lp(
    cost: Sequence[Fraction], rows: Sequence[Sequence[Fraction]], rhs: Sequence[Fraction]
) -> tuple[Fraction, list[Fraction]]:
    """Minimise ``cost·x`` subject to ``rows[i]·x >= rhs[i]``, ``x >= 0``, exactly.

    Returns the optimum and an optimal ``x``. Raises :class:`ConfigError` when a cost is negative
    (the dual start would be infeasible) or the rows cannot be covered (a row needs a resource that no
    shape of it has).
    """
    n = len(cost)
    if any(c < 0 for c in cost):
        raise ConfigError("shape costs must be >= 0 for the lower bound")
    m = len(rows)
    # Dual tableau: one row per primal variable (shape), columns y_0..y_{m-1}, then n slacks.
    width = m + n
    table = [[rows[k][i] for k in range(m)] + [Fraction(int(i == s)) for s in range(n)] for i in range(n)]
    rhs_col = [Fraction(c) for c in cost]
    objective = [-Fraction(b) for b in rhs] + [Fraction(0)] * n  # z - b·y = 0
    value = Fraction(0)
    basis = [m + i for i in range(n)]
    while True:
        enter = next((col for col in range(width) if objective[col] < 0), None)
        if enter is None:
            break
        leave: int | None = None
        best: tuple[Fraction, int] | None = None  # (ratio, basic column): Bland's rule breaks ties
        for r in range(n):
            coef = table[r][enter]
            if coef > 0 and (best is None or (rhs_col[r] / coef, basis[r]) < best):
                best, leave = (rhs_col[r] / coef, basis[r]), r
        if leave is None:
            raise ConfigError("the demand cannot be covered: a resource it needs has no shape offering it")
        pivot = table[leave][enter]
        table[leave] = [v / pivot for v in table[leave]]
        rhs_col[leave] /= pivot
        for r in range(n):
            factor = table[r][enter]
            if r != leave and factor != 0:
                table[r] = [a - factor * b for a, b in zip(table[r], table[leave], strict=True)]
                rhs_col[r] -= factor * rhs_col[leave]
        factor = objective[enter]
        objective = [a - factor * b for a, b in zip(objective, table[leave], strict=True)]
        value -= factor * rhs_col[leave]
        basis[leave] = enter
    return value, [objective[m + i] for i in range(n)]


def lower_bound(demand: Sequence[Demand], shapes: Sequence[Shape]) -> Bound:
    """The bound described in the module docstring, over the jobs some shape can hold (the others are
    unplaceable and no plan pays for them)."""
    sets: dict[frozenset[int], list[int]] = {}
    biggest_single = Fraction(0)
    for job in demand:
        holding = frozenset(i for i, s in enumerate(shapes) if shape_holds(s, job))
        if not holding:
            continue
        need = sets.setdefault(holding, [0, 0, 0])
        need[0] += job.cpu
        need[1] += job.mem
        need[2] += job.tmp
        biggest_single = max(biggest_single, min(Fraction(shapes[i].cost) for i in holding))
    if not sets:
        return Bound(0.0, Fraction(0), {s.name: 0.0 for s in shapes})

    family = set(sets)
    family.add(frozenset().union(*sets))
    if len(shapes) <= _MAX_SHAPES_FOR_UNIONS:
        grown = True
        while grown:
            more = {t | h for t in family for h in sets} - family
            family |= more
            grown = bool(more)

    rows: list[list[Fraction]] = []
    rhs: list[Fraction] = []
    for t in family:
        covered = [need for h, need in sets.items() if h <= t]
        for r, attr in enumerate(("cpu", "mem", "tmp")):
            total = sum(need[r] for need in covered)
            if total > 0:
                rows.append([Fraction(getattr(s, attr) if i in t else 0) for i, s in enumerate(shapes)])
                rhs.append(Fraction(total))
    lp, x = solve_covering_lp([Fraction(s.cost) for s in shapes], rows, rhs)
    mix = {s.name: float(v) for s, v in zip(shapes, x, strict=True)}
    return Bound(float(max(lp, biggest_single)), lp, mix)
