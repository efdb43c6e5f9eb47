"""The site director: turns the waiting demand each queue can serve into pilots, every cycle.

For each queue of the catalog, the queue with the most urgent waiting job first (a job eligible at several
queues is provisioned once, by the first queue that plans it: so the queue whose own work is most urgent
packs shared jobs beside it): read its demand from the task queues of its SubmitPool, ask the batch
system about the pilots it already has there (one call per backend), plan with
:func:`pilot.director.planner.plan` (first-fit into existing pilots, cheapest shapes for the rest, caps
``n_max_queued`` per shape and ``max_running`` per queue), submit the new pilots with the start-by date
of their most urgent job as priority, and cancel queued pilots whose demand has gone. Running pilots that
no waiting job fits are asked to release themselves while another of our pilots waits for room in the
same backend (:mod:`pilot.director.idle_pilots`).

What the director submitted is recorded in Redis (``provisioned``), so any director process (a beat
task, ``pilotfish director``) sees the same pilots. A local backend keeps its processes in the process
that started them, so a director is long-lived (``pilotfish director`` or ``pilotfish run``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pilot.backends.base import Backend, PilotRequest, PilotState, PilotStatus
from pilot.backends.factory import Conversion, announce, make_backend
from pilot.backends.local import LocalBackend
from taskqueues import credentials
from taskqueues.catalog import Queue
from taskqueues.context import Context
from taskqueues.errors import BackendError, PilotfishError, StoreError, StoreUnavailable
from taskqueues.placement import BACKEND_OPTIONS, INSTANCE_TYPE
from taskqueues.sandbox import NONE, none_warning
from taskqueues.store import SENTINEL_MASTER_VARIABLE, Lock, Outage, is_secret, is_sentinel

from .idle_pilots import Room, release_idle
from .launch import PilotCommand, default_pilot_command, split_batch_options
from .planner import Demand, ExistingPilot, Plan, can_serve, plan

log = logging.getLogger(__name__)

#: A pilot's credential file not taken within this many seconds (a pilot cancelled while queued) is removed,
#: at most every CREDENTIAL_SWEEP seconds.
CREDENTIAL_TTL, CREDENTIAL_SWEEP = 7 * 24 * 3600.0, 600.0


@dataclass
class QueueReport:
    demand: int = 0
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)
    unplaceable: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    # What the release step needs: running pilots (batch id -> pilot name, from their heartbeats) and how
    # this cycle left them (see pilot.director.idle_pilots.Room).
    names: dict[str, str] = field(default_factory=dict)
    room: Room = field(default_factory=Room)


@dataclass
class CycleReport:
    queues: dict[str, QueueReport] = field(default_factory=dict)
    skipped: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "skipped": self.skipped,
            "queues": {
                q: {
                    "demand": r.demand,
                    "submitted": len(r.submitted),
                    "cancelled": len(r.cancelled),
                    "released": len(r.released),
                    "errors": r.errors,
                }
                for q, r in self.queues.items()
            },
        }


class Director:
    """One director process: its backends live as long as it does."""

    def __init__(
        self,
        ctx: Context,
        *,
        pilot_command: PilotCommand = default_pilot_command,
        env: dict[str, str] | None = None,
        log_dir: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.registry = ctx.store.registry  # the pilots submitted, for a later director to adopt
        self.pilot_command = pilot_command
        self.env = env or {}
        self._swept_credentials = 0.0
        self.log_dir = log_dir
        self._backends: dict[str, Backend] = {}
        # (queue, shape) -> until when: a shape the batch system refused is left out of plans for a while,
        # so demand is planned onto the shapes that can start instead of failing every cycle.
        self._refused: dict[tuple[str, str], float] = {}
        self.refusal_pause = 300.0
        self._shared: dict[str, Backend] = {}
        self._lock: Lock | None = None  # the director lock, while a cycle holds it
        self._configure()

    @staticmethod
    def _settings_key(queue: Queue, options: dict[str, object]) -> str:
        return json.dumps([queue.batch, options], sort_keys=True, default=str)

    def _configure(self) -> None:
        """Make every queue's backend now, at configuration time: a batch system that cannot be reached is
        converted to local and warned about here, in one line naming every queue converted, not at the first
        cycle. Queues with the same batch system and settings share one backend: one status poll for all
        their pilots, and one local capacity when converted. A backend with wrong settings is reported
        here and again, as an error of its queue, at every cycle."""
        self.ctx.pilot_redis_url  # noqa: B018 - the pilots' credentials are made (or warned about) now
        serving: dict[str, list[Queue]] = {}
        for queue in self.ctx.catalog.queues(self.ctx.settings.vo):
            serving.setdefault(self._settings_key(queue, self._options(queue)), []).append(queue)
        conversions: list[Conversion] = []
        for queues in serving.values():
            try:
                self.backend(queues[0], where=", ".join(q.id for q in queues), conversions=conversions)
            except BackendError as exc:
                log.error("queue %s: cannot configure its %s backend: %s", queues[0].id, queues[0].batch, exc)
        announce(conversions)
        if self.ctx.settings.payload_sandbox == NONE:
            log.warning("%s", none_warning())

    def _options(self, queue: Queue) -> dict[str, object]:
        options, _ = split_batch_options(queue)
        if self.log_dir:
            options.setdefault("log_dir", self.log_dir)
        return options

    def backend(
        self, queue: Queue, *, where: str | None = None, conversions: list[Conversion] | None = None
    ) -> Backend:
        backend = self._backends.get(queue.id)
        if backend is None:
            options = self._options(queue)
            key = self._settings_key(queue, options)
            backend = self._shared.get(key)
            if backend is None:
                backend = self._shared[key] = make_backend(
                    queue.batch, options, where=where or queue.id, conversions=conversions
                )
            self._backends[queue.id] = backend
        return backend

    def close(self) -> None:
        for backend in self._shared.values():
            backend.close()

    def stop_all(self, wait: float = 0.0) -> int:
        """Cancel every pilot this director's backends hold (queued or running): the end of a run.

        With ``wait``, a local backend's pilots are also cancelled from what it holds in this process (a
        pilot launched just before, not in the registry yet, included; and when the store cannot be read)
        and waited for up to ``wait`` seconds, SIGKILLed after the backend's grace. Returns how many pilots
        were cancelled."""
        cancelled: set[str] = set()
        for queue_id, backend in self._backends.items():
            queue = self.ctx.catalog.queue(queue_id, self.ctx.settings.vo)
            try:
                ids = list(self.provisioned(queue, backend))
            except StoreError:
                if not wait:
                    raise
                ids = []  # the local backends below still know their own
            if ids:
                backend.cancel(ids)
                cancelled.update(f"{backend.kind}:{i}" for i in ids)
                with contextlib.suppress(StoreError):
                    self.registry.forget(queue.id, backend.kind, ids)
        if wait:
            for backend in self._shared.values():
                if isinstance(backend, LocalBackend):
                    cancelled.update(f"{backend.kind}:{i}" for i in backend.shutdown(wait))
        return len(cancelled)

    # -- one cycle ---------------------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        """One cycle over every queue, under the director lock (two directors never provision for the same
        demand). The lock lives a few director intervals, so a killed director holds it that long at most;
        it is renewed before each queue, and a director that lost it (paused past its time to live while
        another took over) stops before submitting anything more."""
        return self._cycle()

    def _cycle(self) -> CycleReport:
        report = CycleReport()
        self.ctx.store.control.beat("director")  # pilotfish health --component director
        lock = self.ctx.store.control.lock("director", self.lock_ttl)
        if not lock.acquire():
            report.skipped = True
            return report
        self._lock = lock
        try:
            claimed: set[str] = set()
            queues = self.ctx.catalog.queues(self.ctx.settings.vo)
            beats = self._beats()  # before the demand: what a pilot has free is no newer (see _existing)
            heads = {q.id: self.ctx.store.waiting_heads(q.id) for q in queues}
            queues.sort(key=lambda q: min((head[-1] for head in heads[q.id]), default=math.inf))  # stable
            for queue in queues:
                if not self._still_mine():
                    break
                report.queues[queue.id] = self._queue_cycle(queue, heads[queue.id], claimed, beats)
            if self._still_mine():
                self._release(report)
        finally:
            self._lock = None
            lock.release()
        return report

    @property
    def lock_ttl(self) -> float:
        """How long a killed director can keep others from provisioning: a few director intervals."""
        return max(10.0, 3 * self.ctx.settings.director_interval)

    def _still_mine(self) -> bool:
        """Renew the director lock before acting on a plan; False (and one log line) if it was lost."""
        if self._lock is None or self._lock.renew():
            return True
        log.warning("director lock lost during a cycle (paused for over %.0f s?): cycle stopped", self.lock_ttl)
        return False

    def _release(self, report: CycleReport) -> None:
        """Merge the queues' rooms per backend and ask idle pilots to release themselves (see release.py)."""
        rooms: dict[int, Room] = {}
        for queue_id, qr in report.queues.items():
            backend = self._backends.get(queue_id)
            if backend is None:
                continue
            room = rooms.setdefault(id(backend), Room())
            room.idle.update(qr.room.idle)
            room.serving |= qr.room.serving
            room.waiting += qr.room.waiting
            room.expired.update(qr.room.expired)
        live = {
            name
            for name, r in self.ctx.store.pilot_records(self.ctx.store.pilots.live_window).items()
            if not r.get("stopped")
        }
        asked = set(release_idle(self.ctx.store.pilots, rooms.values(), live))
        for qr in report.queues.values():
            qr.released = sorted(asked & (set(qr.room.idle) | set(qr.room.expired)))

    def _queue_cycle(
        self,
        queue: Queue,
        heads: list[tuple[str, str, int, int, int, float, float]],
        claimed: set[str],
        beats: dict[str, dict[str, Any]],
    ) -> QueueReport:
        """Plan and provision one queue, one group of demand per backend option string.

        Jobs with a ``BackendOptions`` string (open-lmake's ``-b``) need pilots submitted with it, and a
        pilot submitted with some options serves the jobs that asked for them only: each option string is
        planned apart, onto the pilots submitted with the same string. ``n_max_queued`` counts per shape and
        option string (open-lmake counts per set of asked resources); ``max_running`` counts for the whole
        queue, the group with the most urgent job planned first.
        """
        out = QueueReport()
        store = self.ctx.store
        extras: dict[str, tuple[str | None, str]] = {}
        groups: dict[str, list[Demand]] = {}
        for tq, job, cpu, mem, tmp, need, score in heads:
            if job in claimed:
                continue
            if tq not in extras:
                definition = json.loads(store.tq_definitions_of([tq]).get(tq, "{}"))
                extras[tq] = (definition.get(INSTANCE_TYPE), str(definition.get(BACKEND_OPTIONS, "")))
            hint, options = extras[tq]
            groups.setdefault(options, []).append(Demand(job, cpu, mem, tmp, need, score, hint))
        out.demand = sum(len(jobs) for jobs in groups.values())
        try:
            backend = self.backend(queue)
            existing = self._existing(queue, backend, out, beats)
        except BackendError as exc:
            out.errors.append(str(exc))
            self.ctx.store.control.count_error(queue.batch)
            return out
        now = time.time()
        shapes = [s for s in queue.shapes if self._refused.get((queue.id, s.name), 0.0) <= now] or queue.shapes
        order = sorted(
            set(groups) | set(existing),
            key=lambda o: (not groups.get(o), min((d.start_by for d in groups.get(o, [])), default=0.0), o),
        )
        pilots = sum(len(p) for p in existing.values())
        for options in order:
            demand = groups.get(options, [])
            # Running pilots whose time left is below every waiting job's wall can never take one of them:
            # they are asked to release themselves (below) and do not count against max_running, so their
            # room goes to a fresh pilot in this same cycle instead of after their idle timeout.
            expired = {p.id for p in existing.get(options, []) if not p.queued and out_of_time(p, demand)}
            mine = [p for p in existing.get(options, []) if p.id not in expired]
            room = (
                None if queue.max_running is None else max(0, queue.max_running - (pilots - len(mine) - len(expired)))
            )
            result = plan(
                demand,
                shapes,
                mine,
                n_max_queued=queue.n_max_queued,
                max_running=room,
                wall_granularity=queue.wall_granularity,
                headroom=queue.wall_granularity + self._margin,
            )
            submitted = self._provision(queue, backend, options, result, claimed, out)
            pilots += submitted - len(result.cancel)
            out.room.waiting += submitted + sum(1 for p in mine if p.queued and p.id not in result.cancel)
            for pilot in existing.get(options, []):
                name = out.names.get(pilot.id)
                if name is None:
                    continue
                if can_serve(pilot, demand):
                    out.room.serving.add(name)
                else:
                    out.room.idle[name] = queue.id
                    if pilot.id in expired:
                        out.room.expired[name] = queue.id
        return out

    def _provision(
        self, queue: Queue, backend: Backend, options: str, result: Plan, claimed: set[str], out: QueueReport
    ) -> int:
        """Submit a plan's new pilots (with ``options``) and cancel its idle queued ones; the pilots submitted."""
        claimed.update(result.placed)
        out.unplaceable.update(result.unplaceable)
        submitted = 0
        for planned in result.new:
            if not self._still_mine():
                break
            # One granularity step of headroom: a pilot asking for exactly its longest job's wall has a little
            # less than that once it runs, and would never take that job; and the stop margin the pilot keeps.
            # A queue's pilot lifetime: at least that long, so the pilot takes jobs of its shape for most of its
            # life instead of only for its first granularity step (then idling out while jobs wait).
            planned.wall = min(
                planned.shape.wall, max(planned.wall + queue.wall_granularity + self._margin, queue.pilot_lifetime or 0)
            )
            request = PilotRequest(
                name=f"{queue.name}-{planned.shape.name}",
                command=self.pilot_command(queue, planned.shape, planned.wall, self.ctx.settings),
                shape=planned.shape,
                wall=planned.wall,
                env=self._pilot_env(),
                start_by=planned.start_by,
                options=options,
                log_dir=self.log_dir,
                resources=split_batch_options(queue)[1],
            )
            try:
                batch_id = backend.submit(request)
            except BackendError as exc:
                credentials.forget_pilot_file(request.env)  # no pilot will take it
                out.errors.append(str(exc))
                self.ctx.store.control.count_error(backend.kind)
                self._refused[(queue.id, planned.shape.name)] = time.time() + self.refusal_pause
                log.warning(
                    "queue %s: shape %s refused by the batch system; planning without it for %.0f s: %s",
                    queue.id,
                    planned.shape.name,
                    self.refusal_pause,
                    exc,
                )
                break
            claimed.update(j.job for j in planned.jobs)
            self._record(
                queue,
                backend,
                batch_id,
                {
                    "shape": planned.shape.name,
                    "state": PilotState.QUEUED,
                    "submitted": time.time(),
                    "start_by": planned.start_by,
                    "wall": planned.wall,
                    "jobs": len(planned.jobs),
                    "options": options,
                    **backend.identify(batch_id),
                },
            )
            out.submitted.append(batch_id)
            self.ctx.store.control.count_submitted(backend.kind)
            submitted += 1
        if result.cancel:
            backend.cancel(result.cancel)
            self.registry.forget(queue.id, backend.kind, result.cancel)
            out.cancelled += result.cancel
        return submitted

    def _pilot_env(self) -> dict[str, str]:
        """A new pilot's environment: its credentials (its community's own, never the control plane's) go
        into a one-use 0600 file the pilot reads and removes at start (taskqueues.credentials), named by
        ``PILOTFISH_CREDENTIALS_FILE``; nothing in the environment or the batch script carries a password."""
        env = self._pilot_settings()
        handed = {name: value for name, value in env.items() if is_secret(name, value)}
        env = {name: value for name, value in env.items() if name not in handed}
        if handed:
            directory = credentials.pilot_files_dir(self.ctx.settings.state_dir)
            now = time.time()
            if now - self._swept_credentials > CREDENTIAL_SWEEP:
                self._swept_credentials = now
                credentials.sweep_pilot_files(directory, CREDENTIAL_TTL, now)
            env[credentials.PILOT_FILE_VARIABLE] = str(credentials.write_pilot_file(directory, handed))
        return env

    def _pilot_settings(self) -> dict[str, str]:
        s = self.ctx.settings
        # The pilots' own credentials (taskqueues.store.access), never the control plane's; they go into the
        # one-use file (_pilot_env). Here only what is no option of default_pilot_command: a setting reaches a
        # pilot one way (lease, idle timeout, vo, prefix on its command line, and nowhere else).
        env = {"PILOTFISH_REDIS_URL": self.ctx.pilot_redis_url}
        if s.catalog:
            env["PILOTFISH_CATALOG"] = s.catalog
        if s.log_format != "text":
            env["PILOTFISH_LOG_FORMAT"] = s.log_format
        broker = self.ctx.pilot_broker_url
        if is_sentinel(self.ctx.pilot_redis_url) or is_sentinel(broker):
            env[SENTINEL_MASTER_VARIABLE] = s.redis_sentinel_master
        if broker:  # Celery's broker apart from the store (a Redis Cluster's): the pilots' events go there
            env["PILOTFISH_BROKER_URL"] = broker
        return {**env, **self.env}

    @property
    def _margin(self) -> int:
        """The seconds a pilot keeps free before its end (``--stop-margin``): not time its jobs can use."""
        return math.ceil(self.ctx.settings.pilot_stop_margin)

    def _record(self, queue: Queue, backend: Backend, batch_id: str, record: dict[str, Any]) -> None:
        record = {**record, "queue": queue.id, "kind": backend.kind, "batch_id": batch_id}
        self.registry.record(queue.id, backend.kind, batch_id, record)

    def provisioned(self, queue: Queue, backend: Backend) -> dict[str, dict[str, Any]]:
        return self.registry.of(queue.id, backend.kind)

    def _beats(self) -> dict[str, dict[str, Any]]:
        """The pilots' last heartbeat records (name -> record), as far back as a pilot can be retired."""
        return self.ctx.store.pilot_records(
            max(self.ctx.settings.pilot_retire_after, self.ctx.store.pilots.live_window)
        )

    @staticmethod
    def _by_batch_id(beats: dict[str, dict[str, Any]], queue: Queue) -> dict[str, dict[str, Any]]:
        """A queue's heartbeat records by batch id: a heartbeat names its batch job as (batch, batch_id), and
        local ids carry the kind as a prefix."""
        found: dict[str, dict[str, Any]] = {}
        for r in beats.values():
            if r.get("queue") == queue.id:
                found[str(r.get("batch_id"))] = found[f"{r.get('batch')}-{r.get('batch_id')}"] = r
        return found

    def _existing(
        self, queue: Queue, backend: Backend, out: QueueReport, beats: dict[str, dict[str, Any]]
    ) -> dict[str, list[ExistingPilot]]:
        """The pilots this queue has in the batch system, with what they have free (from their heartbeats),
        by the option string they were submitted with.

        What a pilot has free comes from ``beats``, read before the demand: a pilot that matched a waiting job
        after the demand was read then still shows the room it took (the job is placed on it; the next cycle
        sees both right), where a heartbeat newer than the demand would show the room taken while the demand
        still shows the job waiting, and a needless pilot would be submitted for it (seen under load, when the
        batch system's status query between the two reads took seconds). Whether a pilot runs comes from a
        second read after the batch system's answer: a pilot that has sent a heartbeat runs, whatever an older
        status poll says, and is never cancelled as a queued one that no job needs."""
        records = self.provisioned(queue, backend)
        if not records:
            return {}
        states = backend.states(list(records))
        for batch_id, answer in list(states.items()):
            if answer.state is PilotState.UNKNOWN:  # not submitted by this process: an earlier director's
                states[batch_id] = backend.adopt(batch_id, records[batch_id])
        retire_after = self.ctx.settings.pilot_retire_after
        live = self._by_batch_id(beats, queue)
        # Read again only if a pilot the poll does not call running had not beaten before the demand was read.
        doubtful = any(b not in live and (a is None or a.state is not PilotState.RUNNING) for b, a in states.items())
        started = self._by_batch_id(self._beats(), queue) if doubtful else live
        shapes = {s.name: s for s in queue.shapes}
        existing: dict[str, list[ExistingPilot]] = {}
        now = time.time()
        for batch_id, record in records.items():
            status: PilotStatus | None = states.get(batch_id)
            shape = shapes.get(record.get("shape", ""))
            beat = live.get(batch_id)
            if (
                status is not None
                and status.state is PilotState.UNKNOWN
                and beat is None
                and batch_id not in started
                and now - float(record.get("submitted", 0)) > retire_after
            ):
                # No backend answers for it and it has not beaten for a while: a pilot whose director died
                # with the only knowledge of it. Its jobs come back through lease expiry as usual.
                log.warning(
                    "queue %s: pilot %s retired: no batch system answers for it (%s) and no heartbeat for %.0f s",
                    queue.id,
                    batch_id,
                    status.detail,
                    retire_after,
                )
                status = PilotStatus(
                    PilotState.LOST, f"retired: {status.detail}; no heartbeat for {retire_after:.0f} s"
                )
            if status is None or shape is None or status.state.final:
                out.ended[batch_id] = f"{status.state} {status.detail}".strip() if status else "unknown"
                self.registry.forget(queue.id, backend.kind, [batch_id])
                continue
            if status.state is not PilotState.RUNNING and batch_id in started:
                status = PilotStatus(PilotState.RUNNING, f"heartbeat seen; the batch system said {status.state}")
            if status.state is PilotState.RUNNING and "pid" not in record and backend.kind == "local":
                facts = backend.identify(batch_id)  # it started: what a later director needs to adopt it
                if "pid" in facts:
                    self._record(queue, backend, batch_id, {**record, **facts})
            if (
                status.state is PilotState.RUNNING
                and beat is not None
                and not beat.get("stopped")
                and not beat.get("draining")
                and beat.get("name")
            ):
                out.names[batch_id] = str(beat["name"])
            if status.state is PilotState.RUNNING and beat is not None:
                # What it has free, from its last heartbeat.
                pairs = (("cores", "used_cpu"), ("mem", "used_mem"), ("tmp", "used_tmp"))
                cpu, mem, tmp = (max(0, int(beat[t]) - int(beat[u])) for t, u in pairs)
                left = shape.wall if beat.get("time_left") is None else float(beat["time_left"])
                if beat.get("started") is not None and record.get("wall") is not None:
                    # The heartbeat's figure is as old as the heartbeat (a third of a lease): what the wall
                    # asked for leaves now, if less.
                    left = max(0.0, min(left, float(record["wall"]) - self._margin - (now - float(beat["started"]))))
                pilot = ExistingPilot(batch_id, shape, False, cpu, mem, tmp, left)
            elif status.state is PilotState.RUNNING:
                # Started, no heartbeat yet: it is about to take what fits its whole shape.
                pilot = ExistingPilot(
                    batch_id, shape, False, shape.cpu, shape.mem, shape.tmp, float(record["wall"]) - self._margin
                )
            else:
                pilot = ExistingPilot(
                    batch_id, shape, True, shape.cpu, shape.mem, shape.tmp, float(record["wall"]) - self._margin
                )
            existing.setdefault(str(record.get("options", "")), []).append(pilot)
        return existing


