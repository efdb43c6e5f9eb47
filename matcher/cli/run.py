"""``pilotfish run WORKFLOW``: the whole system on one machine, for one workflow, to completion.

It submits the workflow, then runs in one process what a deployment spreads over several: the
matcher's periodic work (:mod:`matcher.periodic`: reaping, releasing, re-pressure, and at beat's
intervals the pool refresh and cleaning: :class:`Maintenance`), the releaser that
evaluates at once the dependents a completion announces (:mod:`matcher.release_listener`), a site director
whose queues (the local default catalog, or the configured one) start pilots through their backends,
and a live progress display. Pilots are real ``pilotfish pilot`` processes that pull jobs from Redis.
When every job has ended it stops the pilots it started and prints a summary; the exit status is
non-zero when a job did not succeed.

Interrupted (SIGINT, SIGTERM, SIGHUP: a closed terminal) at any moment, it stops at its next check (a
quarter second, or the end of a director cycle: a pilot being launched is launched, then stopped): it
cancels the request's unfinished jobs (running payloads get their kill at once), stops every pilot it
started (SIGTERM, SIGKILL after the backend's grace; pilots still queued in the backend, and one launched
just before the interrupt, included), says so in one line and exits with 128 + the signal's number. The
request is left *cancelled*: ``pilotfish status REQUEST`` shows its jobs cancelled with the reason "run
interrupted (SIGINT)"; run the workflow again to start over.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

from pilot.director.service import Director
from taskqueues.context import Context
from taskqueues.errors import PilotfishError, StoreError
from taskqueues.store import Job, JobState

from .. import periodic
from ..release_listener import Releaser
from ..repressure import repressure_locked
from ..status import RequestStatus, request_status
from ..submission import Submitter, submit_workflow
from ..workflow import load_workflow
from .control import cancel_request

#: How long a run waits for the pilots it stops at its end (SIGKILL comes after the backend's grace).
STOP_WAIT = 15.0

STATE_ORDER = (
    "blocked",
    "releasing",
    "held",
    "waiting",
    "matched",
    "running",
    "done",
    "failed",
    "cancelled",
    "dep-failed",
)


@dataclass
class RunSummary:
    request: str
    name: str
    states: dict[str, int]
    makespan: float
    wall: float
    pilots: int
    utilisation: float | None
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    interrupted: signal.Signals | None = None  # the signal that interrupted the run
    stopped: int = 0  # pilots the run stopped at its end
    cancelled: int = 0  # jobs an interrupt cancelled

    @property
    def ok(self) -> bool:
        return set(self.states) <= {"done"} and self.interrupted is None

    def interrupt_line(self) -> str:
        """The one line that says what an interrupt did."""
        assert self.interrupted is not None
        name = self.interrupted.name
        return (
            f"pilotfish run: interrupted by {name}: stopped {self.stopped} pilot(s) and their payloads; request "
            f"{self.request} cancelled ({self.cancelled} unfinished job(s): `pilotfish status {self.request}`)"
        )

    def lines(self) -> list[str]:
        counts = ", ".join(f"{n} {s}" for s in STATE_ORDER if (n := self.states.get(s)))
        util = "n/a" if self.utilisation is None else f"{100 * self.utilisation:.0f}%"
        out = [
            f"request {self.request} ({self.name}): {counts}",
            f"makespan {self.makespan:.1f}s (first start to last end), {self.wall:.1f}s from submission",
            f"pilots {self.pilots}, utilisation {util} of their cores",
        ]
        for job, state, reason in self.failures:
            out.append(f"  {state}: {job}: {reason}")
        return out


class Interrupt:
    """SIGINT, SIGTERM and SIGHUP while a run lasts (a context manager): the first is noted and the run stops
    at its next check; later ones while it stops are noted only (stopping takes a few seconds, and a
    KeyboardInterrupt in the middle of it would leave pilots behind). Outside the main thread it installs
    nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    def __bool__(self) -> bool:
        return self.signal is not None

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, number: int, _frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signal.Signals(number)


class Progress:
    """One line rewritten in place on a terminal; plain lines, only on change, otherwise. Output that fails
    (a closed terminal) stops the display, not the run."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        try:
            self.tty = out.isatty()
        except ValueError:  # closed
            self.tty = False
        self.last = ""
        self.last_counts: tuple[str, int] = ("", -1)
        self.last_time = 0.0

    def show(self, status: RequestStatus, pilots: int, started: float) -> None:
        try:
            self._show(status, pilots, started)
        except (OSError, ValueError):  # a closed terminal (SIGHUP follows) or stream
            self.out = _NOWHERE

    def _show(self, status: RequestStatus, pilots: int, started: float) -> None:
        now = time.time()
        counts = "  ".join(f"{s} {status.states[s]}" for s in STATE_ORDER if status.states.get(s))
        eta = max(0.0, status.eta - now)
        line = f"[{now - started:6.1f}s] {counts} | pilots {pilots} | ETA {eta:.0f}s"
        if self.tty:
            self.out.write("\r" + line.ljust(len(self.last)))
            self.out.flush()
            self.last = line
        elif (counts, pilots) != self.last_counts or now - self.last_time > 10:
            self.out.write(line + "\n")
            self.out.flush()
            self.last_time = now
            self.last_counts = (counts, pilots)

    def end(self) -> None:
        if self.tty and self.last:
            with contextlib.suppress(OSError, ValueError):
                self.out.write("\n")


class _Nowhere:
    """Where the progress goes once its stream failed."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


_NOWHERE: IO[str] = _Nowhere()  # type: ignore[assignment]


