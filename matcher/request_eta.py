"""A request's ETA: when its last job should end, given its critical path, its shape and everyone's load.

``ETA = now + max(critical path, fan-in bound, outstanding work / cores)``. The critical path alone
assumes the request has every core to itself; on a shared system the work already waiting (of every
request, in core-seconds, kept by the store's scripts) divided by the cores that run it bounds how soon
anything finishes. Requests that compete therefore get comparable ETAs, and their jobs' scores
(``ETA - pressure``) compare critical-path slack on one scale — the open-lmake idea, with the load
the seed's ETA stands for.

The fan-in bound (:func:`fan_in_bound`) is what the request's own shape needs when neither of the two
others sees it: a long job behind a wide fan (CyberShake's ZipSeis after every seismogram) starts only
once the whole fan has run on the cores, then still has its own path to the end. An ETA below it is a
date the request cannot keep; its scores then claim an urgency it does not have and its jobs overtake
another request's critical path (``scripts/bench_schedule.py``, Montage beside CyberShake).

The load is counted once, at submission: the work already waiting then is ahead of the new request.
Re-pressure re-computes a request's critical-path and fan-in needs when learnt run times move them; its
load it only corrects, by how much the estimates it summed were wrong (:mod:`matcher.repressure_load`),
never re-evaluates. Re-evaluating everyone's load for every request at each run would give all load-bound
requests one shared ETA and order their jobs by pressure alone: shorter makespans for requests sent
together, but a short request sent before a long one would then end with it (in a model of the same
list scheduling over random mixes of two or three workflows: makespan -2.4 %, mean request completion
+17 %).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from taskqueues.store import Store


def capacity_cores(store: Store, *, max_age: float, floor: float = 0.0) -> float:
    """Cores that run the work: those of the live pilots, at least ``floor`` (at least one core)."""
    live = sum(int(r.get("cores", 0)) for r in store.pilot_records(max_age).values() if not r.get("stopped"))
    return float(max(live, floor, 1))


def default_floor() -> float:
    """Before any pilot reports, assume this host's cores (the local default)."""
    return float(len(os.sched_getaffinity(0)))


def live_cores(store: Store) -> float:
    """The cores of the pilots alive within three lease periods, this host's before any reports."""
    return capacity_cores(store, max_age=store.pilots.live_window, floor=default_floor())


def load_seconds(store: Store, cores: float, extra_work: float = 0.0) -> float:
    """Seconds the outstanding work (plus ``extra_work`` core-seconds) needs on ``cores``."""
    return (store.outstanding_work() + extra_work) / max(cores, 1.0)


def fan_in_bound(
    order: Sequence[str],
    deps: Mapping[str, Iterable[str]],
    ete: Mapping[str, float],
    pressure: Mapping[str, float],
    core_seconds: Mapping[str, float],
    cores: float,
) -> float:
    """Seconds the request needs on ``cores`` at least, from its shape: the largest, over its jobs, of
    ``max(longest chain before the job, work before it / cores) + pressure(job)``.

    A job cannot start before its longest chain of dependencies has run, nor before the work of all
    the jobs it transitively depends on has run on the cores; from its start, its pressure is still to
    go. The exact work before a job needs its whole ancestor set (quadratic in the jobs), so we take a
    lower bound in one pass over the edges: a job's ancestors hold each dependency with that
    dependency's ancestors, and hold all its dependencies together. So the result never exceeds the
    real need, and it is the critical path at least (a job with no dependency counts its pressure).
    ``order`` is topological; ``core_seconds`` is each job's ETE times its cores (0 for jobs that will
    not run).
    """
    cores = max(cores, 1.0)
    head: dict[str, float] = {}
    before: dict[str, float] = {}
    need = 0.0
    for job in order:
        ups = list(dict.fromkeys(deps.get(job, ())))
        head[job] = max((head[d] + ete[d] for d in ups), default=0.0)
        before[job] = max(
            max((before[d] + core_seconds[d] for d in ups), default=0.0), sum(core_seconds[d] for d in ups)
        )
        need = max(need, max(head[job], before[job] / cores) + pressure[job])
    return need


#: An ETA is re-stored only when it moves by more than this share of the time left (re-pressure).
ETA_FRACTION = 1 / 16


def eta_moved(old: float, new: float, now: float) -> bool:
    """True when an ETA moved by more than 1/16 of the remaining time (the longer of the old and the new).

    Taking the longer of the two makes the rule symmetric (growing from 100 s to 107 s left counts like
    shrinking from 107 s to 100 s), and a request already late (its ETA past) counts any move: its
    stored ETA says nothing about what is left.
    """
    return abs(new - old) > max(old - now, new - now, 0.0) * ETA_FRACTION


def request_eta(now: float, critical_path: float, load: float, fan_in: float = 0.0) -> float:
    return now + max(critical_path, load, fan_in)
