"""The Celery control plane: one app, Redis as broker, beat scheduling the periodic work.

Run it with ``pilotfish matcher`` (a worker with an embedded beat), or ``--no-beat`` / ``--beat-only``
for separate processes (exactly one beat per deployment; see :mod:`matcher.periodic` for why a second
one would still be harmless). Messages are JSON, never pickle. Payloads do not travel through Celery:
the match path is one Lua call on Redis; Celery carries periodic and administrative work. Each worker also
runs the releaser (:mod:`matcher.release_listener`), which evaluates at once the dependents a completion announces.

Importing this module configures nothing: :func:`get_app` builds the app on first use (its static settings,
the worker's steps, the tasks and the liveness signal) and :func:`configure` points it at a store. Celery's
``-A matcher.app`` (or ``-A matcher.app.celery_app``) asks for the module's ``app``: that builds it and, when
the settings name a Redis, configures it from them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Celery, bootsteps
from celery.signals import heartbeat_sent, setup_logging

from taskqueues import logformat
from taskqueues.context import Context
from taskqueues.errors import PilotfishError, StoreUnavailable
from taskqueues.settings import Settings
from taskqueues.store import Outage, sentinel_transport_options

from .. import periodic
from ..release_listener import Releaser
from . import housekeeping

#: The app's settings that do not depend on the deployment.
STATIC_CONF: dict[str, Any] = dict(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    # A broker outage is ridden out however long it lasts (the default gives up after 100 retries).
    broker_connection_max_retries=None,
    # The periodic tasks are idempotent: one cut by a lost connection is simply run again at its next beat.
    worker_cancel_long_running_tasks_on_connection_loss=True,
    worker_send_task_events=True,
    task_send_sent_event=True,
    timezone="UTC",
    # Celery's default scheduler plus beat's own liveness entry (``pilotfish health --component beat``).
    beat_scheduler="matcher.app.beat:Scheduler",
)

T = TypeVar("T")

_context: Context | None = None

#: This worker's view of the store: one line when an outage starts and one when it ends (taskqueues.store.outage);
#: periodic tasks that meet one return without a traceback, the next beat brings them again.
OUTAGE = Outage(logging.getLogger("pilotfish.worker"), "worker", on_start=lambda: context().store.drop_connections())


def context() -> Context:
    global _context
    if _context is None:
        _context = Context(Settings.load())
    return _context


def _own_context_after_fork() -> None:
    """A forked child (the beat ``pilotfish matcher`` embeds) builds a context of its own on first use.

    It must not use the parent's Redis clients: another thread of the parent (the releaser, the worker's
    heartbeat) may have held a connection pool's lock at the fork, and redis-py's reset of a pool in a child
    takes that lock, which nobody will ever release there: beat then hung in its first liveness write and
    sent no task at all, for ever.
    """
    global _context
    if _context is not None:
        _context = Context(_context.settings, start_redis=False)


os.register_at_fork(after_in_child=_own_context_after_fork)


def configure(ctx: Context) -> Celery:
    """Point the app at the context's Redis and schedule the periodic work at the configured intervals."""
    global _context
    _context = ctx
    app = get_app()
    s = ctx.settings
    app.conf.broker_url = ctx.broker_url
    app.conf.result_backend = ctx.broker_url
    app.conf.broker_transport_options = app.conf.result_backend_transport_options = sentinel_transport_options(
        ctx.broker_url, s.redis_sentinel_master
    )
    app.conf.beat_schedule = {
        "reap": {"task": "pilotfish.reap", "schedule": s.reap_interval},
        "refresh-pools": {"task": "pilotfish.refresh_pools", "schedule": s.pool_refresh_interval},
        "clean": {"task": "pilotfish.clean", "schedule": s.clean_interval},
        "release-sweep": {"task": "pilotfish.release_sweep", "schedule": s.reap_interval},
        "repressure": {"task": "pilotfish.repressure", "schedule": s.repressure_interval},
    }
    if s.beat_director:
        app.conf.beat_schedule["director"] = {"task": "pilotfish.director", "schedule": s.director_interval}
    housekeeping.set_events(app, s.housekeeping_events)
    return app


def _worker_alive(**_: Any) -> None:
    """The worker's own liveness entry (``pilotfish health --component worker``).

    Celery sends a worker heartbeat every 2 s from the worker's event loop (Flower's sign of life too), so
    the entry stays fresh only while that loop turns, and only this worker writes it: a task run by any
    worker (the way beat's ``alive`` task was) kept every replica's probe green while one worked.
    """
    ctx = context()
    try:
        ctx.store.control.beat("worker")
    except StoreUnavailable as exc:
        OUTAGE.failed(exc)
    else:
        OUTAGE.ok()


@setup_logging.connect(dispatch_uid="pilotfish-logging")  # type: ignore[untyped-decorator,misc,unused-ignore]
def _logging(loglevel: Any = None, **_: Any) -> None:
    """Celery's own lines (worker, beat, tasks) go through Pilotfish's handler (:mod:`taskqueues.logformat`):
    set up by ``pilotfish matcher``, else here (a worker started with ``celery -A matcher.app.celery_app``)."""
    if not logformat.configured():
        settings = context().settings
        logformat.setup("worker", settings.log_format, loglevel, vo=settings.vo)