class Maintenance:
    """The periodic work of :mod:`matcher.periodic` that beat schedules in a deployment, on one loop's clock.

    Every ``every`` seconds: reaping, the releasing sweep and re-pressure; every ``pool_refresh_interval``
    the SubmitPools are recomputed from the catalog (RFC #7), and every ``clean_interval`` the task queues
    (and pools) empty past the grace period and the requests past the retention are forgotten, as beat
    does: a long ``pilotfish run`` keeps its pools true to the catalog and its keyspace clean.
    """

    def __init__(self, ctx: Context, every: float = 1.0, start: float | None = None) -> None:
        self.ctx = ctx
        self.every = every
        now = time.time() if start is None else start
        self.next = {"often": now, "refresh": now + ctx.settings.pool_refresh_interval}
        self.next["clean"] = now + ctx.settings.clean_interval

    def tick(self, now: float) -> list[str]:
        """Run what is due at ``now``; the names of what ran (``often``, ``refresh``, ``clean``)."""
        ran: list[str] = []
        if now >= self.next["often"]:
            periodic.reap(self.ctx)
            periodic.release_sweep(self.ctx)
            repressure_locked(self.ctx.store, spread=self.ctx.settings.ete_spread)
            self.next["often"] = now + self.every
            ran.append("often")
        if now >= self.next["refresh"]:
            periodic.refresh_pools(self.ctx)
            self.next["refresh"] = now + self.ctx.settings.pool_refresh_interval
            ran.append("refresh")
        if now >= self.next["clean"]:
            periodic.clean(self.ctx)
            self.next["clean"] = now + self.ctx.settings.clean_interval
            ran.append("clean")
        return ran


def run_workflow(
    ctx: Context,
    path: str | Path,
    *,
    out: IO[str] = sys.stdout,
    tick: float = 0.25,
    director_interval: float = 0.5,
    timeout: float | None = None,
    stop: Callable[[], bool] = lambda: False,
    interrupt: Interrupt | None = None,
) -> RunSummary:
    """Run a workflow to its end (see the module doc); ``interrupt``, when it has caught a signal, stops the
    run: the request is cancelled and every pilot of the run stopped."""
    interrupt = interrupt if interrupt is not None else Interrupt()
    workflow = load_workflow(path)
    started = time.time()
    submitted = submit_workflow(Submitter.of(ctx), workflow)
    out.write(f"request {submitted.request} ({workflow.name}): {len(submitted.ids)} jobs submitted\n")
    log_dir = Path(ctx.settings.state_dir) / "logs"
    director = Director(ctx, log_dir=str(log_dir))
    releaser = Releaser(ctx.store, ctx.catalog, vo=ctx.settings.vo).start()
    progress = Progress(out)
    maintenance = Maintenance(ctx, start=started)
    next_director = 0.0
    stopped = cancelled = 0
    try:
        while not interrupt:
            now = time.time()
            if now >= next_director:
                director.cycle()
                next_director = now + director_interval
            maintenance.tick(now)
            status = request_status(ctx.store, submitted.request)
            progress.show(status, len(_live_pilots(ctx, started)), started)
            if status.final or stop() or interrupt or (timeout is not None and now - started > timeout):
                break
            time.sleep(tick)
        if interrupt.signal is not None:
            with contextlib.suppress(StoreError):  # first: running payloads get their kill at once
                counts = cancel_request(ctx.store, submitted.request, f"run interrupted ({interrupt.signal.name})")
                cancelled = counts["ended"] + counts["requested"]
    finally:
        progress.end()
        releaser.stop()
        stopped = director.stop_all(wait=STOP_WAIT)
        director.close()
    if workflow.notify or ctx.settings.notify_url:  # no worker here: its webhook is called once, now
        from ..notify import Notifier

        with contextlib.suppress(PilotfishError):
            Notifier.of(ctx).run_once()
    summary = summarise(ctx, submitted.request, workflow.name, started)
    summary.interrupted, summary.stopped, summary.cancelled = interrupt.signal, stopped, cancelled
    return summary


def _live_pilots(ctx: Context, since: float) -> list[dict[str, object]]:
    records = ctx.store.pilot_records(ctx.store.pilots.live_window)
    return [r for r in records.values() if float(str(r.get("started", 0))) >= since - 1 and not r.get("stopped")]


def summarise(ctx: Context, request: str, name: str, started: float) -> RunSummary:
    jobs: list[Job] = ctx.store.request_jobs(request)
    states: dict[str, int] = {}
    for job in jobs:
        states[job.state.value] = states.get(job.state.value, 0) + 1
    starts = [j.started for j in jobs if j.started]
    ends = [j.ended for j in jobs if j.ended]
    makespan = (max(ends) - min(starts)) if starts and ends else 0.0
    busy = sum((j.wall or 0.0) * j.cpu for j in jobs if j.state is JobState.DONE or j.wall)
    # Every pilot of this run lived from its start to the end of the run (the run stops them).
    end = time.time()
    pilots = [r for r in ctx.store.pilot_records().values() if float(r.get("started", 0)) >= started - 1]
    capacity = sum(int(r.get("cores", 0)) * max(0.0, end - float(r["started"])) for r in pilots)
    failures = [
        (j.name or j.id, j.state.value, j.reason or "")
        for j in jobs
        if j.state in (JobState.FAILED, JobState.DEP_FAILED, JobState.CANCELLED)
    ]
    return RunSummary(
        request,
        name,
        states,
        makespan,
        time.time() - started,
        len(pilots),
        busy / capacity if capacity > 0 else None,
        failures,
    )
