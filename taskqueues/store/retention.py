"""Job retention: forgetting what ended long ago, so the store does not grow for ever.

Every job record, its payload output (``log:<job>``) and its entries in the ended index and the done log
stay until something forgets them. :func:`forget_ended` (the clean task runs it with the ``job_retention``
setting) walks the ended index from its oldest entry to the cutoff and hands each request it meets to
``forget.lua``, which forgets it whole, in one atomic step, only when every one of its jobs ended before the
cutoff (so a request is always shown complete or not at all); jobs of no request go when their dependents
have ended too. A successful job waits until re-pressure has learnt from it. What was learnt (run times by
key and by rule), the counters and the request ETAs of live requests are kept.

One call of the script reads every job of one request: a request of 100,000 jobs blocks the server for a
fraction of a second once, when it is forgotten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .guard import guarded
from .part import Scripted
from .records import text

#: Entries of the ended index read per round trip.
PAGE = 1000


@dataclass
class Forgotten:
    """What one pass forgot: requests, jobs (of requests or not), and the ended entries it examined."""

    requests: int = 0
    jobs: int = 0
    examined: int = 0


def _request_of(raw: Any) -> str | None:
    """The request a stored job record names (None: none, or an unreadable record, which stays)."""
    try:
        rec = json.loads(raw)
    except (TypeError, ValueError):
        return None
    q = rec.get("q") if isinstance(rec, dict) else None
    return q if isinstance(q, str) else None


def _forget(store: Scripted, cutoff: float, request: str, jobs: list[str]) -> tuple[str, int]:
    k = store.keys
    reply = store.call_script(
        "forget",
        [k.jobs, k.requests, k.donelog, k.cursor, k.kills],
        [k.base + ":", repr(cutoff), request, *jobs],
        [k.notify, k.notifyq, k.notifywatch],
    )
    status = text(reply[0])
    return status, int(reply[1]) if status == "ok" else 0


@guarded("forgetting ended jobs")
def forget_ended(store: Scripted, cutoff: float) -> Forgotten:
    """Forget every request whose jobs all ended before ``cutoff`` (unix seconds), and the jobs of no request
    that did and whose dependents ended; returns what was forgotten."""
    k = store.keys
    out = Forgotten()
    tried: set[str] = set()
    offset = 0
    while True:
        page = [text(m) for m in store.client.zrangebyscore(k.ended, "-inf", f"({cutoff!r}", start=offset, num=PAGE)]
        if not page:
            return out
        out.examined += len(page)
        alone: list[str] = []
        for job, raw in zip(page, store.client.hmget(k.jobs, page), strict=True):
            request = _request_of(raw) if raw is not None else None
            if request is None:
                alone.append(job)
            elif request not in tried:
                tried.add(request)
                status, n = _forget(store, cutoff, request, [])
                if status == "ok":
                    out.requests += 1
                    out.jobs += n
        if alone:
            out.jobs += _forget(store, cutoff, "", alone)[1]
        still = store.client.zmscore(k.ended, page)
        offset += sum(score is not None for score in still)
