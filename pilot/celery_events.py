"""A pilot observer that speaks Celery's event protocol, so the stock Flower shows pilots and payloads.

A pilot is not a Celery worker (Celery's Redis transport would redeliver a long payload after its
visibility timeout); it only *talks* like one on the same broker:

- worker events, as Celery's ``Heart`` sends them (celery/worker/heartbeat.py ``Heart._send``):
  ``worker-online`` at start, ``worker-heartbeat`` every ``freq`` seconds with ``freq``, ``active``,
  ``processed``, ``loadavg`` and ``sw_ident``/``sw_ver``/``sw_sys``, ``worker-offline`` at stop. Flower's
  state (celery/events/state.py ``Worker.alive``) counts a worker alive while its last heartbeat is newer
  than ``freq`` x 2.
- task events, as a worker sends them (celery/worker/strategy.py, celery/worker/request.py):
  ``task-received`` (``uuid``, ``name``, ``args``/``kwargs`` as repr strings like Celery's
  ``argsrepr``/``kwargsrepr``, ``retries``, ``root_id``, ``parent_id``, ``eta``, ``expires``),
  ``task-started``, then ``task-succeeded`` (``result``, ``runtime``), ``task-failed`` (``exception``),
  ``task-revoked`` (``terminated``, ``signum``) or ``task-retried`` (a requeued payload).

Task ids are UUID5s of (VO, job, attempt): stable, unique per attempt, and in the form every Celery tool
expects; the observer keeps the map back to the job so that Flower's revoke can find it.

Events are queued and published by one background thread with its own broker connection, so the fill
loop only pays for building a small dict (measured in tests/test_celery_events.py). When the broker is
away the thread retries with a capped back-off, keeping at most ``max_queued`` events (oldest dropped).
No method raises: a monitoring outage never stops payloads.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import resource
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.events import EventDispatcher
from celery.utils.sysinfo import load_average
from kombu.connection import Connection

from pilot.agent.observer import Command, PilotInfo, PilotLoad
from pilot.remote_control import RemoteControl, Reply, celery_mailbox, ok
from taskqueues import __version__ as PILOTFISH_VERSION
from taskqueues.store import Job, RunResult, account_of, sentinel_transport_options

log = logging.getLogger(__name__)

#: Namespace of the task ids: uuid5(TASK_NAMESPACE, "<vo>/<job>/<attempt>").
TASK_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://pilotfish/jobs")

SW_IDENT = "pilotfish"

#: How a payload's end state (what pilot/agent/reports.py passes: "done", the JobState store.fail left the
#: job in, or "lost"/"stale"/"unreported") shows in Flower. A payload killed through Celery's revoke is
#: REVOKED whatever the state; anything not listed here is a FAILURE.
SUCCEEDED_STATES = frozenset({"done"})
#: Cancelled by the store's kill, or killed because the pilot lost the job's lease.
REVOKED_STATES = frozenset({"cancelled", "lost"})
#: Requeued (SIGTERM of the pilot, or a failure with retries left): Celery's RETRY.
RETRIED_STATES = frozenset({"waiting", "matched"})


def task_uuid(vo: str, job_id: str, attempt: int) -> str:
    """The Celery task id of one attempt of one job: deterministic, so any process can compute it."""
    return str(uuid.uuid5(TASK_NAMESPACE, f"{vo}/{job_id}/{attempt}"))


def task_name(job: Job) -> str:
    return job.name or f"job{job.id}"


class _Sender:
    """Publishes queued events from one thread; emits ``worker-heartbeat`` itself every ``freq`` seconds.

    Heartbeats are made at send time (never queued), so a backlog after an outage never carries stale
    heartbeats, which Celery's state would flag as clock drift.
    """

    def __init__(
        self,
        app: Celery,
        hostname: str,
        freq: float,
        heartbeat_fields: Callable[[], dict[str, Any]],
        max_queued: int,
        max_backoff: float,
    ) -> None:
        self.app = app
        self.hostname = hostname
        self.freq = freq
        self._heartbeat_fields = heartbeat_fields
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._max_queued = max_queued
        self._max_backoff = max_backoff
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._online = False
        self._next_heartbeat = 0.0
        self._heartbeat_now = False
        self._conn: Connection | None = None
        self._dispatcher: EventDispatcher | None = None
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name=f"celery events {hostname}", daemon=True)
        self._thread.start()

    def put(self, type_: str, fields: dict[str, Any]) -> None:
        with self._lock:
            if len(self._queue) >= self._max_queued:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((type_, fields))
        self._wake.set()

    def set_online(self, online: bool) -> None:
        with self._lock:
            self._online = online
            self._next_heartbeat = time.monotonic() + self.freq

    def heartbeat_now(self) -> None:
        self._heartbeat_now = True
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def close(self, timeout: float) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop and close the connection."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("pilot %s: %d Celery events not sent before closing", self.hostname, self.pending())

    def _run(self) -> None:
        backoff = 0.1
        while True:
            with self._lock:
                online, due = self._online, self._next_heartbeat
            wait = max(0.0, due - time.monotonic()) if online else None
            if not self._stop.is_set():
                self._wake.wait(wait)
            self._wake.clear()
            try:
                self._flush()
                self._maybe_heartbeat()
                if backoff > 0.1:
                    log.info("pilot %s: Celery events flow again", self.hostname)
                backoff = 0.1
            except Exception as exc:
                self.failures += 1
                self._disconnect()
                # One warning per outage, not one per retry: a long outage must not flood the pilot's log.
                log.log(
                    logging.WARNING if backoff == 0.1 else logging.DEBUG,
                    "pilot %s: cannot send Celery events (%s: %s); retrying every %.0f s at most",
                    self.hostname,
                    type(exc).__name__,
                    exc,
                    self._max_backoff,
                )
                if self._stop.wait(backoff) and self.failures > 1:
                    # Closing while the broker is away: give up on the backlog rather than hang the exit.
                    break
                backoff = min(backoff * 2, self._max_backoff)
                continue
            if self._stop.is_set() and not self.pending():
                break
        self._disconnect()

    def _dispatch(self) -> EventDispatcher:
        if self._dispatcher is None:
            self._conn = self.app.connection_for_write()
            self._conn.ensure_connection(max_retries=1, interval_start=0)
            # No buffering inside Celery: on failure the event stays in our bounded queue instead.
            self._dispatcher = EventDispatcher(
                self._conn, hostname=self.hostname, app=self.app, buffer_while_offline=False
            )
        return self._dispatcher

    def _flush(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                type_, fields = self._queue[0]
            self._dispatch().send(type_, **fields)
            with self._lock:
                # put() may have dropped the head meanwhile (queue full): pop only what we sent.
                if self._queue and self._queue[0][1] is fields:
                    self._queue.popleft()
            self.sent += 1

    def _maybe_heartbeat(self) -> None:
        with self._lock:
            online = self._online
            due = self._heartbeat_now or time.monotonic() >= self._next_heartbeat
        if not online or not due:
            return
        self._dispatch().send("worker-heartbeat", **self._heartbeat_fields())
        self.sent += 1
        with self._lock:
            self._heartbeat_now = False
            self._next_heartbeat = time.monotonic() + self.freq

    def _disconnect(self) -> None:
        dispatcher, conn = self._dispatcher, self._conn
        self._dispatcher = self._conn = None
        for closer in (dispatcher.close if dispatcher else None, conn.close if conn else None):
            if closer is None:
                continue
            try:
                closer()
            except Exception as exc:  # a dead connection may fail to close: nothing more to do
                log.debug("pilot %s: closing the events connection: %s", self.hostname, exc)


class CeleryObserver:
    """:class:`pilot.agent.observer.Observer` that makes a pilot a worker and its payloads tasks in Flower.

    ``broker_url`` is the Celery broker Flower watches (the same Redis, usually). ``freq`` is the
    worker-heartbeat period in seconds (Flower marks the pilot offline after 2 x ``freq`` of silence).
    ``control=False`` sends events only, without answering remote-control commands.
    """

    def __init__(
        self,
        broker_url: str,
        *,
        freq: float = 2.0,
        control: bool = True,
        app: Celery | None = None,
        max_queued: int = 10_000,
        max_backoff: float = 10.0,
        close_timeout: float = 5.0,
        remember: int = 1_000,
    ) -> None:
        self.app = app or Celery("pilotfish-pilot", broker=broker_url, set_as_current=False)
        if app is None:
            self.app.conf.broker_transport_options = sentinel_transport_options(broker_url)
        self.freq = freq
        self._control_enabled = control
        self._max_queued = max_queued
        self._max_backoff = max_backoff
        self._close_timeout = close_timeout
        self._remember = remember
        self._lock = threading.Lock()
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._info: PilotInfo | None = None
        self._load: PilotLoad | None = None
        self._sender: _Sender | None = None
        self._control: RemoteControl | None = None
        self._active: dict[str, tuple[Job, float]] = {}
        self._jobs: OrderedDict[str, str] = OrderedDict()
        self._terminated: dict[str, str] = {}
        self._revoked: OrderedDict[str, None] = OrderedDict()
        self._totals: dict[str, int] = {}
        self._processed = 0
        self._started_at = time.time()

    # -- the Observer protocol ------------------------------------------------------------------

    def pilot_started(self, info: PilotInfo) -> None:
        try:
            self._info = info
            self._started_at = time.time()
            if self._sender is None:
                self._sender = _Sender(
                    self.app, info.name, self.freq, self._heartbeat_fields, self._max_queued, self._max_backoff
                )
            self._sender.put("worker-online", self._heartbeat_fields())
            self._sender.set_online(True)
            if self._control_enabled and self._control is None:
                self._control = RemoteControl(
                    self.app.connection_for_read,
                    celery_mailbox(self.app.conf),
                    info.name,
                    self,
                    max_backoff=self._max_backoff,
                ).start()
        except Exception as exc:
            log.error("pilot %s: Celery events not started: %s", info.name, exc)

    def heartbeat(self, info: PilotInfo, load: PilotLoad) -> None:
        self._load = load

    def payload_started(self, info: PilotInfo, job: Job) -> None:
        try:
            tid = task_uuid(info.vo, job.id, job.attempt)
            now = time.time()
            received = job.matched if job.matched and job.matched <= now else now
            with self._lock:
                self._active[tid] = (job, now)
                self._jobs[tid] = job.id
                while len(self._jobs) > self._remember:
                    self._jobs.popitem(last=False)
            kwargs = payload_kwargs(job)
            self._put(
                "task-received",
                {
                    "uuid": tid,
                    "name": task_name(job),
                    "args": repr([job.command]),
                    "kwargs": repr(kwargs),
                    "retries": job.retries,
                    "root_id": tid,
                    "parent_id": None,
                    "eta": None,
                    "expires": None,
                    "timestamp": received,
                },
            )
            self._put("task-started", {"uuid": tid, "timestamp": now})
        except Exception as exc:
            log.error("pilot %s: no Celery event for the start of job %s: %s", info.name, job.id, exc)

    def payload_ended(self, info: PilotInfo, job: Job, result: RunResult, state: str) -> None:
        try:
            tid = task_uuid(info.vo, job.id, job.attempt)
            with self._lock:
                started = self._active.pop(tid, (job, time.time() - result.wall))[1]
                signal = self._terminated.pop(tid, None)
                self._processed += 1
                name = task_name(job)
                key = name if name in self._totals or len(self._totals) < 100 else "(other)"
                self._totals[key] = self._totals.get(key, 0) + 1
            runtime = result.wall if result.wall > 0 else max(0.0, time.time() - started)
            fields: dict[str, Any] = {"uuid": tid, "runtime": round(runtime, 6), "timestamp": time.time()}
            if signal is not None or state in REVOKED_STATES:
                fields.update(
                    terminated=True, signum=signal or "SIGTERM", expired=False, exception=_failure_text(result)
                )
                self._put("task-revoked", fields)
            elif state in SUCCEEDED_STATES:
                fields["result"] = repr(_result_summary(result))
                self._put("task-succeeded", fields)
            elif state in RETRIED_STATES:
                fields.update(exception=f"requeued: {_failure_text(result)}", traceback=None)
                self._put("task-retried", fields)
            else:
                fields.update(exception=_failure_text(result), traceback=None)
                self._put("task-failed", fields)
        except Exception as exc:
            log.error("pilot %s: no Celery event for the end of job %s: %s", info.name, job.id, exc)

    def pilot_stopped(self, info: PilotInfo, reason: str) -> None:
        try:
            if self._sender is not None:
                self._sender.set_online(False)
                fields = self._heartbeat_fields()
                fields["reason"] = reason
                self._sender.put("worker-offline", fields)
        except Exception as exc:
            log.error("pilot %s: no worker-offline event: %s", info.name, exc)

    def commands(self) -> list[Command]:
        out: list[Command] = []
        while True:
            try:
                out.append(self._commands.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        try:
            if self._control is not None:
                self._control.stop()
            if self._sender is not None:
                self._sender.close(self._close_timeout)
        except Exception as exc:
            log.error("closing the Celery observer: %s", exc)

    # -- what the remote control asks (pilot.remote_control.ControlTarget) ---------------------

    def revoke(self, task_ids: list[str], terminate: bool, signal: str) -> Reply:
        """Celery semantics: revoke alone only flags (a running payload goes on); terminate kills it."""
        killed: list[str] = []
        with self._lock:
            for tid in task_ids:
                self._revoked[tid] = None
                while len(self._revoked) > self._remember:
                    self._revoked.popitem(last=False)
                if terminate and tid in self._active:
                    job = self._active[tid][0]
                    self._terminated[tid] = signal
                    self._commands.put(Command("kill", job.id, f"revoked from Celery/Flower ({signal})"))
                    killed.append(tid)
        if not terminate:
            return ok(f"tasks {', '.join(task_ids)} flagged as revoked")
        if not killed:
            return ok("terminate: tasks unknown")
        return ok(f"terminate: {', '.join(killed)}")

    def shutdown(self, reason: str) -> None:
        self._commands.put(Command("shutdown", reason=reason or "shutdown requested from Celery/Flower"))

    def drain(self, reason: str) -> None:
        self._commands.put(Command("drain", reason=reason or "drain requested from Celery/Flower"))

    def send_heartbeat(self) -> None:
        if self._sender is not None:
            self._sender.heartbeat_now()

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            running = list(self._active.items())
        return [self._request_info(tid, job, started) for tid, (job, started) in running]

    def query_task(self, task_ids: list[str]) -> dict[str, Any]:
        with self._lock:
            found = {tid: self._active[tid] for tid in task_ids if tid in self._active}
        return {tid: ["active", self._request_info(tid, job, started)] for tid, (job, started) in found.items()}

    def revoked(self) -> list[str]:
        with self._lock:
            return list(self._revoked)

    def registered(self) -> list[str]:
        with self._lock:
            return sorted(self._totals)

    def stats(self) -> dict[str, Any]:
        info = self._info
        with self._lock:
            totals = dict(self._totals)
            running = len(self._active)
        conn = self.app.connection_for_read()
        broker = {k: v for k, v in conn.info().items() if k not in ("password", "alternates")}
        conn.release()
        return {
            "total": totals,
            "pid": os.getpid(),
            "clock": str(self.app.clock.value),
            "uptime": round(time.time() - self._started_at),
            "pool": {
                "implementation": "pilotfish",
                "max-concurrency": info.cores if info else 0,
                "running": running,
                "processes": [],
            },
            "prefetch_count": 0,
            "broker": broker,
            "rusage": _rusage(),
            "pilot": self.conf(),
        }

    def conf(self) -> dict[str, Any]:
        info = self._info
        if info is None:
            return {}
        return {
            "queue": info.queue,
            "vo": info.vo,
            "cores": info.cores,
            "mem_mb": info.mem,
            "tmp_mb": info.tmp,
            "batch": info.batch,
            "batch_id": info.batch_id,
            "node": info.node,
            "heartbeat_freq": self.freq,
        }

    def active_queues(self) -> list[dict[str, Any]]:
        info = self._info
        if info is None:
            return []
        # The catalog queue the pilot serves, in the shape of kombu's Queue.as_dict that Flower renders.
        return [
            {
                "name": info.queue,
                "exchange": {"name": "pilotfish", "type": "direct"},
                "routing_key": info.queue,
                "durable": True,
                "exclusive": False,
                "auto_delete": False,
                "no_ack": False,
                "alias": None,
                "queue_arguments": None,
                "binding_arguments": None,
                "bindings": [],
            }
        ]

    # -- helpers --------------------------------------------------------------------------------

    @property
    def sender_stats(self) -> dict[str, int]:
        """Events sent, dropped (queue full) and send failures so far: for tests and the pilot's log."""
        sender = self._sender
        if sender is None:
            return {"sent": 0, "dropped": 0, "failures": 0, "pending": 0}
        return {
            "sent": sender.sent,
            "dropped": sender.dropped,
            "failures": sender.failures,
            "pending": sender.pending(),
        }

    def _put(self, type_: str, fields: dict[str, Any]) -> None:
        if self._sender is not None:
            self._sender.put(type_, fields)

    def _heartbeat_fields(self) -> dict[str, Any]:
        with self._lock:
            active, processed = len(self._active), self._processed
        fields: dict[str, Any] = {
            "freq": self.freq,
            "active": active,
            "processed": processed,
            "loadavg": load_average(),
            "sw_ident": SW_IDENT,
            "sw_ver": PILOTFISH_VERSION,
            "sw_sys": platform.system(),
        }
        info, load = self._info, self._load
        if info is not None:
            fields.update(pilot_queue=info.queue, pilot_vo=info.vo, pilot_cores=info.cores)
        if load is not None:
            fields.update(
                used_cpu=load.used_cpu, used_mem=load.used_mem, time_left=load.time_left, draining=load.draining
            )
        return fields

    def _request_info(self, tid: str, job: Job, started: float) -> dict[str, Any]:
        """A running payload as Celery's ``Request.info`` describes an active task."""
        info = self._info
        return {
            "id": tid,
            "name": task_name(job),
            "args": [job.command],
            "kwargs": payload_kwargs(job),
            "type": task_name(job),
            "hostname": info.name if info else "",
            "time_start": started,
            "acknowledged": True,
            "delivery_info": {"routing_key": job.tq_id},
            "worker_pid": None,
        }


def payload_kwargs(job: Job) -> dict[str, Any]:
    """A payload task's kwargs as Flower shows them: the job, its attempt, requirements, owner and group
    (from its task queue's account, :mod:`taskqueues.store.fairshare`) and request."""
    group, owner, _ = account_of(job.tq_id)
    kwargs: dict[str, Any] = {
        "job": job.id,
        "attempt": job.attempt,
        "requirements": job.requirements,
        "owner": owner,
        "group": group,
    }
    if job.request:
        kwargs["request"] = job.request
    return kwargs


def _failure_text(result: RunResult) -> str:
    reason = result.reason or "failed"
    if result.exit_code is not None and "exit code" not in reason:
        reason = f"{reason} (exit code {result.exit_code})"
    return reason


def _result_summary(result: RunResult) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "exit_code": result.exit_code,
        "cpu_time": round(result.cpu_time, 3),
        "peak_mem_mb": round(result.peak_mem, 1),
    }
    if result.outputs:
        summary["outputs"] = result.outputs
    return summary


def _rusage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"utime": usage.ru_utime, "stime": usage.ru_stime, "maxrss": usage.ru_maxrss}
