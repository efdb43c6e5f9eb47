"""The pilot: fill the cores it holds with the most urgent jobs that fit, until its time is up.

One thread, one selector. The pilot is made of parts, the way Celery's worker is made of bootsteps, and
this module is its life cycle: it builds the parts, sets them up, turns the loop and tears them down.
Each turn of :meth:`Pilot._turn` does, in order: signals and operator commands (:mod:`~pilot.agent.control`);
the heartbeat when due (:mod:`~pilot.agent.heartbeat`: re-read the dynamic MJF keys, renew leases, obey
kill requests, drop lost jobs); a memory sample when due; deadlines (SIGKILL after a grace, wall limits, the
pilot's end; :mod:`~pilot.agent.processes`); the results of the payloads that ended (failures are reported
at once); **the fill** (:mod:`~pilot.agent.reports`): one exchange with the store that carries the starts
and successful ends not yet reported and the match for the freed resources, whose matched jobs start when
its reply arrives; then one $JOBSTATUS publication (:mod:`~pilot.agent.status`) if anything started or
ended; then it sleeps in the selector (:mod:`~pilot.agent.wake`) until the next thing it must do.

Exits are noticed at once (pidfds, or SIGCHLD). The selector never sleeps longer than ``command_poll`` so
operator commands, which arrive through the observer without a file descriptor, are seen within that time.
Resources are reserved exactly as each job requires and never overcommitted (:mod:`~pilot.agent.slots`).
If the pilot itself is killed with SIGKILL nothing is lost: its leases expire and the reaper requeues the
jobs, and its guardian kills the payloads.

The pilot stops when its time is up, when it has been idle for ``idle_timeout``, or once it takes no more
jobs (drained, preempted, shut down, out of jobs) and nothing it ran is left to report.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import threading
import time
from types import FrameType
from typing import Any

from pilot.agent.config import PilotConfig
from pilot.agent.control import Control
from pilot.agent.heartbeat import Heartbeat
from pilot.agent.observer import NullObserver, Observer, PilotInfo
from pilot.agent.processes import Processes
from pilot.agent.reports import Reports
from pilot.agent.shipping import Shipping
from pilot.agent.state import PilotState, seconds_text
from pilot.agent.status import Status
from pilot.agent.wake import Wake
from pilot.mjf.payload import PayloadArea, remove_tree
from pilot.mjf.source import FeatureReader
from taskqueues.errors import PilotfishError, StoreError, StoreUnavailable
from taskqueues.store import Outage, Store

log = logging.getLogger("pilot.agent")


class PilotStartError(PilotfishError):
    """The pilot cannot start: the store is unreachable, or its work area cannot be created."""


class Pilot:
    """One pilot on one worker node: call :meth:`run`, which returns the reason it stopped."""

    def __init__(
        self,
        config: PilotConfig,
        store: Store | None = None,
        *,
        observer: Observer | None = None,
        reader: FeatureReader | None = None,
    ) -> None:
        self.config = config
        identity = config.who()
        self.store = (
            store
            if store is not None
            else Store.from_url(config.redis_url, vo=config.vo, prefix=config.prefix, lease_seconds=config.lease)
        )
        # A store outage shorter than the lease is ridden out: payloads keep running, reports wait, matches
        # back off; two log lines (taskqueues.store.outage), not one per attempt.
        # Retries come often enough to renew every lease well within the grace the reaper gives leases after a
        # server restart (one lease: Store.requeue_expired).
        outage = Outage(
            log,
            f"pilot {identity.name}",
            first=config.backoff_min,
            cap=max(config.backoff_min, min(5.0, config.lease / 4)),
            on_start=self.store.drop_connections,
        )
        self.state = state = PilotState(
            config,
            identity,
            self.store,
            observer if observer is not None else NullObserver(),
            outage,
            started=time.time(),
        )
        # --wall (what the director asked the batch system for) is the least trusted source of the wall
        # limit: MJF files and the batch system's own values win (pilot.mjf.source).
        defaults = {} if config.wall is None else {"wall_limit_secs": int(config.wall)}
        self.reader = (
            reader
            if reader is not None
            else FeatureReader.from_environment(workdir=config.workdir, pilot_start=state.started, defaults=defaults)
        )
        self.wake = Wake(state)
        self.control = Control(state, self._idle)
        self.processes = Processes(state, self.wake)
        self.reports = Reports(state, self.wake, self.processes)
        self.shipping = Shipping(state)
        self.status = Status(state)
        self.heartbeat = Heartbeat(state, self.reader, self.wake, self.processes, self.reports, self.control)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def processed(self) -> int:
        """Payloads that ended (whatever their result)."""
        return self.state.processed

    # -- life cycle --------------------------------------------------------------------------------

    def run(self) -> str:
        """Run until the time is up, idle, drained, shut down or preempted; returns why it stopped."""
        reason = "stopped"
        previous = _exit_on_sigterm()
        try:
            self._setup()
            while True:
                stopped = self._turn()
                if stopped is not None:
                    reason = stopped
                    break
            self._finish(reason)
        finally:
            self._teardown()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        return reason

    def _setup(self) -> None:
        config, state = self.config, self.state
        try:
            self.store.ping()
        except Exception as exc:  # a StoreError (the guard's), or whatever a broken URL raises
            raise StoreUnavailable(f"Redis at {config.redis_url} is not reachable: {exc}") from None
        try:
            if config.scratch_workdir:  # its own scratch: nobody else may read what payloads leave there
                config.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
                config.workdir.chmod(0o700)
            config.workdir.mkdir(parents=True, exist_ok=True)
            config.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PilotStartError(f"pilot work directory {config.workdir}: {exc.strerror or exc}") from None
        features = self.reader.load()
        for warning in features.warnings:
            log.warning("MJF: %s", warning)
        state.features = features
        # The pilot's size comes from MJF, read once; the operator's --cores/--mem/--tmp override it.
        disk = features.job.disk_limit_GB
        state.slots.size(
            config.cores if config.cores is not None else (features.job.allocated_CPU or 1),
            config.mem if config.mem is not None else (features.job.mem_limit_MB or 0),
            config.tmp if config.tmp is not None else (math.floor(disk * 1000) if disk else 0),
        )
        state.area = PayloadArea(config.workdir, features, stop_margin=config.stop_margin)
        self.processes.start_guardian()
        confinement = self.processes.confinement
        state.area.quick_reset = confinement is not None and not confinement.confined
        self.status.open()
        slots, ident = state.slots, state.identity
        state.info = PilotInfo(
            name=state.name,
            queue=config.queue,
            vo=config.vo,
            cores=slots.cores,
            mem=slots.mem,
            tmp=slots.tmp,
            started=state.started,
            batch=ident.batch,
            batch_id=ident.batch_id,
            node=ident.node,
            extra={
                "pid": os.getpid(),
                "workdir": os.fspath(config.workdir),
                "jobstatus": os.fspath(self.status.directory),
                "logs": os.fspath(config.logs),
            },
        )
        self.wake.open()
        self.wake.listen()
        self.wake.install_signals(self.control.on_signal)
        log.info(
            "pilot %s: %d cores, %d MB, %d MB scratch, queue %s, time left %s",
            state.name,
            slots.cores,
            slots.mem,
            slots.tmp,
            config.queue,
            seconds_text(state.time_left()),
        )
        state.notify("pilot_started", state.info)
        self.status.publish()
        self.heartbeat.beat()

    def _teardown(self) -> None:
        self.wake.close()
        self.processes.close()
        self.reports.close()
        if self.state.area is not None:
            self.state.area.close()
        self.state.notify("close")
        if self.config.scratch_workdir:
            try:
                remove_tree(self.config.workdir)
            except OSError as exc:
                log.warning("pilot %s: its scratch directory %s is left: %s", self.name, self.config.workdir, exc)

    def _finish(self, reason: str) -> None:
        """The last words: final $JOBSTATUS, a last heartbeat record, the observer, the machine."""
        state = self.state
        state.accepting = False
        self.reports.flush(self.config.kill_grace if self.control.preempted else self.config.lease)
        self.status.publish()
        log.info("pilot %s stops: %s (%d payloads processed)", state.name, reason, state.processed)
        with contextlib.suppress(StoreError):
            self.store.heartbeat(state.name, {}, {**self.heartbeat.outgoing()[0], "stopped": reason})
        self.control.forget_stop_request()  # a request it acted on, or one that came too late
        assert state.info is not None
        state.notify("pilot_stopped", state.info, reason)
        self._shutdown_machine()

    def _shutdown_machine(self) -> None:
        """On a VM the pilot owns (``own_machine``), run the site's ``shutdown_command`` (MJF key 2.6)."""
        features = self.state.features
        command = features.machine.shutdown_command if features else None
        if not (self.config.own_machine and command):
            return
        log.info("pilot %s owns its machine: running shutdown_command %s", self.name, command)
        try:
            done = subprocess.run([command], capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            log.error("shutdown_command %s failed to run: %s", command, exc)
            return
        if done.returncode != 0:
            log.error("shutdown_command %s exited with %d: %s", command, done.returncode, done.stderr.strip())

    # -- one turn of the loop ----------------------------------------------------------------------

    def _turn(self) -> str | None:
        now = time.monotonic()
        state, processes, reports = self.state, self.processes, self.reports
        self.control.handle_signals()
        self.control.handle_commands()
        if now >= state.next_heartbeat:
            self.heartbeat.beat()
        if processes.sample_due(now):
            processes.sample()
        processes.enforce_deadlines()
        if self.shipping.due(now):
            self.shipping.live()
        for payload, result in processes.collect_ended():
            self.shipping.ship(payload, live=False)  # its output first: whoever sees it end finds its output
            reports.ended(payload, result)
        if self.control.release_asked and self._idle():
            self.control.obey_stop_request()
        reports.receive_lost()  # an outage's start closed their connection: no reply will wake the selector
        reports.fill()
        if reports.retry_due():
            reports.retry()
        if self.status.due():
            self._refill_first()
            self.status.publish()
        reports.send_unmatched()
        timeout = self._timeout()
        stopped = self._exit_reason()
        if stopped is not None:
            return stopped
        self._wait(timeout)
        return None

    def _wait(self, timeout: float) -> None:
        self.wake.wait(timeout, self._ready)
        if self.wake.on_signals:
            self.processes.reap_exited()
        self.reports.start_held()  # a core freed: the job held for it starts now, its exchange follows

    def _ready(self, kind: str, payload: Any, fd: int) -> None:
        """One ready descriptor from the selector: a payload's exit or output, or replies from the store."""
        if kind == "exit":
            if not payload.ended:
                self.processes.reaped(payload)
        elif kind == "output":
            if fd in payload.open_pipes:  # else closed when its payload was reaped in this same batch
                payload.read(fd, self.wake.unregister)
        elif kind == "reply":
            self.reports.receive_ready()

    def _refill_first(self) -> None:
        """Between slow bookkeeping steps: notice payloads that exited meanwhile and refill their cores.

        Only while few reports wait: when payloads end faster than the pilot reports them, refilling first
        would grow the backlog of unreported payloads without bound (and delay every report).
        """
        ended = self.processes.ended
        if self.state.slots.running and self.wake.is_open and len(ended) < max(2, self.state.slots.cores):
            before = len(ended)
            self._wait(0)
            if len(ended) > before:
                self.reports.fill()

    def _timeout(self) -> float:
        """Seconds the selector may sleep: until the next thing the pilot must do by itself."""
        state = self.state
        if self.processes.ended or self.control.signalled:
            return 0.0
        now = time.monotonic()
        deadlines = [state.next_heartbeat, now + self.config.command_poll]
        if state.slots.running:
            deadlines += self.processes.deadlines(now)
            deadlines += self.shipping.deadlines(now)
        elif self.reports.inflight:
            pass  # the replies wake the selector
        elif not state.accepting or state.time_left_real() == 0:
            return 0.0
        elif not self.reports.pending:  # else it waits for the store (retries are in the reports' deadlines)
            deadlines.append(state.idle_since + self.config.idle_timeout)
        if state.accepting and state.slots.free()[0] > 0:
            deadlines.append(state.next_match)
        deadlines += self.reports.deadlines(now)
        deadlines += self.status.deadlines(now)
        return max(0.0, min(deadlines) - now)

    def _exit_reason(self) -> str | None:
        state = self.state
        if state.slots.running or self.processes.ended or self.reports.inflight:
            return None
        if not state.accepting:  # drained, preempted, shut down, out of jobs
            return state.stop_reason
        if state.time_left_real() == 0:
            return "time is up"
        if self.reports.pending:
            return None  # an idle pilot waits for the store to take its reports (see Reports)
        idle = time.monotonic() - state.idle_since
        if idle >= self.config.idle_timeout:
            return f"idle: nothing matched for {idle:.1f} s"
        return None

    def _idle(self) -> bool:
        """Nothing running, ending, unreported or on the way from a match."""
        return not (self.state.slots.running or self.processes.ended or self.reports.busy)


def _exit_on_sigterm() -> Any:
    """Until :meth:`Pilot._setup` hands signals to the selector, SIGTERM (a launcher cancelling a pilot that is
    still starting) exits through the teardown, which removes the work area it may already have made; by default
    it would end the process at once and leave it. Only the main thread may set a handler; returns the handler
    it replaced (None elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def leave(number: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + number)

    return signal.signal(signal.SIGTERM, leave)