def say_through_logging() -> None:
    """With JSON logs, the notices a Celery worker writes straight to the terminal (``worker: Warm shutdown``)
    become log lines too (its banner is turned off with ``--quiet``)."""
    import celery.apps.worker as worker_app

    def say(message: str, *_: Any) -> None:
        logging.getLogger("celery.apps.worker").warning("%s", message.strip())

    worker_app.safe_say = say


class ReleaseStep(bootsteps.StartStopStep):  # type: ignore[misc,unused-ignore]
    """The worker's releaser (:mod:`matcher.release_listener`): started with the worker, after its pool, and stopped
    at its shutdown. Beat alone (``--beat-only``) is no worker and runs none."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.releaser: Releaser | None = None

    def start(self, parent: Any) -> None:
        try:
            ctx = context()
            self.releaser = Releaser(ctx.store, ctx.catalog, vo=ctx.settings.vo).start()
        except PilotfishError as exc:  # a catalog that cannot be read: the periodic sweep says so again
            logging.getLogger("pilotfish.worker").error("no releaser in this worker: %s", exc)

    def stop(self, parent: Any) -> None:
        if self.releaser is not None:
            self.releaser.stop()
            self.releaser = None


class NotifyStep(bootsteps.StartStopStep):  # type: ignore[misc,unused-ignore]
    """The worker's notifier (:mod:`matcher.notify`): request-end webhooks, called from a thread of its own so
    that a slow webhook holds none of the pool's processes. Every worker runs one; claims keep them apart."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.notifier: Any = None

    def start(self, parent: Any) -> None:
        from ..notify import Notifier

        self.notifier = Notifier.of(context()).start()

    def stop(self, parent: Any) -> None:
        if self.notifier is not None:
            self.notifier.stop()
            self.notifier = None


def _periodic(work: Callable[[Context], T], empty: T) -> T:
    """Run one periodic task's work; a store outage is the worker's outage, not a task failure."""
    try:
        done = work(context())
    except StoreUnavailable as exc:
        OUTAGE.failed(exc)
        return empty
    OUTAGE.ok()
    return done


def reap() -> dict[str, int]:
    report = _periodic(periodic.reap, None)
    if report is None:
        return {}
    return {"requeued": report.requeued, "failed": report.failed, "restored": report.restored, "parked": report.parked}


def refresh_pools() -> int:
    return _periodic(periodic.refresh_pools, 0)


def clean() -> list[str]:
    return _periodic(periodic.clean, [])


def release_sweep() -> int:
    return _periodic(periodic.release_sweep, 0)


_director: Any = None


def director() -> dict[str, Any]:
    """One director cycle; the director lives as long as this worker (its local pilots are its children).

    A worker whose settings say ``beat_director`` false runs none, even when a beat configured otherwise
    (an old one during an upgrade) sends the task: there the director is a process of its own.
    """
    global _director
    from pilot.director.service import Director

    if not context().settings.beat_director:
        return {"skipped": "beat_director is false: the director runs as its own process"}
    if _director is None:
        _director = Director(context())
    summary: dict[str, Any] = _periodic(lambda _: _director.cycle().summary(), {"skipped": "store unreachable"})
    return summary


def repressure() -> dict[str, Any]:
    from ..repressure import repressure_locked

    report = _periodic(lambda ctx: repressure_locked(ctx.store, spread=ctx.settings.ete_spread), None)
    return {"skipped": report is None, "rewritten": 0 if report is None else report.pressures_rewritten}


def submit_workflow(workflow: dict[str, Any], source: str = "<remote>") -> dict[str, Any]:
    """Remote submission: a submitter needs only the broker URL (``pilotfish submit --remote``)."""
    from ..submission import Submitter
    from ..submission import submit_workflow as submit
    from ..workflow import parse_workflow

    done = submit(Submitter.of(context()), parse_workflow(workflow, source))
    return {"request": done.request, "ids": done.ids, "eta": done.eta}


#: The tasks, with the options each is registered with.
TASKS: tuple[tuple[Callable[..., Any], dict[str, Any]], ...] = (
    (reap, {"name": "pilotfish.reap"}),
    (refresh_pools, {"name": "pilotfish.refresh_pools"}),
    (clean, {"name": "pilotfish.clean"}),
    (release_sweep, {"name": "pilotfish.release_sweep"}),
    (director, {"name": "pilotfish.director"}),
    (repressure, {"name": "pilotfish.repressure"}),
    (submit_workflow, {"name": "pilotfish.submit_workflow", "ignore_result": False}),
)

_app: Celery | None = None


def get_app() -> Celery:
    """The app of this process, built on first use."""
    global _app
    if _app is None:
        # QuietAMQP: housekeeping tasks publish no task-sent event unless housekeeping_events is set.
        app = Celery("pilotfish", amqp="matcher.app.housekeeping:QuietAMQP")
        app.conf.update(STATIC_CONF)
        app.steps["worker"].add(ReleaseStep)
        app.steps["worker"].add(NotifyStep)
        for task, options in TASKS:
            app.task(**options)(task)
        housekeeping.set_events(app, False)  # the default, until configure() applies the setting
        heartbeat_sent.connect(_worker_alive, dispatch_uid="pilotfish-worker-alive")
        _app = app
    return _app


def __getattr__(name: str) -> Any:
    """``app`` for Celery's ``-A``: built, and configured from the settings when they name a Redis (a
    ``celery`` command line has no other way to configure it)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _context is None and Settings.load().redis_url:
        return configure(context())
    return get_app()
