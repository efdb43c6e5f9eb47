"""An exact optimum for tiny scheduling instances, to check that the benchmark's lower bounds are bounds."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

from tests.support.scripts import script

wl = script("workloads")


def optimal_makespan(tasks: Sequence[wl.Task], cores: int) -> float:
    """The shortest non-preemptive schedule of single-core ``tasks`` on ``cores`` cores, by exhaustive search.

    Some optimal schedule is semi-active (no job can start earlier without reordering), so every job
    starts at time 0 or when another ends: at each such moment we try every set of ready jobs to start,
    leaving cores idle included (the optimum may need it; list scheduling never does). Exponential: for
    a handful of jobs only.
    """
    position = {t.name: i for i, t in enumerate(tasks)}
    deps = [frozenset(position[d] for d in t.deps) for t in tasks]
    runtime = [t.runtime for t in tasks]
    everyone = frozenset(range(len(tasks)))

    @functools.cache
    def best(done: frozenset[int], running: tuple[tuple[float, int], ...]) -> float:
        """Time still needed from now, given the finished jobs and the running ones (time left, job)."""
        if done == everyone:
            return 0.0
        busy = {j for _, j in running}
        ready = [j for j in everyone - done - busy if deps[j] <= done]
        free = cores - len(running)
        answer = float("inf")
        for size in range(min(free, len(ready)) + 1):
            for start in itertools.combinations(ready, size):
                now = running + tuple((runtime[j], j) for j in start)
                if not now:
                    continue
                step = min(left for left, _ in now)
                ended = done | {j for left, j in now if left == step}
                still = tuple(sorted((left - step, j) for left, j in now if left > step))
                answer = min(answer, step + best(ended, still))
        return answer

    return best(frozenset(), ())
