"""Consolidation: each new pilot moved to the cheapest shape that holds its jobs, and pairs merged while
one pilot holding both costs less than the two.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskqueues.shapes import Shape

from .bins import Bin
from .demand import Demand
from .scoring import EPS, cheapest

__all__ = ["consolidate"]

#: How many of the least filled new pilots the pair-merge step considers (it is quadratic in this).
_MERGE_WINDOW = 48


def _rehouse(jobs: Sequence[Demand], shapes: Sequence[Shape]) -> Bin | None:
    """The cheapest fresh pilot that holds all ``jobs`` side by side, or None."""
    hints = {j.shape_hint for j in jobs if j.shape_hint is not None}
    if len(hints) > 1:
        return None
    cpu = sum(j.cpu for j in jobs)
    mem = sum(j.mem for j in jobs)
    tmp = sum(j.tmp for j in jobs)
    wall = max((j.wall for j in jobs), default=0.0)
    hint = next(iter(hints), None)
    shape = cheapest(shapes, lambda s: s.holds(cpu, mem, tmp, wall) and hint in (None, s.name))
    if shape is None:
        return None
    bin_ = Bin.fresh(shape)
    for job in jobs:
        bin_.add(job)
    return bin_


def _fill_ratio(bin_: Bin) -> float:
    shape = bin_.shape
    return max(
        1 - bin_.cpu / shape.cpu if shape.cpu else 0.0,
        1 - bin_.mem / shape.mem if shape.mem else 0.0,
        1 - bin_.tmp / shape.tmp if shape.tmp else 0.0,
    )


def consolidate(bins: list[Bin], shapes: Sequence[Shape]) -> list[Bin]:
    """Move each new pilot to the cheapest shape holding its jobs, then merge pairs of the least filled
    pilots while one shape holding both costs less than the two (best saving first)."""
    out: list[Bin] = []
    for bin_ in bins:
        smaller = _rehouse(bin_.jobs, shapes)
        out.append(smaller if smaller is not None and smaller.shape.cost < bin_.shape.cost else bin_)
    out.sort(key=_fill_ratio)
    window, rest = out[:_MERGE_WINDOW], out[_MERGE_WINDOW:]
    while True:
        best: tuple[float, int, int, Bin] | None = None
        for i in range(len(window)):
            for k in range(i + 1, len(window)):
                pair = window[i].shape.cost + window[k].shape.cost
                if best is not None and pair - best[0] <= 0:
                    continue  # cannot save more than the best found so far
                merged = _rehouse(window[i].jobs + window[k].jobs, shapes)
                if merged is None:
                    continue
                saving = pair - merged.shape.cost
                if saving > EPS * max(pair, 1.0) and (best is None or saving > best[0]):
                    best = (saving, i, k, merged)
        if best is None:
            break
        _, i, k, merged = best
        window = [b for n, b in enumerate(window) if n not in (i, k)] + [merged]
    return window + rest
