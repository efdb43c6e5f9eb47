"""Celery beat's scheduler with beat's own liveness entry (``pilotfish health --component beat``).

Beat runs no task itself, so only beat can say that beat is alive: the entry is written from the
scheduler's tick, the loop that sends every periodic task, and goes stale when that loop stops. The tick
is made to come at least every :data:`ALIVE_EVERY` seconds, whatever the schedule's intervals.

A SIGTERM or SIGINT stops beat's loop, and the schedule file is closed once, by that loop
(:func:`install_stop_handler`): Celery's own handler closed it from inside the signal, wherever the loop
was, and a loop that went on (the SystemExit lost in a destructor or a ``finally``) read the closed shelf
at its next tick and crashed with ``ValueError: invalid operation on closed shelf``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from celery import signals
from celery.beat import PersistentScheduler, Service

from taskqueues.errors import StoreUnavailable
from taskqueues.store import Outage

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
                ctx.store.control.beat("beat")
            except StoreUnavailable as exc:  # beat keeps scheduling; its probe will tell
                OUTAGE.failed(exc)
            else:
                OUTAGE.ok()
            self._next_alive = now + ALIVE_EVERY
        return min(interval, ALIVE_EVERY)


def install_stop_handler(service: Service) -> None:
    """Make SIGTERM and SIGINT stop ``service``'s loop, whose own ``finally`` syncs and closes the schedule.

    The first signal marks the service stopping and raises SystemExit to cut a sleep short; a later one
    does nothing more (the loop is on its way out, and a second close midway through the first could lose
    the schedule). Nothing is closed inside the handler, so nothing the loop still does can meet a closed
    schedule, even when the SystemExit is lost where Python swallows exceptions.
    """

    def stop(signum: int, frame: FrameType | None) -> None:
        if service._is_shutdown.is_set():
            return
        service._is_shutdown.set()
        raise SystemExit()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, stop)


def _on_beat_init(sender: Service, **kwargs: Any) -> None:
    """Beat alone (``--beat-only``) replaces Celery's handler, installed just before; an embedded beat
    (a thread of a worker) leaves the signals to its worker."""
    if threading.current_thread() is threading.main_thread() and isinstance(sender, Service):
        install_stop_handler(sender)


signals.beat_init.connect(_on_beat_init, weak=False)
