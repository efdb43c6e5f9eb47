"""Housekeeping tasks stay out of Flower's task list unless asked for.

Beat sends the periodic tasks (reap, release sweep, pool refresh, clean, re-pressure, director) every few
seconds; with task events on, they are most of what Flower lists and bury the payloads (which pilots
announce as tasks of their own: :mod:`pilot.celery_events`). By default they send no task event at all:
the worker sends none for them (``Task.send_events``) and whoever sends them (beat) publishes no
``task-sent`` (:class:`QuietAMQP` drops it from their messages). ``housekeeping_events = true`` brings them
back. Every other task (remote submission) keeps its events.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.app.amqp import AMQP

#: The periodic tasks beat schedules (:func:`matcher.app.celery_app.configure`).
HOUSEKEEPING = frozenset(
    {
        "pilotfish.reap",
        "pilotfish.refresh_pools",
        "pilotfish.clean",
        "pilotfish.release_sweep",
        "pilotfish.repressure",
        "pilotfish.director",
    }
)

_events = {"on": False}


def set_events(app: Celery, on: bool) -> None:
    """Turn the housekeeping tasks' events on or off (before the worker starts: it reads them once)."""
    _events["on"] = on
    for name in HOUSEKEEPING:
        if name in app.tasks:
            app.tasks[name].send_events = on


class QuietAMQP(AMQP):  # type: ignore[misc]
    """Celery's messaging, without the ``task-sent`` event of a housekeeping task while their events are off."""

    def as_task_v2(self, task_id: str, name: str, *args: Any, **kwargs: Any) -> Any:
        message = super().as_task_v2(task_id, name, *args, **kwargs)
        if name in HOUSEKEEPING and not _events["on"]:
            message = message._replace(sent_event=None)
        return message
