"""Re-pressure's load step: a request's ETA follows what was learnt about the work it counted.

A request's ETA is at least the date its load gives (:mod:`matcher.request_eta`): the work outstanding when it
was submitted (every request's, from the estimates known then) plus its own, over the cores. The
submission keeps that date in the request's record (``load``) with the cores it counted (``cores``).
The estimates it summed may have been wrong (hints 3x off, a rule not learnt yet): when re-pressure
re-estimates jobs of a request Q, the work counted moves by ``dW(Q)`` core-seconds, and so does the load
of Q and of every request submitted after Q (each counted Q's work), by ``dW(Q)`` over the cores that
request counted; a request submitted before Q never counted it. Without this
step a request sent while another's work was overestimated keeps a late ETA, and its jobs yield to
everyone's, long after the estimates were corrected; on chains of one request there is no load to
correct, which is why multi-request mixes recovered less of 3x-wrong hints than chains did
(``scripts/bench_schedule.py --estimates``).

Only what was learnt moves a load: time passing and a request falling behind do not. A request's new ETA:

* its ETA was its load (load-bound): the new load, but never earlier than what its own shape needs from
  now (critical path and fan-in, read whole as re-pressure's ETA step does);
* its ETA was its shape's: the later of it and the new load;
* an ETA re-pressure just re-stored from the shape side is never earlier than the load.

It is re-stored, and all the request's jobs re-scored, when it moves by more than 1/16 of the time left
(:func:`matcher.request_eta.eta_moved`); the new load dates are stored whatever the ETA does, so moves add
up. A load date already past holds nothing and is left alone. Cost: when a run moved some request's work
by :data:`MIN_SHIFT` seconds of the live cores or more, one read of the request records (not of their
jobs); shifts below :data:`MIN_SHIFT` seconds are dropped. Records stored before the load was kept have
none and are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from taskqueues.store import RecordCache, Store

from .request_eta import eta_moved

__all__ = ["MIN_SHIFT", "LoadShift", "shift_loads", "work_moved"]

#: Seconds of the cores under which a run's corrected work does not move any load.
MIN_SHIFT = 1.0
#: A stored ETA within this of the stored load was the load's (both are stored to the millisecond).
_SAME = 0.002

#: A request's record (its ETA, load, first and last job ids).
Record = dict[str, Any]


@dataclass
class LoadShift:
    """What the load step decided: every ETA to re-store (those re-pressure's shape step chose, unless the load
    holds the stored one, and the load's own), load dates to store, and the records of the requests whose ETA
    the load step re-stores."""

    etas: dict[str, float] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)


def work_moved(records: RecordCache, changed: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Core-seconds by which new estimates (request -> job -> new estimate) move each request's work."""
    out: dict[str, float] = {}
    for request, jobs in changed.items():
        for job, new in jobs.items():
            rec = records.cache.get(job)
            if rec is not None:
                out[request] = out.get(request, 0.0) + (new - rec.ete) * rec.job().cpu
    return out


def shift_loads(
    store: Store,
    moved: Mapping[str, float],
    touched: Mapping[str, Record],
    etas: Mapping[str, float],
    now: float,
    cores: float,
    shape: Callable[[str, Record], float | None],
) -> LoadShift:
    """The load step (module docstring). ``moved``: core-seconds by request (:func:`work_moved`);
    ``touched``: the records re-pressure read; ``etas``: the ETAs it re-stores from the shape side;
    ``shape(request, record)``: the date the request's own shape needs from now (None: nothing left);
    ``cores``: the live cores, to tell whether the moves are worth reading the requests for."""
    out = LoadShift(etas=dict(etas))
    cores = max(cores, 1.0)
    shifting = any(abs(w) / cores >= MIN_SHIFT for w in moved.values())
    requests: Mapping[str, Record] = store.views.all_request_records() if shifting else touched
    starts = {q: int(requests[q]["first"]) for q in moved if q in requests} if shifting else {}
    for request, rec in requests.items():
        if "load" not in rec:
            continue
        old = float(rec["load"])
        first = int(rec["first"])
        counted = max(float(rec.get("cores", cores)), 1.0)
        shift = sum(w for q, w in moved.items() if q in starts and first >= starts[q]) / counted
        new = old + shift if abs(shift) >= MIN_SHIFT and max(old, old + shift) > now else old
        if new != old:
            out.loads[request] = round(new, 3)
        eta = float(rec["eta"])
        target = _target(request, rec, eta, old, new, etas.get(request), shape)
        if target is None or target == etas.get(request, eta):
            continue
        if eta_moved(eta, target, now):
            out.etas[request] = round(target, 3)
            out.records[request] = rec
        else:  # the stored ETA stands (the load holds it against a lower one from the shape)
            out.etas.pop(request, None)
    return out


def _target(
    request: str,
    rec: Record,
    eta: float,
    old: float,
    new: float,
    restored: float | None,
    shape: Callable[[str, Record], float | None],
) -> float | None:
    """The request's ETA once its load is ``new`` (None: nothing to change)."""
    if restored is not None:
        return max(restored, new)
    if new == old:
        return None
    if eta > old + _SAME:  # the shape's ETA
        return max(eta, new)
    if new >= eta:
        return new
    need = shape(request, rec)
    return None if need is None else max(new, need)