def out_of_time(pilot: ExistingPilot, demand: Sequence[Demand]) -> bool:
    """Jobs wait and the pilot's time left is below every one's wall: it can never take one of them."""
    return bool(demand) and all(d.wall > pilot.time_left for d in demand)


def cycle(ctx: Context, director: Director | None = None) -> CycleReport:
    """One director cycle (the beat task; ``pilotfish director --once``)."""
    own = director is None
    director = director or Director(ctx)
    try:
        return director.cycle()
    finally:
        if own:
            director.close()


def run_forever(director: Director, interval: float, stop: threading.Event | None = None) -> None:
    """Cycle every ``interval`` seconds until ``stop`` is set (at once: a signal handler sets it).

    A store outage is two log lines (:class:`taskqueues.store.outage.Outage`) and retries with capped back-off
    meanwhile; any other error of a cycle is logged and the next cycle comes as usual."""
    stop = stop or threading.Event()
    outage = Outage(log, "director", cap=max(interval, 5.0), on_start=director.ctx.store.drop_connections)
    while not stop.is_set():
        delay = interval
        try:
            report = director.cycle()
            outage.ok()
            for queue, qr in report.queues.items():
                if qr.submitted or qr.cancelled or qr.released or qr.errors:
                    log.info(
                        "queue %s: demand %d, submitted %d, cancelled %d, released %d, errors %s",
                        queue,
                        qr.demand,
                        len(qr.submitted),
                        len(qr.cancelled),
                        len(qr.released),
                        qr.errors,
                    )
        except StoreUnavailable as exc:
            delay = outage.failed(exc)
        except PilotfishError as exc:
            log.error("director cycle failed: %s", exc)
        except Exception:
            log.exception("director cycle failed")
        stop.wait(delay)
