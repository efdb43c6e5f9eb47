"""Celery beat's scheduler with beat's own liveness entry (``pilotfish health --component beat``).

Beat runs no task itself, so only beat can say that beat is alive: the entry is written from the
scheduler's tick, the loop that sends every periodic task, and goes stale when that loop stops. The tick
is made to come at least every :data:`ALIVE_EVERY` seconds, whatever the schedule's intervals.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.beat import PersistentScheduler

from taskqueues.errors import StoreUnavailable
from taskqueues.store import alive
from taskqueues.store.outage import Outage

log = logging.getLogger(__name__)


#: Beat's view of the store and broker: one line when an outage starts, one when it ends.
def _drop_connections() -> None:
    from .celery_app import context

    context().store.drop_connections()


OUTAGE = Outage(logging.getLogger("pilotfish.beat"), "beat", on_start=_drop_connections)

#: Seconds between two of beat's liveness writes (and the longest beat sleeps between ticks).
ALIVE_EVERY = 5.0


class Scheduler(PersistentScheduler):  # type: ignore[misc]
    """Celery's default scheduler (schedule state in the ``celerybeat-schedule`` file) plus the beat."""

    _next_alive = 0.0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = float(super().tick(*args, **kwargs))
        now = time.monotonic()
        if now >= self._next_alive:
            from .celery_app import context

            ctx = context()
            try:
                alive.record(ctx.client, ctx.keys, "beat")
            except StoreUnavailable as exc:  # beat keeps scheduling; its probe will tell
                OUTAGE.failed(exc)
            else:
                OUTAGE.ok()
            self._next_alive = now + ALIVE_EVERY
        return min(interval, ALIVE_EVERY)
