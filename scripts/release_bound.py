#!/usr/bin/env python3
"""Is the heterogeneous mixes' lower bound loose because requests arrive late? A bound that says so.

    python3 scripts/release_bound.py [--seeds N] [--windows W]

:func:`mixes.mix_bound` spreads the pilot-time the jobs need (the configuration LP of
:func:`mixes.packing_bound`) over the pilots from each arrival on, as if every job after it could run at once.
:func:`release_bound` also says *when* each job can run: no job starts before its head (its request's arrival
plus its longest chain of ancestors), so the time from zero is cut into windows at the arrivals and at the
heads (at most ``--windows`` of those, a head rounded down to the window it falls in, which only relaxes it),
and in each window the pilots run configurations (sets of jobs that fit one pilot) of the jobs whose head has
passed. The time-indexed configuration LP: minimise the end ``T``, each window's configuration time at most
the pilots' time in it (the last window ends at ``T``), and every job's run time covered by configuration time
in the windows at or after its head's. Any schedule gives a solution (the time each pilot spends in each
configuration in each window), so the LP's optimum bounds every makespan from below. It is solved by column
generation (each window's pricing is an exact knapsack over one pilot, by HiGHS' MILP), and the value returned
is the LP dual's: from the master's duals ``pi`` of the windows' kind rows, each window's ``alpha`` is the
knapsack's proven maximum of ``pi . a`` over configurations and each job group's ``delta`` the least ``pi`` of
its kind from its window on, scaled so that the ``T`` column's constraint holds: a feasible dual, so a lower
bound however early the pricing stops (as :func:`mixes.pilot_time`'s Farley bound is).

It is a relaxation still: jobs may be preempted and split across pilots, and only the heads of the
precedence constraints are kept. The script prints, for issue 29's late-small mixes at seeds 1..N, the mix's
bound and this one (figures in ``docs/operator/scheduling.md``). Needs the ``bench`` extra (scipy).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from mixes import MixRequest, _timed, late_small_mixes, mix_bound

#: Column-generation rounds at most (the bound stays valid when it stops early).
ROUNDS = 200


def _windows(requests: Sequence[MixRequest], windows: int) -> list[float]:
    """The windows' starts: every arrival and up to ``windows`` heads (quantiles of them), ascending."""
    heads = sorted(h for h, _, _ in _timed(requests))
    picked = {heads[i * (len(heads) - 1) // windows] for i in range(windows + 1)} if heads else set()
    return sorted({r.arrival for r in requests} | picked)


def release_bound(requests: Sequence[MixRequest], pilots: int, cores: int, mem: int, windows: int = 12) -> float:
    """A lower bound on the makespan of ``requests`` on ``pilots`` pilots of ``cores`` cores and ``mem`` MB,
    no job starting before its head (see the module doc)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    timed = _timed(requests)
    if not timed:
        return 0.0
    starts = _windows(requests, windows)
    nw = len(starts)
    kinds = sorted({(t.cpu, t.mem) for _, _, t in timed})
    if any(c > cores or m > mem for c, m in kinds):
        raise ValueError(f"a job of {max(kinds)} (cores, MB) fits no pilot of {cores} cores and {mem} MB")
    nk = len(kinds)
    work: dict[tuple[int, int], float] = {}  # (kind, window of its head) -> run time
    for head, _, t in timed:
        w = max(i for i, s in enumerate(starts) if s <= head)
        key = (kinds.index((t.cpu, t.mem)), w)
        work[key] = work.get(key, 0.0) + t.runtime
    groups = sorted(work)
    size = np.array([[k[0] for k in kinds], [k[1] for k in kinds]], dtype=float)
    columns: list[list[np.ndarray]] = [list(np.eye(nk)) for _ in range(nw)]  # per window: one kind alone
    lengths = [pilots * (starts[i + 1] - starts[i]) for i in range(nw - 1)]
    best = 0.0
    for _ in range(ROUNDS):
        # Variables: T, then x (window, column), then y (group, window at or after its head's).
        xs = [(w, c) for w in range(nw) for c in range(len(columns[w]))]
        ys = [(g, w) for g, (_, head_w) in enumerate(groups) for w in range(head_w, nw)]
        n = 1 + len(xs) + len(ys)
        rows = nw + nw * nk + len(groups)
        a = np.zeros((rows, n))  # every row as <= (the >= rows negated)
        b = np.zeros(rows)
        for i, (w, c) in enumerate(xs):
            a[w, 1 + i] = 1.0  # the window's configuration time ...
            a[nw + w * nk : nw + (w + 1) * nk, 1 + i] = -columns[w][c]  # ... covers each kind's work in it
        a[nw - 1, 0] = -pilots  # ... at most the pilots' time in it, the last window ending at T
        b[: nw - 1] = lengths
        b[nw - 1] = -pilots * starts[-1]
        for i, (g, w) in enumerate(ys):
            a[nw + w * nk + groups[g][0], 1 + len(xs) + i] = 1.0
            a[nw + nw * nk + g, 1 + len(xs) + i] = -1.0  # every group's work done somewhere
        b[nw + nw * nk :] = [-work[g] for g in groups]
        cost = np.zeros(n)
        cost[0] = 1.0
        master = linprog(cost, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        if master.status != 0:
            raise RuntimeError(f"release_bound: the master LP failed: {master.message}")
        pi = np.maximum(-master.ineqlin.marginals[nw : nw + nw * nk], 0.0).reshape(nw, nk)
        alpha, added = np.zeros(nw), 0
        for w in range(nw):
            knap = milp(
                -pi[w],
                constraints=LinearConstraint(size, 0, [cores, mem]),
                integrality=np.ones(nk),
                bounds=Bounds(0, cores),
                options={"mip_rel_gap": 0.0},
            )
            found = float(pi[w] @ np.round(knap.x))
            alpha[w] = max(found, -float(knap.mip_dual_bound))  # the proven maximum, for a feasible dual
            if found > -master.ineqlin.marginals[w] + 1e-9:  # a column with a negative reduced cost
                columns[w].append(np.round(knap.x))
                added += 1
        delta = [min(pi[w, k] for w in range(head_w, nw)) for k, head_w in groups]
        value = sum(d * work[g] for d, g in zip(delta, groups, strict=True))
        value += pilots * starts[-1] * alpha[-1] - sum(lengths[w] * alpha[w] for w in range(nw - 1))
        if alpha[-1] > 0:
            best = max(best, value / (pilots * alpha[-1]) * (1 - 1e-9))
        if not added:
            break
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="seeds 1..N of the late-small mixes (default 4)")
    parser.add_argument("--windows", type=int, default=12, help="heads that start a window, at most (default 12)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.windows < 1:
        parser.error(f"--seeds and --windows want at least 1, got {args.seeds} and {args.windows}")
    print(f"{'seed':>4}  {'mix':24} {'mix_bound':>9} {'release':>8}  seconds")
    for seed in range(1, args.seeds + 1):
        for mix in late_small_mixes(seed)[::2]:  # staggered and together, one account (owners change no job)
            started = time.monotonic()
            bound = release_bound(mix.requests, mix.pilots, mix.cores, mix.mem, args.windows)
            print(
                f"{seed:4d}  {mix.name:24} {mix_bound(mix):9.0f} {bound:8.0f}  {time.monotonic() - started:5.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
