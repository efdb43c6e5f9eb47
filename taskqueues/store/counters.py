"""The fields of the community's ``stats`` hash (:attr:`taskqueues.store.keys.Keys.stats`), and what adds to them.

The scripts that do a thing count it in the same atomic step, one HINCRBY on the stats hash per event
(``_lib.lua``'s ``count``): so a counter never disagrees with the records it counts, and a crash between
the event and its count cannot happen. What is not a script's business adds here from Python: the director
counts its submissions and the batch systems' errors per backend
(:class:`taskqueues.store.control.Control`).

| field | kept by | meaning |
|---|---|---|
| ``ended:<state>`` | complete.lua, ``_lib.lua``'s finish | jobs that ended: done, failed, cancelled, dep-failed |
| ``lease_expired`` | reap.lua | leases that expired (their pilot died or lost contact) |
| ``retries`` | reap.lua, fail.lua | jobs put back to wait for another attempt (a lost lease, a pre-emption, an exit
code the job's ``retry.on_exit`` names) |
| ``resubmitted`` | resubmit.lua | ended jobs brought back by ``pilotfish resubmit`` (their dependents included) |
| ``taken_back`` | complete.lua, fail.lua, heartbeat.lua, start.lua | jobs requeued after an expired lease
that their pilot's report or heartbeat of the same attempt took back, nobody having matched them since (a
store paused longer than the lease; ``_lib.lua``'s ``take_back``) |
| ``matched`` | match.lua | jobs leased to pilots (kept in the heads hash, field ``~matched``:
:data:`~taskqueues.store.keys.MATCHED_COUNT`; :func:`matched` reads it) |
| ``forgotten`` | forget.lua | ended jobs forgotten by the retention (``taskqueues.store.retention``) |
| ``blocked`` | submit.lua, complete.lua, resubmit.lua, finish | jobs waiting for their dependencies now (a gauge) |
| ``blocked:<tq>`` | the same | the same, per task queue (the field goes when it reaches 0) |
| ``submitted:<backend>`` | the director | pilots submitted to a batch system |
| ``errors:<backend>`` | the director | batch-system calls that failed |
| ``match_seconds:<i>`` | heartbeat.lua | match calls whose latency (as a pilot saw it) fell in bucket ``i``
of :data:`MATCH_BUCKETS` (``i`` = its length: above the last bound) |
| ``match_seconds:sum`` | heartbeat.lua | the sum of those latencies (seconds) |

A pilot measures its own match calls (:class:`LatencyHistogram`) and sends what it saw since its last
heartbeat with the heartbeat (the ``mlat`` field of its record: a count per bucket, then the sum), which
adds it to the hash: a few HINCRBYs on a beat that had match calls, nothing otherwise.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence


class StatField:
    """The fields of the stats hash (the table above); a name ending in ``:`` is a prefix."""

    ENDED = "ended:"
    LEASE_EXPIRED = "lease_expired"
    RETRIES = "retries"
    TAKEN_BACK = "taken_back"
    MATCHED = "matched"
    FORGOTTEN = "forgotten"
    RESUBMITTED = "resubmitted"
    BLOCKED = "blocked"
    BLOCKED_IN = "blocked:"
    SUBMITTED = "submitted:"
    ERRORS = "errors:"
    MATCH_SECONDS = "match_seconds:"


#: Upper bounds (seconds) of the match-latency buckets: a match is a round trip of a fraction of a
#: millisecond on a quiet server, tens of milliseconds on a loaded one, seconds when something is wrong.
MATCH_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class LatencyHistogram:
    """Latencies a pilot observed since it last sent them: a count per :data:`MATCH_BUCKETS` bucket and a sum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(MATCH_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(MATCH_BUCKETS, seconds)] += 1
        self.total += max(0.0, seconds)

    def take(self) -> list[float] | None:
        """What was observed since the last take, as the heartbeat sends it (counts, then the sum), and start
        again; None when nothing was."""
        if not any(self.counts):
            return None
        out: list[float] = [*self.counts, round(self.total, 6)]
        self.counts = [0] * len(self.counts)
        self.total = 0.0
        return out

    def give_back(self, taken: Sequence[float]) -> None:
        """A heartbeat that did not reach the store: what it carried is sent with the next one."""
        for i, n in enumerate(taken[:-1]):
            self.counts[i] += int(n)
        self.total += taken[-1]
