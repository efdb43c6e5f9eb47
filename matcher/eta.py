"""A request's ETA: when its last job should end, given its critical path and everyone's load.

``ETA = now + max(critical path still to run, outstanding work / cores)``. The critical path alone
assumes the request has every core to itself; on a shared system the work already waiting (of every
request, in core-seconds, kept by the store's scripts) divided by the cores that run it bounds how soon
anything finishes. Requests that compete therefore get comparable ETAs, and their jobs' scores
(``ETA - pressure``) compare critical-path slack on one scale — the open-lmake idea, with the load
the seed's ETA stands for. ``scripts/bench_schedule.py`` measures what this buys over the
load-blind ETA when two workflows run together.
"""

from __future__ import annotations

import os

from taskqueues.store import Store


def capacity_cores(store: Store, *, max_age: float, floor: float = 0.0) -> float:
    """Cores that run the work: those of the live pilots, at least ``floor`` (at least one core)."""
    live = sum(int(r.get("cores", 0)) for r in store.pilot_records(max_age).values() if not r.get("stopped"))
    return float(max(live, floor, 1))


def default_floor() -> float:
    """Before any pilot reports, assume this host's cores (the local default)."""
    return float(len(os.sched_getaffinity(0)))


def load_seconds(store: Store, cores: float, extra_work: float = 0.0) -> float:
    """Seconds the outstanding work (plus ``extra_work`` core-seconds) needs on ``cores``."""
    return (store.outstanding_work() + extra_work) / max(cores, 1.0)


def request_eta(now: float, critical_path: float, load: float) -> float:
    return now + max(critical_path, load)
