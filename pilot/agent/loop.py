"""The pilot: fill the cores it holds with the most urgent jobs that fit, until its time is up.

One thread, one selector. Each turn of :meth:`Pilot._turn` does, in order: signals and operator
commands; the heartbeat when due (re-read the dynamic MJF keys, renew leases, obey kill requests, drop
lost jobs); a memory sample when due; deadlines (SIGKILL after a grace, wall limits, the pilot's end);
the results of the payloads that ended (failures are reported at once); **the fill**: one exchange with
the store (:meth:`Store.send_exchange`) that carries the starts and successful ends not yet reported
and the match for the freed resources, whose matched jobs start when its reply arrives; then one
$JOBSTATUS publication if
anything started or ended. A payload's start is reported once it has run :data:`START_REPORT_DELAY`, or
inside its completion if it ends first; an end goes with the next match or at the turn's end. For short
payloads the store hears of a payload's start and end and answers the next match in one round trip,
without the pilot waiting for it (:meth:`Pilot._send`, :meth:`Pilot._received`): the gap between one
payload's exit and the next one's start — the pilot's overhead on every core — is that round trip and
a spawn.

Exits are noticed at once: each payload's pidfd is in the selector (readable when the process exits),
or, on kernels without pidfds, SIGCHLD wakes the selector through ``signal.set_wakeup_fd``. When nothing
fits the pilot backs off (``backoff_min`` doubling to ``backoff_max``) and tries again at once when a
payload ends. The selector never sleeps longer than ``command_poll`` so operator commands, which arrive
through the observer without a file descriptor, are seen within that time.

Resources are reserved exactly as each job requires (``job.cpu``/``job.mem``/``job.tmp``) and never
overcommitted. Every report carries the attempt, so a job taken from this pilot (lease expired, killed)
answers :class:`~taskqueues.errors.StaleReport` and the pilot moves on; if the pilot itself is killed
with SIGKILL nothing is lost: its leases expire and the reaper requeues the jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import redis
from redis.connection import Connection

from pilot.agent.config import PilotConfig, Releaser
from pilot.agent.guardian import Guardian
from pilot.agent.memory import over_limit, over_limit_reason, sample_sessions
from pilot.agent.observer import Command, NullObserver, Observer, PilotInfo, PilotLoad
from pilot.agent.payload import Payload, PayloadError, Report, Stop, pidfds_supported
from pilot.mjf.features import Features
from pilot.mjf.formulas import denormalise
from pilot.mjf.jobstatus import JobStatusWriter, RunningPayload
from pilot.mjf.payload import PayloadArea
from pilot.mjf.source import FeatureReader
from taskqueues import stops
from taskqueues.errors import PilotfishError, StaleReport, StoreError, StoreUnavailable
from taskqueues.exchange import PendingExchange
from taskqueues.outage import Outage
from taskqueues.records import Job, JobUsage, PilotOffer, RunResult
from taskqueues.store import Store

log = logging.getLogger("pilot.agent")

#: The horizon used for $JOBSTATUS when neither the job nor the pilot has any known end.
NO_END = 365 * 86400.0

#: Seconds a payload runs before its start is reported; a payload that ends sooner reports its start inside
#: its completion (one script less per short payload).
START_REPORT_DELAY = 0.05


class PilotStartError(PilotfishError):
    """The pilot cannot start: the store is unreachable, or its work area cannot be created."""


@dataclass
class _InFlight:
    """An exchange sent to the store: what it reported and the resources its match may fill."""

    exchange: PendingExchange
    starts: list[Payload]
    succeeded: list[tuple[Payload, RunResult]]
    reserved: tuple[int, int, int]
    want: int


@dataclass
class _PendingReport:
    """A report the store could not take (Redis unreachable): retried until it lands or the lease is gone."""

    payload: Payload
    result: RunResult
    give_up_at: float


class Pilot:
    """One pilot on one worker node: call :meth:`run`, which returns the reason it stopped."""

    def __init__(
        self,
        config: PilotConfig,
        store: Store | None = None,
        *,
        observer: Observer | None = None,
        reader: FeatureReader | None = None,
        releaser: Releaser | None = None,
    ) -> None:
        self.config = config
        self.identity = config.who()
        self.name = self.identity.name
        self.store = store if store is not None else Store.from_url(
            config.redis_url, vo=config.vo, prefix=config.prefix, lease_seconds=config.lease)
        self.observer: Observer = observer if observer is not None else NullObserver()
        # A store outage shorter than the lease is ridden out: payloads keep running, reports wait, matches
        # back off; two log lines (taskqueues.outage), not one per attempt.
        # Retries come often enough to renew every lease well within the grace the reaper gives leases after a
        # server restart (one lease: Store.requeue_expired).
        self.outage = Outage(log, f"pilot {self.name}", first=config.backoff_min,
                             cap=max(config.backoff_min, min(5.0, config.lease / 4)),
                             on_start=self.store.drop_connections)
        self.releaser = releaser if releaser is not None else config.releaser
        self.started = time.time()
        # --wall (what the director asked the batch system for) is the least trusted source of the wall
        # limit: MJF files and the batch system's own values win (pilot.mjf.source).
        defaults = {} if config.wall is None else {"wall_limit_secs": int(config.wall)}
        self.reader = reader if reader is not None else FeatureReader.from_environment(
            workdir=config.workdir, pilot_start=self.started, defaults=defaults)
        self.features: Features | None = None
        self.cores = self.mem = self.tmp = 0
        self.running: dict[str, Payload] = {}
        self.ended: list[Payload] = []  # reaped, result not yet taken
        self.unstarted: list[Payload] = []  # spawned, start not yet reported to the store
        self.succeeded: list[tuple[Payload, RunResult]] = []  # ended well, completion not yet reported
        self.inflight: deque[_InFlight] = deque()  # exchanges sent, replies not yet read (oldest first)
        self._channel: Connection | None = None  # the pilot's own connection for exchanges (ordered)
        self._channel_fd = -1
        self.pending: list[_PendingReport] = []
        self._next_retry = 0.0  # reports waiting for the store are retried from then on
        self.accepting = True
        self.stop_reason = ""
        self.preempted = False
        self.processed = 0
        self.launched = 0
        self._signals: list[int] = []
        self._dirty = True
        self._backoff = config.backoff_min
        self._next_match = 0.0
        self._pubsub: Any = None
        self._pubsub_sock: Any = None  # the wake subscription's socket, as registered in the selector
        self._release_asked = False  # the director asked for a release while the pilot was busy
        self._next_heartbeat = 0.0
        self._next_sample = 0.0
        self._next_publish = 0.0
        self._idle_since = time.monotonic()
        self._selector: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._saved_signals: dict[int, Any] = {}
        self._saved_wakeup = -1
        self.area: PayloadArea | None = None
        self.guardian: Guardian | None = None
        self.jobstatus: JobStatusWriter | None = None
        self.info: PilotInfo | None = None

    # -- life cycle --------------------------------------------------------------------------------

    def run(self) -> str:
        """Run until the time is up, idle, drained, shut down or preempted; returns why it stopped."""
        self._setup()
        reason = "stopped"
        try:
            while True:
                stopped = self._turn()
                if stopped is not None:
                    reason = stopped
                    break
            self._finish(reason)
        finally:
            self._teardown()
        return reason

    def _setup(self) -> None:
        config = self.config
        try:
            self.store.client.ping()
        except Exception as exc:  # redis raises several classes; all mean "cannot use the store"
            raise StoreUnavailable(f"Redis at {config.redis_url} is not reachable: {exc}") from None
        try:
            config.workdir.mkdir(parents=True, exist_ok=True)
            config.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PilotStartError(f"pilot work directory {config.workdir}: {exc.strerror or exc}") from None
        features = self.reader.load()
        for warning in features.warnings:
            log.warning("MJF: %s", warning)
        self._apply_features(features)
        self.area = PayloadArea(config.workdir, features, stop_margin=config.stop_margin)
        self.guardian = Guardian()
        directory = config.jobstatus_dir or (os.environ.get("JOBSTATUS") or None)
        self.jobstatus = JobStatusWriter(directory, allocated_CPU=self.cores, pilot_start=self.started,
                                         workdir=config.workdir, priority_factor=config.priority_factor,
                                         revert_hold=config.jobstatus_revert_hold)
        ident = self.identity
        self.info = PilotInfo(
            name=self.name, queue=config.queue, vo=config.vo, cores=self.cores, mem=self.mem, tmp=self.tmp,
            started=self.started, batch=ident.batch, batch_id=ident.batch_id, node=ident.node,
            extra={"pid": os.getpid(), "workdir": os.fspath(config.workdir),
                   "jobstatus": os.fspath(self.jobstatus.directory), "logs": os.fspath(config.logs)})
        self._selector = selectors.DefaultSelector()
        self._listen_for_work()
        self._install_signals()
        log.info("pilot %s: %d cores, %d MB, %d MB scratch, queue %s, time left %s", self.name, self.cores,
                 self.mem, self.tmp, config.queue, _seconds(self._time_left()))
        self._notify("pilot_started", self.info)
        self._publish()
        self._heartbeat()

    def _apply_features(self, features: Features) -> None:
        """Take the pilot's size from MJF (first load) or its new dynamic values (refresh)."""
        first = self.features is None
        self.features = features
        if not first:
            return
        config = self.config
        self.cores = config.cores if config.cores is not None else (features.job.allocated_CPU or 1)
        self.mem = config.mem if config.mem is not None else (features.job.mem_limit_MB or 0)
        disk = features.job.disk_limit_GB
        self.tmp = config.tmp if config.tmp is not None else (math.floor(disk * 1000) if disk else 0)

    def _install_signals(self) -> None:
        """SIGTERM/SIGINT (preemption) and SIGCHLD all wake the selector; only in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("pilot %s runs outside the main thread: no signal handling", self.name)
            return
        assert self._selector is not None
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wake = (reader, writer)
        self._selector.register(reader, selectors.EVENT_READ, ("wake", None))
        self._saved_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        watched = [signal.SIGTERM, signal.SIGINT]
        if not pidfds_supported():
            watched.append(signal.SIGCHLD)  # no pidfds: a child's exit must wake the selector
        for number in watched:
            self._saved_signals[number] = signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        if number != signal.SIGCHLD:
            self._signals.append(number)

    def _listen_for_work(self) -> None:
        """Subscribe to the store's wake channel: work entering a task queue wakes an idle pilot at once
        instead of at its next back-off poll; and to the pilot's own channel, on which a kill or stop
        request for it is announced (:mod:`taskqueues.stops`): it heartbeats at once. Polling and the
        heartbeat stay the fallback (a lost subscription is renewed at the next heartbeat)."""
        assert self._selector is not None
        try:
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            pubsub.subscribe(self.store.keys.wake)
            while pubsub.get_message(timeout=0.5) is not None:
                pass
            try:  # apart: a server whose ACL refuses this channel must not cost the wake channel
                pubsub.subscribe(self.store.keys.pilot_channel(self.name))
                while pubsub.get_message(timeout=0.5) is not None:
                    pass
            except Exception as exc:
                log.warning("pilot %s: no channel of its own (%s): kills and stops wait for its heartbeat",
                            self.name, exc)
            assert pubsub.connection is not None
            self._pubsub_sock = pubsub.connection._sock
            self._selector.register(self._pubsub_sock, selectors.EVENT_READ, ("work", None))
        except Exception as exc:
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                self.outage.failed(exc)
            else:
                log.warning("pilot %s: no wake subscription (%s): polling only", self.name, exc)
            return
        self._pubsub = pubsub

    def _work_arrived(self) -> None:
        assert self._pubsub is not None
        own = self.store.keys.pilot_channel(self.name).encode()
        try:
            while (message := self._pubsub.get_message(timeout=0)) is not None:
                if message.get("channel") == own:
                    self._next_heartbeat = 0.0  # a kill or stop request: read it now
        except Exception as exc:
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                self.outage.failed(exc)
            else:
                log.warning("pilot %s: wake subscription lost (%s)", self.name, exc)
            self._drop_pubsub()
        self._next_match = 0.0
        self._backoff = self.config.backoff_min

    def _drop_pubsub(self) -> None:
        if self._pubsub is None:
            return
        with contextlib.suppress(Exception):
            # The socket registered, not the connection's current one: a broken connection has dropped it
            if self._selector is not None and self._pubsub_sock is not None:
                self._selector.unregister(self._pubsub_sock)
        self._pubsub_sock = None
        with contextlib.suppress(Exception):
            self._pubsub.close()
        self._pubsub = None

    def _teardown(self) -> None:
        self._drop_pubsub()
        if self._wake is not None:
            signal.set_wakeup_fd(self._saved_wakeup)
            for number, handler in self._saved_signals.items():
                signal.signal(number, handler)
            for sock in self._wake:
                sock.close()
            self._wake = None
        for payload in list(self.running.values()) + self.ended:
            payload.signal(signal.SIGKILL)
            if not payload.ended:
                with contextlib.suppress(ChildProcessError):
                    payload.reap()
            payload.close()
            payload.sandbox.cleanup()
        if self.guardian is not None:
            self.guardian.close()
        if self._channel is not None:
            self._channel.disconnect()  # type: ignore[no-untyped-call]
            self.store.client.connection_pool.release(self._channel)
            self._channel = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self.area is not None:
            self.area.close()
        self._notify("close")

    def _finish(self, reason: str) -> None:
        """The last words: final $JOBSTATUS, a last heartbeat record, the observer, the machine."""
        self.accepting = False
        if self.unstarted or self.succeeded:
            self._send(None, 0, all_starts=True)
        self._drain()
        self._retry_reports(force=True)
        self._publish()
        log.info("pilot %s stops: %s (%d payloads processed)", self.name, reason, self.processed)
        with contextlib.suppress(StoreError):
            self.store.heartbeat(self.name, {}, {**self._record(), "stopped": reason})
        with contextlib.suppress(Exception):  # a request it acted on, or one that came too late
            stops.forget(self.store.client, self.store.keys, self.name)
        assert self.info is not None
        self._notify("pilot_stopped", self.info, reason)
        self._shutdown_machine()

    def _shutdown_machine(self) -> None:
        """On a VM the pilot owns (``own_machine``), run the site's ``shutdown_command`` (MJF key 2.6)."""
        command = self.features.machine.shutdown_command if self.features else None
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
        self._handle_signals()
        self._handle_commands()
        if now >= self._next_heartbeat:
            self._heartbeat()
        if self.running and now >= self._next_sample:
            self._sample()
        self._enforce_deadlines()
        self._collect_ended()
        if self._release_asked and self._idle():
            self._obey_stop_request()
        self._fill()
        if self.pending and time.monotonic() >= self._next_retry:
            self._retry_reports()
        if self._hold_ended():
            self._dirty = True  # the values held after a withdrawn drain are published fresh
        if self._dirty and time.monotonic() >= self._next_publish:
            self._refill_first()
            self._publish()
        if self.succeeded or (self.unstarted and time.monotonic() >= self._start_report_due()):
            self._send(None, 0)  # what no match carried this turn goes alone
        timeout = self._timeout()
        stopped = self._exit_reason()
        if stopped is not None:
            return stopped
        self._wait(timeout)
        return None

    def _wait(self, timeout: float) -> None:
        assert self._selector is not None
        for key, _ in self._selector.select(timeout):
            kind, payload = key.data
            if kind == "exit":
                if not payload.ended:
                    self._reaped(payload)
            elif kind == "output":
                if key.fd not in payload.open_pipes:  # closed when its payload was reaped in this same batch
                    continue
                payload.read(key.fd, self._selector.unregister)
            elif kind == "wake":
                self._drain_wake()
            elif kind == "work" and self._pubsub is not None:
                self._work_arrived()
            elif kind == "reply":
                self._receive_ready()
        if self._wake is not None:  # no pidfds: SIGCHLD woke us; check every payload without reaping it
            for payload in [p for p in self.running.values() if p.pidfd is None]:
                if payload.has_exited():
                    self._reaped(payload)

    def _drain_wake(self) -> None:
        assert self._wake is not None
        with contextlib.suppress(BlockingIOError):
            while self._wake[0].recv(4096):
                pass

    def _timeout(self) -> float:
        """Seconds the selector may sleep: until the next thing the pilot must do by itself."""
        if self.ended or self._signals:
            return 0.0
        now = time.monotonic()
        deadlines = [self._next_heartbeat, now + self.config.command_poll]
        if self.running:
            deadlines.append(self._next_sample)
            deadlines += [p.kill_at for p in self.running.values() if p.kill_at is not None]
            wall_now = time.time()
            for payload in self.running.values():
                end = self._payload_deadline(payload)[0]
                if end is not None and payload.stop is None:
                    deadlines.append(now + end - wall_now)
        elif self.inflight:
            pass  # the replies wake the selector
        elif not self.accepting or self._time_left_real() == 0:
            return 0.0
        else:
            deadlines.append(self._idle_since + self.config.idle_timeout)
        if self.accepting and self._free()[0] > 0:
            deadlines.append(self._next_match)
        if self.pending:
            deadlines.append(max(self._next_retry, now + 0.05))
        if self.unstarted:
            deadlines.append(self._start_report_due())
        if self._dirty:
            deadlines.append(self._next_publish)
        hold = self.jobstatus.hold_until if self.jobstatus is not None else None
        if hold is not None:
            deadlines.append(now + hold - time.time())
        return max(0.0, min(deadlines) - now)

    def _exit_reason(self) -> str | None:
        if self.running or self.ended or self.inflight:
            return None
        if not self.accepting:  # drained, preempted, shut down, out of jobs
            return self.stop_reason
        if self._time_left_real() == 0:
            return "time is up"
        idle = time.monotonic() - self._idle_since
        if idle >= self.config.idle_timeout:
            return f"idle: nothing matched for {idle:.1f} s"
        return None

    # -- signals and commands ----------------------------------------------------------------------

    def _handle_signals(self) -> None:
        while self._signals:
            number = self._signals.pop(0)
            name = signal.Signals(number).name
            if self.preempted:
                log.warning("pilot %s: second %s: killing every payload now", self.name, name)
                for payload in self.running.values():
                    payload.signal(signal.SIGKILL)
                continue
            log.warning("pilot %s: %s: giving every payload back and stopping", self.name, name)
            self.preempted = True
            self._stop_accepting(f"preempted ({name})")
            for payload in self.running.values():
                payload.terminate(Stop(f"pilot preempted ({name})", "requeue"), self.config.kill_grace)

    def _handle_commands(self) -> None:
        try:
            commands: list[Command] = self.observer.commands()
        except Exception:  # an observer must not stop payloads, even when it breaks its promise not to raise
            log.exception("observer.commands() failed")
            return
        for command in commands:
            if command.kind == "kill":
                payload = self.running.get(command.job)
                if payload is None:
                    log.warning("operator asked to kill job %s, which this pilot does not run", command.job)
                    continue
                log.info("operator kills job %s", command.job)
                payload.terminate(Stop(command.reason or "killed by operator", "fail"), self.config.kill_grace)
            elif command.kind == "shutdown":
                self._shut_down(command.reason or "shutdown requested by operator")
            elif command.kind == "drain":
                log.info("operator drains pilot %s", self.name)
                self._stop_accepting(command.reason or "drain requested by operator")
            else:
                log.warning("unknown operator command %r ignored", command.kind)

    def _shut_down(self, reason: str) -> None:
        """Celery's warm shutdown, for a pilot: take no new work, give every running payload back to its
        task queue now (SIGTERM, SIGKILL after the kill grace), then exit."""
        log.info("operator shuts pilot %s down: giving its %d running payloads back", self.name, len(self.running))
        self._stop_accepting(reason)
        for payload in self.running.values():
            if payload.stop is None:
                payload.terminate(Stop("pilot shut down by operator", "requeue"), self.config.kill_grace)

    def _idle(self) -> bool:
        """Nothing running, ending, unreported or on the way from a match."""
        return not (self.running or self.ended or self.inflight or self.unstarted or self.succeeded)

    def _obey_stop_request(self) -> None:
        """Act on this pilot's stop request in the store, if any (:mod:`taskqueues.stops`)."""
        try:
            asked = stops.read(self.store.client, self.store.keys, self.name)
        except Exception as exc:  # redis raises several classes; the next heartbeat asks again
            log.warning("pilot %s: cannot read its stop request: %s", self.name, exc)
            return
        self._release_asked = False
        if asked is None or (not self.accepting and asked.mode != "shutdown"):  # a drain may turn into a shutdown
            return
        if asked.mode == "release" and not self._idle():
            self._release_asked = True  # looked at again when the pilot next finds nothing to do
            return
        log.info("pilot %s: %s requested: %s", self.name, asked.mode, asked.reason)
        if asked.mode == "shutdown":
            self._shut_down(asked.reason or "shutdown requested by operator")
        else:
            self._stop_accepting(asked.reason or f"{asked.mode} requested")
        with contextlib.suppress(Exception):
            stops.forget(self.store.client, self.store.keys, self.name)

    def _stop_accepting(self, reason: str) -> None:
        if self.accepting:
            self.accepting = False
            self.stop_reason = reason
            self._dirty = True  # can_postpone_last_job turns False
            log.info("pilot %s takes no more jobs: %s", self.name, reason)

    # -- heartbeat, memory, deadlines --------------------------------------------------------------

    def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self.config.heartbeat
        if self._pubsub is None and self._selector is not None:
            self._listen_for_work()
        try:
            features = self.reader.refresh()
        except PilotfishError as exc:
            log.warning("MJF refresh failed, keeping the previous values: %s", exc)
        else:
            if features != self.features:
                before = self._time_left()
                self._apply_features(features)
                assert self.area is not None
                self.area.update(features)
                log.info("MJF changed: time left %s (was %s)", _seconds(self._time_left()), _seconds(before))
                self._dirty = True
        if self.guardian is not None and self.guardian.revive():
            log.warning("pilot %s: its payload guardian had died: a new one watches its %d payload(s)", self.name,
                        len(self.running))
        jobs = {p.id: p.job.attempt for p in self.running.values()}
        jobs.update({r.payload.id: r.payload.job.attempt for r in self.pending})
        usage = {p.id: JobUsage(p.usage.peak_rss / 1_000_000, p.usage.cpu)
                 for p in self.running.values() if p.usage.peak_rss}  # measured at least once
        try:
            reply = self.store.heartbeat(self.name, jobs, self._record(), usage)
        except StoreUnavailable as exc:
            self.outage.failed(exc)
        except StoreError as exc:
            log.warning("heartbeat failed (leases not renewed): %s", exc)
        else:
            self.outage.ok()
            self._obey_stop_request()
            for job, reason in reply.kills.items():
                payload = self.running.get(job)
                if payload is not None:
                    log.info("job %s: kill requested: %s", job, reason)
                    payload.terminate(Stop(reason, "fail"), self.config.kill_grace)
            for job in reply.lost:
                payload = self.running.get(job)
                if payload is not None:
                    log.warning("job %s is no longer this pilot's (lease lost): stopping it unreported", job)
                    payload.terminate(Stop("lease lost", "none"), self.config.kill_grace)
                self.pending = [r for r in self.pending if r.payload.id != job]
        assert self.info is not None
        self._notify("heartbeat", self.info, self._load())

    def _record(self) -> dict[str, Any]:
        """What operators read about this pilot in the store's pilots hash."""
        cpu, mem, tmp = self._used()
        return {
            "name": self.name, "queue": self.config.queue, "node": self.identity.node,
            "batch": self.identity.batch, "batch_id": self.identity.batch_id, "pid": os.getpid(),
            "cores": self.cores, "mem": self.mem, "tmp": self.tmp, "used_cpu": cpu, "used_mem": mem,
            "used_tmp": tmp, "running": sorted(self.running), "processed": self.processed,
            "started": round(self.started, 3), "time_left": self._time_left(), "draining": not self.accepting,
        }

    def _load(self) -> PilotLoad:
        cpu, mem, _ = self._used()
        return PilotLoad(used_cpu=cpu, used_mem=mem, running=tuple(sorted(self.running)),
                         processed=self.processed, time_left=self._time_left(), draining=not self.accepting)

    def _sample(self) -> None:
        self._next_sample = time.monotonic() + self.config.mem_sample_interval
        live = {p.pid: p for p in self.running.values() if not p.ended}
        for sid, sample in sample_sessions(set(live)).items():
            payload = live[sid]
            payload.usage.add(sample)
            limit = self._mem_limit(payload.job)
            if payload.stop is None and over_limit(sample.rss, limit, self.config.mem_tolerance):
                reason = over_limit_reason(sample.rss, limit, self.config.mem_tolerance)
                log.warning("job %s: %s: killing it", payload.id, reason)
                payload.terminate(Stop(reason, "fail"), self.config.kill_grace)

    def _mem_limit(self, job: Job) -> int:
        """MB a payload may use: its ``mem`` requirement or, for a job that asked for none, the pilot's whole
        memory (its $JOBFEATURES ``mem_limit_MB`` says so, and it is enforced the same way); 0 when the
        pilot's memory is unknown, and nothing is enforced."""
        return job.mem or self.mem

    def _payload_deadline(self, payload: Payload) -> tuple[float | None, Stop | None]:
        """When the payload must be stopped (UNIX time), and how: its own wall limit or the pilot's end."""
        wall = _wall_requirement(payload.job)
        assert self.features is not None
        factor = self.features.cpufactor
        real = None if wall is None else denormalise(wall, factor)
        own = payload.start_wall + real if real is not None else None
        pilot_end = self.area.pilot_end(self.features) if self.area else None
        if own is not None and (pilot_end is None or own <= pilot_end):
            at = "" if factor == 1 else f" normalised ({real:g} s at CPU factor {factor:g})"
            return own, Stop(f"wall time limit {wall} s{at} exceeded", "fail")
        if pilot_end is not None:
            return pilot_end, Stop("the pilot reached its end (wall limit or shutdown time)", "requeue")
        return None, None

    def _enforce_deadlines(self) -> None:
        if not self.running:
            return
        now, wall_now = time.monotonic(), time.time()
        for payload in self.running.values():
            if payload.kill_at is not None and now >= payload.kill_at:
                log.warning("job %s did not stop within %g s of SIGTERM: SIGKILL", payload.id,
                            self.config.kill_grace)
                payload.signal(signal.SIGKILL)
                payload.kill_at = math.inf
            if payload.stop is None:
                end, stop = self._payload_deadline(payload)
                if end is not None and stop is not None and wall_now >= end:
                    log.warning("job %s: %s", payload.id, stop.reason)
                    payload.terminate(stop, self.config.kill_grace)

    # -- filling -----------------------------------------------------------------------------------

    def _used(self) -> tuple[int, int, int]:
        cpu = mem = tmp = 0
        for payload in self.running.values():
            cpu += payload.job.cpu
            mem += payload.job.mem
            tmp += payload.job.tmp
        return cpu, mem, tmp

    def _free(self) -> tuple[int, int, int]:
        """What is neither used by a payload nor offered in a match whose reply is still to come."""
        cpu, mem, tmp = self._used()
        for sent in self.inflight:
            cpu, mem, tmp = cpu + sent.reserved[0], mem + sent.reserved[1], tmp + sent.reserved[2]
        return self.cores - cpu, self.mem - mem, self.tmp - tmp

    def _time_left(self) -> float | None:
        """Seconds left in reference (normalised) time, what the matcher compares job estimates with."""
        assert self.features is not None
        return self.features.time_left_normalised(time.time(), self.config.stop_margin)

    def _time_left_real(self) -> float | None:
        assert self.features is not None
        return self.features.time_left(time.time(), self.config.stop_margin)

    def _fill(self) -> None:
        """Offer what is free to the store (with the reports not yet sent); the jobs it matches are
        started when the reply arrives (:meth:`_received`), the loop meanwhile goes on."""
        if not self.accepting or time.monotonic() < self._next_match:
            return
        cpu, mem, tmp = self._free()
        if cpu <= 0:
            return
        if self._time_left_real() == 0:
            self._stop_accepting("time is up")
            return
        want = cpu
        if self.config.max_jobs is not None:
            want = min(want, self.config.max_jobs - self.launched - sum(sent.want for sent in self.inflight))
            if want <= 0:
                if not self.inflight:
                    self._stop_accepting(f"ran its maximum of {self.config.max_jobs} jobs")
                return
        self._send(PilotOffer(self.name, self.config.queue, cpu, max(0, mem), max(0, tmp), self._time_left()), want)

    def _start_report_due(self) -> float:
        """When the oldest unreported start must go to the store even if no match carries it."""
        return self.unstarted[0].start_mono + START_REPORT_DELAY

    def _send(self, offer: PilotOffer | None, want: int, *, all_starts: bool = False) -> None:
        """Send the successful ends not yet reported, the starts that are due (or ``all_starts``) and, with
        an offer, a match, on the pilot's own connection without waiting for the reply
        (:class:`PendingExchange`). A start that is not due yet stays: if its payload ends first, it
        travels inside the completion (one script less for a short payload)."""
        succeeded, self.succeeded = self.succeeded, []
        ended = {p.id for p, _ in succeeded}
        due = time.monotonic() - START_REPORT_DELAY
        starts: list[Payload] = []
        waiting: list[Payload] = []
        for payload in self.unstarted:
            (starts if all_starts or payload.id in ended or payload.start_mono <= due else waiting).append(payload)
        self.unstarted = waiting
        try:
            if self._channel is None:
                self._channel = self.store.client.connection_pool.get_connection()
            exchange = self.store.send_exchange(
                self.name, self._channel,
                starts=[(p.id, p.job.attempt, p.start_wall) for p in starts if p.id not in ended],
                completions=[(p.id, p.job.attempt, dataclasses.replace(result, started=p.start_wall)
                              if p in starts else result) for p, result in succeeded],
                offer=offer, max_jobs=want)
        except StoreUnavailable as exc:
            self._unreachable(exc, starts, succeeded)
            return
        reserved = (offer.cpu, offer.mem, offer.tmp) if offer is not None else (0, 0, 0)
        self.inflight.append(_InFlight(exchange, starts, succeeded, reserved, want if offer is not None else 0))
        self._watch_channel()
        if offer is not None:
            self._next_match = math.inf  # the reply says when to match again

    def _watch_channel(self) -> None:
        """Keep the selector on the channel's socket (a reconnection changes it) while replies are due."""
        assert self._selector is not None
        fd = self.inflight[0].exchange.fileno() if self.inflight else -1
        if fd == self._channel_fd:
            return
        if self._channel_fd >= 0:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(self._channel_fd)
        self._channel_fd = -1
        if fd >= 0:
            self._selector.register(fd, selectors.EVENT_READ, ("reply", None))
            self._channel_fd = fd

    def _receive_ready(self) -> None:
        """Handle every reply that has arrived (several may sit in the connection's buffer)."""
        while self.inflight and self.inflight[0].exchange.ready():
            self._received(self.inflight.popleft())
        self._watch_channel()

    def _drain(self) -> None:
        """Wait for every reply still due: before a report that must not overtake them, and at the end."""
        while self.inflight:
            self._received(self.inflight.popleft())
        self._watch_channel()

    def _received(self, sent: _InFlight) -> None:
        """Apply one exchange's reply: refused starts stop their payloads unreported, completions are
        noted, released dependents go to the releaser, and the matched jobs start (or, when the pilot
        no longer takes jobs, go back)."""
        try:
            reply = sent.exchange.receive()
        except StoreUnavailable as exc:
            self._unreachable(exc, sent.starts, sent.succeeded)
            return
        except StoreError as exc:
            log.error("reports and match failed: %s", exc)
            for payload, result in sent.succeeded:
                self._ended_note(payload, result, "unreported")
            self._backoff_match(sent.want > 0)
            return
        if self.outage.ok():
            self._next_heartbeat = 0.0  # renew every lease now: the reaper's grace after a restart is short
        for payload in sent.starts:
            why = reply.refused.get(payload.id)
            if why is not None and not payload.ended:
                log.warning("job %s was taken from this pilot before it started: %s", payload.id, why)
                payload.terminate(Stop("lease lost before start", "none"), 0.0)
        for payload, result in sent.succeeded:
            why = reply.refused.get(payload.id)
            if why is not None:
                log.warning("job %s: report refused, the job was taken from this pilot: %s", payload.id, why)
            self._ended_note(payload, result, "done" if why is None else "stale")
        self._release(reply.released)
        if sent.want == 0:
            return
        if not reply.matched:
            self._backoff_match(True)
            return
        self._backoff = self.config.backoff_min
        self._next_match = 0.0
        for job in reply.matched:
            if not self.accepting:
                self._give_back(job, f"pilot {self.name} stopped taking jobs ({self.stop_reason})")
            elif self._launch(job) is None:  # a job given back: do not take it again at once
                self._next_match = time.monotonic() + self.config.backoff_max

    def _backoff_match(self, matched_nothing: bool) -> None:
        if matched_nothing:
            self._next_match = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self.config.backoff_max)

    def _unreachable(self, exc: StoreError, starts: list[Payload], succeeded: list[tuple[Payload, RunResult]]) -> None:
        """The store did not answer an exchange: its reports wait, the next match waits the outage's back-off."""
        self._next_match = time.monotonic() + self.outage.failed(exc)
        self.unstarted = starts + self.unstarted  # the heartbeat keeps their leases meanwhile
        give_up = time.monotonic() + self.config.lease
        self.pending += [_PendingReport(p, result, give_up) for p, result in succeeded]

    def _launch(self, job: Job) -> Payload | None:
        """Start one matched job's payload; None when the job had to be given back."""
        cpu, mem, tmp = self._free()
        if job.cpu > cpu or job.mem > mem or job.tmp > tmp:  # never overcommit, even if the store erred
            self._give_back(job, f"matched job needs cpu={job.cpu} mem={job.mem} tmp={job.tmp} but "
                                 f"pilot {self.name} has only cpu={cpu} mem={mem} tmp={tmp} free")
            return None
        assert self.area is not None and self._selector is not None
        try:
            sandbox = self.area.payload(f"{job.id}.{job.attempt}", cores=job.cpu, mem_MB=self._mem_limit(job) or None,
                                        wall_norm=_wall_requirement(job),
                                        disk_GB=job.tmp / 1000 if job.tmp else None)
        except PilotfishError as exc:
            self._give_back(job, str(exc))
            self._stop_accepting(f"cannot create payload directories: {exc}")
            return None
        payload = Payload(job, sandbox, log_dir=self.config.logs, output_cap=self.config.output_cap,
                          guardian=self.guardian)
        try:
            payload.spawn({**sandbox.env(), "PILOTFISH_PILOT": self.name})
        except (PayloadError, OSError) as exc:
            sandbox.cleanup()
            self._give_back(job, str(exc))
            self._stop_accepting(f"cannot start payloads: {exc}")
            return None
        self.running[job.id] = payload
        self.unstarted.append(payload)
        self.launched += 1
        self._dirty = True
        self._notify("payload_started", self.info, job)
        if payload.pidfd is not None:
            self._selector.register(payload.pidfd, selectors.EVENT_READ, ("exit", payload))
        for fd in payload.open_pipes:
            self._selector.register(fd, selectors.EVENT_READ, ("output", payload))
        return payload

    def _give_back(self, job: Job, reason: str) -> None:
        """A matched job this pilot cannot run: requeue it at once, not the job's fault."""
        log.error("job %s given back: %s", job.id, reason)
        with contextlib.suppress(StoreError):
            self.store.fail(job.id, job.attempt, self.name, RunResult(exit_code=None, reason=reason), requeue=True)

    # -- ends and reports --------------------------------------------------------------------------

    def _reaped(self, payload: Payload) -> None:
        """The payload's shell exited: free its resources now (the fill runs next), report later."""
        assert self._selector is not None
        if payload.pidfd is not None:
            self._selector.unregister(payload.pidfd)
        for fd in payload.open_pipes:
            self._selector.unregister(fd)
        payload.reap()
        self.running.pop(payload.id, None)
        self.ended.append(payload)
        self._dirty = True
        self._next_match = 0.0
        self._backoff = self.config.backoff_min
        if not self.running:
            self._idle_since = time.monotonic()

    def _refill_first(self) -> None:
        """Between slow bookkeeping steps: notice payloads that exited meanwhile and refill their cores.

        Only while few reports wait: when payloads end faster than the pilot reports them, refilling first
        would grow the backlog of unreported payloads without bound (and delay every report).
        """
        if self.running and self._selector is not None and len(self.ended) < max(2, self.cores):
            before = len(self.ended)
            self._wait(0)
            if len(self.ended) > before:
                self._fill()

    def _collect_ended(self) -> None:
        """Take the results of the payloads that ended: successes wait for the next round trip to the
        store, anything else is reported at once."""
        while self.ended:
            payload = self.ended.pop(0)
            result = payload.result()
            payload.close()
            payload.sandbox.cleanup()
            self.processed += 1
            if payload.stop is None and not payload.killed_from_outside and result.exit_code == 0:
                self.succeeded.append((payload, result))
            else:
                self._report(payload, result)

    def _report(self, payload: Payload, result: RunResult) -> bool:
        """Report a payload that did not simply succeed (or retry a success the store could not take);
        False when Redis was unreachable (retried later)."""
        job = payload.job
        stop = payload.stop
        report: Report | None = stop.report if stop is not None else None
        if report is None and payload.killed_from_outside:
            # Not the job's fault: give it back (it counts against its retry limit).
            report = "requeue"
            result = dataclasses.replace(result, reason=f"{result.reason}; given back: killed from outside the pilot")
        if payload in self.unstarted and report != "none":
            self._send(None, 0, all_starts=True)  # its start first, so the store records when it ran
        self._drain()  # nothing sent before may land after this report
        state: str
        try:
            if report == "none":
                state = "lost"
            elif report is None and result.exit_code == 0:
                self._release(self.store.complete(job.id, job.attempt, self.name, result))
                state = "done"
            else:
                state = str(self.store.fail(job.id, job.attempt, self.name, result, requeue=report == "requeue"))
        except StaleReport as exc:
            log.warning("job %s: report refused, the job was taken from this pilot: %s", job.id, exc)
            state = "stale"
        except StoreUnavailable as exc:
            self._next_retry = time.monotonic() + self.outage.failed(exc)
            if not any(r.payload is payload for r in self.pending):
                self.pending.append(_PendingReport(payload, result, time.monotonic() + self.config.lease))
            return False
        except StoreError as exc:
            log.error("job %s: report failed: %s", job.id, exc)
            state = "unreported"
        else:
            if self.outage.ok():
                self._next_heartbeat = 0.0
        self._ended_note(payload, result, state)
        return True

    def _release(self, released: list[str]) -> None:
        """Hand the dependents a completion released to the releaser (it evaluates deferred requirements)."""
        if released and self.releaser is not None:
            try:
                self.releaser(released)
            except Exception:  # the releaser is the caller's; its failure must not stop payloads
                log.exception("releaser failed for %s", released)

    def _ended_note(self, payload: Payload, result: RunResult, state: str) -> None:
        log.info("job %s attempt %d: %s%s", payload.id, payload.job.attempt, state,
                 f" ({result.reason})" if result.reason else "")
        self._notify("payload_ended", self.info, payload.job, result, state)

    def _retry_reports(self, force: bool = False) -> None:
        now = time.monotonic()
        keep: list[_PendingReport] = []
        for pending in self.pending:
            if now >= pending.give_up_at:
                log.warning("job %s: giving up reporting it; its lease expires and the reaper requeues it",
                            pending.payload.id)
                continue
            if not self._report(pending.payload, pending.result) and not force:
                keep.append(pending)
        self.pending = keep

    def _publish(self) -> None:
        """Rewrite $JOBSTATUS for the payloads running now.

        Called in each turn in which a payload started or ended, but at most once per
        ``jobstatus_interval``: payloads that last longer than that are each published at their start
        and end; a burst of shorter ones is published as one state at the end of the interval (the
        values are whole seconds; rewriting nine files under a lock per millisecond payload would make
        the pilot, not the payloads, the bottleneck).
        """
        assert self.jobstatus is not None and self.features is not None and self.area is not None
        self._dirty = False
        self._next_publish = time.monotonic() + self.config.jobstatus_interval
        pilot_end = self.area.pilot_end(self.features)
        factor = self.features.cpufactor
        entries = []
        for payload in self.running.values():
            start = payload.start_wall
            wall = _wall_requirement(payload.job)
            ends = [e for e in (pilot_end, start + denormalise(wall, factor) if wall else None) if e is not None]
            max_end = min(ends) if ends else start + NO_END
            ete = payload.job.ete
            expected = start + denormalise(ete, factor) if ete > 0 else max_end
            entries.append(RunningPayload(cores=payload.job.cpu, start=start, expected_end=expected, max_end=max_end))
        self.jobstatus.can_postpone_last_job = self._can_postpone([e.expected_end for e in entries])
        try:
            self.jobstatus.publish(entries)
        except PilotfishError as exc:
            log.warning("$JOBSTATUS not updated: %s", exc)

    def _hold_ended(self) -> bool:
        """True once the hold of $JOBSTATUS after a withdrawn drain is over (its values are then stale)."""
        hold = self.jobstatus.hold_until if self.jobstatus is not None else None
        return hold is not None and time.time() >= hold

    def _can_postpone(self, expected_ends: list[float]) -> bool:
        """$JOBSTATUS ``can_postpone_last_job``: False once the pilot is retiring (spec: "ready to be
        retired, and does not expect more user jobs to be fetched").

        That is the case when it takes no more jobs, and while the site announces a shutdown time
        (``shutdowntime`` or ``shutdowntime_job``) that its running payloads cannot all finish before: it is
        draining, nothing it starts may end after that time, and the payloads it has already run into it.
        A shutdown time far enough away for every running payload leaves it True (the pilot keeps filling
        its cores with jobs that end before it); so does a shutdown time the site withdraws.
        """
        if not self.accepting:
            return False
        assert self.features is not None
        shutdowns = [t for t in (self.features.machine.shutdowntime, self.features.job.shutdowntime_job)
                     if t is not None]
        if not shutdowns:
            return True
        deadline = min(shutdowns) - self.config.stop_margin
        return all(end < deadline for end in expected_ends)

    # -- helpers -----------------------------------------------------------------------------------

    def _notify(self, method: str, *args: Any) -> None:
        """Call an observer method; an observer failure is logged and never reaches the payloads."""
        call: Callable[..., None] = getattr(self.observer, method)
        try:
            call(*args)
        except Exception:
            log.exception("observer.%s failed", method)


def _wall_requirement(job: Job) -> int | None:
    """The job's own wall-time requirement, if it gave one: normalised seconds (reference-machine time,
    :mod:`taskqueues.requirements`); real seconds on this node are that / cpufactor (``denormalise``)."""
    value = job.requirements.get("wall")
    try:
        seconds = int(value) if value is not None else 0
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def _seconds(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.0f} s"
