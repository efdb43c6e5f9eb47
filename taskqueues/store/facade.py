"""The task-queue store: every operation on jobs is one atomic Lua script in Redis.

The store knows nothing of requirement semantics or of the catalog: callers hand it jobs whose task
queue and SubmitPool are already computed (``matcher.submission`` does that), and pilots hand it what
they have free. Scripts whose keys depend on data (a job's task queue, the heads indexes of its queues)
answer ``needkeys`` before writing anything when the caller did not declare one; :meth:`Store.call_script`
adds them and calls again, so every key a script touches is declared in KEYS. The one exception is the hot
path, ``match.lua``: it builds the keys of the task queues it leases from out of the key base, whose hash tag
puts them in the slot of its declared keys (see its header).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis
from redis.connection import Connection

from ..errors import ConfigError, NotFound, StaleReport, StoreError, StoreUnavailable
from . import functions
from .connection import connect
from .exchange import PendingExchange
from .facade_reads import StoreReads
from .guard import client_url, converted, guard, guarded
from .keys import Keys
from .lifecycle import Lifecycle
from .packed import HotLine, PackedCall, pack_script
from .records import (
    DEFAULT_ETE_SAFETY_FACTOR,
    Exchange,
    HeartbeatReply,
    Job,
    JobState,
    JobUsage,
    NewJob,
    PilotOffer,
    RunResult,
)
from .records import text as _text
from .reservations import DEFAULT_RESERVATION_SLACK, running_text
from .rooms import StoreRooms

_MAX_KEY_ROUNDS = 16
#: Fields of the cursor hash: the server run the reaper last saw, and until when leases are not requeued.
_RUN_ID, _GRACE = "reap:run", "reap:grace"


log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Store(StoreReads, StoreRooms):
    """Jobs, task queues and leases of one community (VO) in one Redis."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys | None = None,
        *,
        lease_seconds: float = 60.0,
        backoff: float = 10.0,
        clock: Clock = time.time,
        ete_safety_factor: float = DEFAULT_ETE_SAFETY_FACTOR,
        submit_replicas: int = 1,
        submit_timeout: float = 5.0,
        replica_window: float = 600.0,
        reservation_slack: float = DEFAULT_RESERVATION_SLACK,
        bounded_reservations: bool = True,
    ) -> None:
        """``ete_safety_factor``: a job without ``wall`` must find this many times its run-time estimate left
        in a pilot (:func:`taskqueues.store.records.time_needed`; every writer of a task-queue member uses this one).
        ``submit_replicas``: :meth:`submit` returns once that many replicas hold the submission (``WAIT``,
        up to ``submit_timeout`` seconds; at most as many as the primary has), so a failover that
        follows cannot lose it; a replica cut off less than ``replica_window`` seconds ago still counts (Sentinel
        may promote it when it comes back). Whatever they are, job ids are never given twice (``submit.lua``)."""
        if not ete_safety_factor >= 1:
            raise ConfigError(f"ete_safety_factor must be at least 1, got {ete_safety_factor!r}")
        self.client = client
        #: Where the store lives, as errors name it (no password).
        self.where = client_url(client)
        self.keys = keys or Keys()
        self.lease_seconds = lease_seconds
        self.backoff = backoff
        self.clock = clock
        self.ete_safety_factor = ete_safety_factor
        if submit_replicas < 0 or not submit_timeout > 0:
            raise ConfigError(
                f"submit_replicas must be >= 0 and submit_timeout > 0, got {submit_replicas!r} and {submit_timeout!r}"
            )
        self.submit_replicas = submit_replicas
        self.replica_window = replica_window
        #: The server run whose reaper cursor this store last saw (:meth:`_lease_cutoff`).
        self._run_seen: str | None = None
        self.submit_timeout = submit_timeout
        #: A reservation (match.lua) whose start passed by this many seconds holds its pilot's cores no more.
        self.reservation_slack = reservation_slack
        #: Bounded reservations (issue 29): a reservation holds back no job whose score is less than its own
        #: need after the reserved start (match.lua, "Reservations").
        self.bounded_reservations = bounded_reservations
        self._scripts: dict[str, functions.Function] = functions.register(client)
        self._base = self.keys.base + ":"
        self._packed: dict[str, PackedCall] = {}  # the hot path's calls with fixed keys, packed once
        # The heads, floor, emptied and largest-values hashes, which every script that moves task-queue members
        # keeps exact: declared up front (a script that found them undeclared would answer needkeys: one more
        # round trip).
        self.floors = [self.keys.heads, self.keys.qfloor, self.keys.tqempty, self.keys.tqmax]
        self._line = HotLine.of(client)
        #: What the end of a job writes or reads for the history index (``_lib.lua``'s ``index_history``).
        self.history_keys = [self.keys.endedby, self.keys.requests]

    @classmethod
    def from_url(cls, url: str, *, vo: str = "default", prefix: str = "pf", **kwargs: Any) -> Store:
        keys = Keys(prefix=prefix, vo=vo)
        return cls(connect(url, community=keys.base), keys, **kwargs)

    @property
    def lifecycle(self) -> Lifecycle:
        """Hold, release, resubmit and update jobs, and read their events (:mod:`taskqueues.store.lifecycle`)."""
        return Lifecycle(self)

    # -- plumbing ---------------------------------------------------------------------------------

    def call_script(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        extra: Iterable[str] = (),
        client: redis.Redis | None = None,
    ) -> list[Any]:
        """Run script ``name``; when it names keys it needed and was not given, declare them and rerun.

        The heads and qfloor hashes are declared for every script: each one that moves task-queue members
        keeps them exact (``_lib.lua``), and declaring them up front saves that round trip. So is the stats
        hash, which the scripts add their counters to (:mod:`taskqueues.store.counters`).
        """
        declared = list(
            dict.fromkeys(
                [
                    *extra,
                    self.keys.heads,
                    self.keys.qfloor,
                    self.keys.ended,
                    self.keys.blocked,
                    self.keys.stats,
                    self.keys.held,
                    self.keys.events,
                    *self.history_keys,
                ]
            )
        )
        for _ in range(_MAX_KEY_ROUNDS):
            with guard(self.where, f"running script {name}"):
                call = self._scripts[name]
                reply = (
                    call(keys=[*keys, *declared], args=list(args))
                    if client is None
                    else call(keys=[*keys, *declared], args=list(args), client=client)
                )
            if reply and _text(reply[0]) == "needkeys":
                declared.extend(_text(k) for k in reply[1:])
                continue
            return list(reply)
        raise StoreError(f"script {name} kept asking for undeclared keys")

    @guarded("reading SubmitPools")
    def pool_keys(self, tq_ids: Iterable[str]) -> list[str]:
        """Task queue, pool and heads-index keys for these task queues, as stored now (one round trip)."""
        tqs = list(dict.fromkeys(tq_ids))
        if not tqs:
            return []
        pipe = self.client.pipeline(transaction=False)
        for tq in tqs:
            pipe.smembers(self.keys.pool(tq))
        out: list[str] = []
        for tq, queues in zip(tqs, pipe.execute(), strict=True):
            out += [self.keys.tq(tq), self.keys.pool(tq)]
            out += [self.keys.qheads(_text(q)) for q in queues]
        return out

    def _stale(self, reply: list[Any]) -> None:
        if _text(reply[0]) == "stale":
            raise StaleReport(_text(reply[1]))

    # -- submission -------------------------------------------------------------------------------

    @guarded("submitting jobs")
    def submit(self, jobs: Sequence[NewJob], request: tuple[str, Mapping[str, Any]] | None = None) -> list[str]:
        """Store ``jobs`` (and the record of the request they form) in one atomic step; returns their ids.

        Dependents and dependencies refer to other jobs of the same call by index.
        """
        if not jobs:
            return []
        now = self.clock()
        for i, job in enumerate(jobs):
            bad = [d for d in (*job.dependents, *job.deps) if not 0 <= d < len(jobs) or d == i]
            if bad:
                raise StoreError(f"job {job.name or i}: {bad} are not other jobs of this submission")
            if not job.queues and job.state is None and not job.deferred:
                raise StoreError(f"job {job.name or i}: task queue {job.tq_id} has no eligible queue")
        tqs = {j.tq_id: {"def": j.tq_def, "queues": list(j.queues)} for j in jobs if j.queues}
        body: dict[str, Any] = {"tqs": tqs, "jobs": [j.record(now, self.ete_safety_factor) for j in jobs]}
        if request is not None:
            body["request"] = {"id": request[0], "rec": dict(request[1])}
        k = self.keys
        declared = [key for tq, d in tqs.items() for key in (k.tq(tq), k.pool(tq), *map(k.qheads, d["queues"]))]
        declared += [k.byrule(rule) for rule in {j.rule for j in jobs if j.rule}] + [k.work, *self.floors]
        declared += [k.notifywatch] if request is not None and request[1].get("notify") else []
        keys = [k.jobs, k.seq, k.tqdefs, k.tqempty, k.poolstamp, k.releasing, k.requests, k.idrange]
        args = [self._base, now, json.dumps(body)]
        single = self.client.client()  # type: ignore[no-untyped-call]  # WAIT counts the writes of its own connection
        try:
            confirmed = ""
            for _ in range(_MAX_KEY_ROUNDS):
                reply = self.call_script(
                    "submit",
                    keys,
                    [*args, confirmed, self.replica_window if self.submit_replicas else 0],
                    declared,
                    client=single,
                )
                if _text(reply[0]) != "replicate":
                    break
                # The id ceiling must be on a replica before ids under it are given (submit.lua's header).
                if self._replicated(single, 1) < 1:
                    raise StoreUnavailable(
                        f"no replica of the primary at {self.where} acknowledged the next job ids within "
                        f"{self.submit_timeout:g} s: nothing was stored (a failover now could give them again)"
                    )
                confirmed = _text(reply[1])
            else:
                raise StoreError("script submit kept asking for a replicated id ceiling")
            ids = [_text(i) for i in reply[2:]]
            wanted = min(self.submit_replicas, int(reply[1]))
            acked = self._replicated(single, wanted) if wanted else 0
        finally:
            single.close()
        if acked < wanted:
            raise StoreUnavailable(
                f"jobs {ids[0]}..{ids[-1]} are stored on the primary at {self.where}, but only "
                f"{acked} of {wanted} replicas acknowledged them within "
                f"{self.submit_timeout:g} s: a failover now could lose them"
            )
        return ids

    def _replicated(self, single: redis.Redis, replicas: int) -> int:
        """How many replicas hold this connection's writes (``WAIT``, up to ``submit_timeout`` seconds)."""
        with guard(self.where, "waiting for replicas"):
            return int(single.wait(replicas, max(1, round(self.submit_timeout * 1000))))

    # -- the hot path -----------------------------------------------------------------------------

    def _packed_call(self, name: str, keys: Sequence[str], n_args: int, tag: str = "") -> PackedCall:
        """The packed call of a script whose keys are fixed per ``tag`` (match: per queue; complete: one)."""
        call = self._packed.get(name + tag)
        if call is None:
            call = self._packed[name + tag] = PackedCall(self._line, self._scripts[name], keys, n_args=n_args)
        return call

    def _match_call(self, queue: str, n_args: int = 11) -> PackedCall:
        """The packed match call of a queue (the keys match.lua declares: it builds the others from the base)."""
        return self._packed_call("match", [self.keys.qheads(queue), self.keys.stats], n_args, f":{n_args}:{queue}")

    def match_args(self, offer: PilotOffer, max_jobs: int) -> list[Any]:
        """The ARGV of a match call for this pilot (match.lua's header)."""
        left = -1.0 if offer.time_left is None else max(0.0, offer.time_left)
        return [
            self._base,
            offer.pilot,
            self.clock(),
            self.lease_seconds,
            offer.cpu,
            offer.mem,
            offer.tmp,
            left,
            max_jobs,
            running_text(offer.running),
            f"{float(self.reservation_slack)!r}:b" if self.bounded_reservations else self.reservation_slack,
        ] + ([] if offer.cap is None else ["{}:{}:{}".format(*offer.cap)])

    @staticmethod
    def matched(reply: list[Any]) -> list[Job]:
        """The jobs a match reply leased.

        A record that Python cannot read (match.lua checks its form, not every field's value) comes back as a
        stand-in carrying the problem (:meth:`Job.unreadable`), which the pilot fails; one whose attempt
        cannot be read either is left out: its lease expires unrenewed and the reaper parks it.
        """
        jobs = []
        for i in range(1, len(reply), 2):
            try:
                jobs.append(Job.from_record(reply[i], _text(reply[i - 1])))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # AttributeError: not a JSON object
                stand_in = Job.unreadable(reply[i], _text(reply[i - 1]), str(exc))
                if stand_in is not None:
                    jobs.append(stand_in)
                    continue
                log.warning(
                    "job %s leased with a record that cannot be read (%s): left to the reaper", _text(reply[i - 1]), exc
                )
        return jobs

    def match(self, offer: PilotOffer, max_jobs: int = 1) -> list[Job]:
        """Lease to the pilot the most urgent task-queue heads that fit, most urgent first.

        With ``max_jobs`` > 1 the choice repeats on what is left free (filling a multi-core pilot in
        one call). An empty list means nothing fits now.
        """
        try:
            args = self.match_args(offer, max_jobs)
            return self.matched(self._match_call(offer.queue, len(args))(args))
        except redis.RedisError as exc:  # the hot path: the guard's conversion without its context manager
            raise converted(exc, self.where, "running script match") from None

    def exchange(
        self,
        pilot: str,
        *,
        starts: Sequence[tuple[str, int, float]] = (),
        completions: Sequence[tuple[str, int, RunResult]] = (),
        offer: PilotOffer | None = None,
        max_jobs: int = 1,
    ) -> Exchange:
        """A pilot's reports and its next match in one round trip (see :class:`PendingExchange`)."""
        with guard(self.where, "taking a connection"):
            conn = self.client.connection_pool.get_connection()
        try:
            return self.send_exchange(
                pilot, conn, starts=starts, completions=completions, offer=offer, max_jobs=max_jobs
            ).receive()
        finally:
            self.client.connection_pool.release(conn)

    def send_exchange(
        self,
        pilot: str,
        conn: Connection,
        *,
        starts: Sequence[tuple[str, int, float]] = (),
        completions: Sequence[tuple[str, int, RunResult]] = (),
        offer: PilotOffer | None = None,
        max_jobs: int = 1,
    ) -> PendingExchange:
        """Send a pilot's reports and its next match on ``conn`` without waiting for the replies."""
        k = self.keys
        now = self.clock()
        commands = [
            pack_script(self._scripts["start"], [k.jobs, k.leases], [job, attempt, pilot, now, self.lease_seconds, at])
            for job, attempt, at in starts
        ]
        if completions:
            complete = self._packed_call("complete", self._complete_keys(), 6)
            commands += [complete.pack(self._complete_args(j, a, pilot, r, now)) for j, a, r in completions]
        if offer is not None:
            args = self.match_args(offer, max_jobs)
            commands.append(self._match_call(offer.queue, len(args)).pack(args))
        return PendingExchange(self, conn, pilot, starts, completions, offer, max_jobs, commands)

    @guarded("loading the store's scripts")
    def drop_connections(self) -> None:
        """Close every connection of the client's pool (those checked out too, when this is the process's
        only thread: they reconnect when next used). For the start of an outage: connections to a server
        that went away each fail once after it came back. With other threads (a Celery worker's tasks, the
        releaser), a checked-out connection may be in the middle of another thread's call: closing its
        socket under it raised ``ValueError: I/O operation on closed file`` there (a traceback in
        worker.log); such a connection fails by itself against the dead server and is dropped then."""
        self.client.connection_pool.disconnect(inuse_connections=threading.active_count() == 1)

    def reload_scripts(self) -> None:
        """Load the function library again (Redis lost it: a flush, or a new server without the data); a pilot,
        which may not, learns that the store is not ready (:meth:`taskqueues.store.functions.Function.reload`)."""
        self._scripts["match"].reload()

    @guarded("renewing a pilot's leases")
    def heartbeat(
        self,
        pilot: str,
        jobs: Mapping[str, int],
        record: Mapping[str, Any] | None = None,
        usage: Mapping[str, JobUsage] | None = None,
    ) -> HeartbeatReply:
        """Renew the leases of the pilot's jobs (id -> attempt) and store what each has used so far
        (``usage``, on the record's ``pm``/``cpu`` while it runs); returns the kill requests and the jobs
        the pilot no longer holds (their usage is ignored)."""
        k = self.keys
        args: list[Any] = [pilot, self.clock(), self.lease_seconds, json.dumps(record) if record else ""]
        usage = usage or {}
        for job, attempt in jobs.items():
            used = usage.get(job)
            args += [job, attempt, *(("", "") if used is None else used.fields())]
        kills, lost = self.call_script("heartbeat", [k.jobs, k.leases, k.kills, k.pilots, k.pilotseen, k.stats], args)
        pairs = [_text(x) for x in kills]
        return HeartbeatReply(dict(zip(pairs[::2], pairs[1::2], strict=True)), tuple(_text(x) for x in lost))

    @guarded("reporting a payload's start")
    def start(self, job: str, attempt: int, pilot: str, at: float | None = None) -> None:
        """The payload of a leased job started (``at``, default now): running, lease renewed."""
        now = self.clock()
        reply = self.call_script(
            "start",
            [self.keys.jobs, self.keys.leases],
            [job, attempt, pilot, now, self.lease_seconds, now if at is None else at],
        )
        self._stale(reply)

    @guarded("reporting a success")
    def complete(self, job: str, attempt: int, pilot: str, result: RunResult | None = None) -> list[str]:
        """Record a success; returns the dependents it released (into their task queue or to evaluate)."""
        reply = self.call_script(
            "complete", self._complete_keys(), self._complete_args(job, attempt, pilot, result, self.clock())
        )
        self._stale(reply)
        return [_text(x) for x in reply[1:]]

    def _complete_keys(self) -> list[str]:
        k = self.keys
        return [
            k.jobs,
            k.leases,
            k.kills,
            k.tqempty,
            k.releasing,
            k.donelog,
            k.etekeys,
            k.eterules,
            k.work,
            *self.floors,
            k.ended,
            k.blocked,
            k.stats,
            k.held,
            k.events,
            *self.history_keys,
        ]

    def _complete_args(self, job: str, attempt: int, pilot: str, result: RunResult | None, now: float) -> list[Any]:
        return [self._base, job, attempt, pilot, now, json.dumps((result or RunResult()).fields())]

    @guarded("reporting a failure")
    def fail(
        self, job: str, attempt: int, pilot: str, result: RunResult, *, requeue: bool = False, unstarted: bool = False
    ) -> JobState:
        """Record a failure; with ``requeue`` the job goes back to its task queue at once, as a retry, or with
        ``unstarted`` too as a job its pilot never started (none of its retries used, if the store agrees)."""
        k = self.keys
        extra: list[str] = [k.work, *self.floors]
        if requeue:
            extra += self.pool_keys([self.job(job).tq_id])
        mode = ("2" if unstarted else "1") if requeue else "0"
        args = [self._base, job, attempt, pilot, self.clock(), json.dumps(result.fields()), mode]
        reply = self.call_script("fail", [k.jobs, k.leases, k.kills, k.tqempty, k.releasing], args, extra)
        self._stale(reply)
        return JobState(_text(reply[1]))

    # -- periodic work ----------------------------------------------------------------------------

    @guarded("requeueing expired leases")
    def requeue_expired(self, batch: int = 500) -> tuple[int, int, int]:
        """Requeue jobs whose lease expired (back-off, retry limit) and restore those whose back-off is over.

        Returns (requeued, failed beyond the retry limit, restored into their task queue). A job requeued
        without back-off (its first lease expiry) is restored by a second call at once.
        """
        k = self.keys
        total = [0, 0, 0]
        for _ in range(2):
            now = self.clock()
            cutoff = self._lease_cutoff(now)
            due = self.client.zrangebyscore(k.delayed, "-inf", now, start=0, num=batch)
            extra = [k.work, k.parked, *self.floors, *self.pool_keys(self._tq_of(due))]
            reply = self.call_script(
                "reap",
                [k.jobs, k.leases, k.delayed, k.kills, k.tqempty, k.releasing],
                [self._base, now, self.backoff, batch, cutoff],
                extra,
            )
            counts = int(reply[1]), int(reply[2]), int(reply[3])
            total = [a + b for a, b in zip(total, counts, strict=True)]
            if not counts[0]:
                break
        return total[0], total[1], total[2]

    def _lease_cutoff(self, now: float) -> float | str:
        """Leases that expired before this are requeued: ``now``, or none ("-inf") for half a lease after the
        server restarted (or failed over). A restart is an outage for every pilot: leases that look expired
        then are not evidence of a dead pilot, and a live pilot renews them as soon as the store answers it
        again (its retries come at least every quarter lease). The server's ``run_id``, which changes at
        every start, is kept in the store: a different one starts the grace; a dead pilot's jobs wait that
        much more."""
        try:
            run_id = self.client.info("server").get("run_id")
        except redis.ResponseError:  # a server without INFO (fakeredis): no restart to tell
            return now
        if not run_id:
            return now
        k = self.keys
        seen, grace = self.client.hmget(k.cursor, [_RUN_ID, _GRACE])
        if seen is None and self._run_seen is not None:
            log.warning(
                "the primary at %s (run %s) holds nothing of %s's reaper cursor, which run %s held: its data "
                "was lost (a replica that never synced promoted, or a restart without its files); job ids "
                "resume past the last replicated ceiling, but jobs and leases given since are gone",
                self.where,
                run_id,
                self.keys.base,
                self._run_seen,
            )
        self._run_seen = str(run_id)
        if seen is None or _text(seen) != str(run_id):
            if seen is not None:
                grace = str(now + self.lease_seconds / 2).encode()
                self.client.hset(k.cursor, _GRACE, grace)
            self.client.hset(k.cursor, _RUN_ID, str(run_id))
        return "-inf" if grace is not None and now < float(grace) else now

    def _tq_of(self, ids: Sequence[Any]) -> list[str]:
        if not ids:
            return []
        raws = self.client.hmget(self.keys.jobs, [_text(i) for i in ids])
        out = []
        for raw in raws:
            try:
                tq = json.loads(raw)["t"] if raw else None
            except (ValueError, KeyError, TypeError):
                tq = None  # unreadable: reap.lua parks it
            if isinstance(tq, str) and tq:
                out.append(tq)
        return out

    @guarded("cancelling a job")
    def cancel(self, job: str, reason: str = "cancelled by user", *, kill: bool = False, by: str | None = None) -> str:
        """Cancel (or, with ``kill``, kill) a job; ``by``: who asks, as its events say it (default "cancel").
        Returns what happened: ended, requested, final, unknown."""
        k = self.keys
        reply = self.call_script(
            "cancel",
            [k.jobs, k.kills, k.delayed, k.releasing],
            [self._base, job, "kill" if kill else "cancel", reason, self.clock(), *([by] if by else [])],
            [k.work, k.parked, *self.floors],
        )
        if _text(reply[0]) == "unknown":
            raise NotFound(f"no job {job!r}")
        return _text(reply[0])

    def kill(self, job: str, reason: str = "killed by operator") -> str:
        return self.cancel(job, reason, kill=True)

    @guarded("refreshing a SubmitPool")
    def refresh_pool(self, tq_id: str, queues: Sequence[str]) -> tuple[int, int] | None:
        """Replace the SubmitPool of one task queue; returns (queues added, queues removed), or None when
        the task queue has no definition (any more: :meth:`clean` forgot it), and nothing was written."""
        extra = self.pool_keys([tq_id]) + [self.keys.qheads(q) for q in queues] + self.floors + [self.keys.tqdefs]
        reply = self.call_script(
            "refresh_pool", [self.keys.poolstamp], [self._base, tq_id, self.clock(), *queues], extra
        )
        if _text(reply[0]) == "gone":
            return None
        return int(reply[1]), int(reply[2])

    @guarded("cleaning empty task queues")
    def clean(self, grace: float, batch: int = 200) -> list[str]:
        """Forget task queues empty for longer than ``grace`` seconds, with their pools; returns their ids."""
        k = self.keys
        cutoff = self.clock() - grace
        cands = [_text(t) for t in self.client.zrangebyscore(k.tqempty, "-inf", cutoff, start=0, num=batch)]
        reply = self.call_script(
            "clean",
            [k.tqdefs, k.tqempty, k.poolstamp],
            [self._base, cutoff, batch],
            self.pool_keys(cands) + self.floors,
        )
        return [_text(x) for x in reply[1:]]

    @guarded("releasing a job")
    def release(self, job: str, spec: Mapping[str, Any]) -> JobState | None:
        """Move a releasing job into its task queue (``spec`` as release.lua documents) or fail it."""
        k = self.keys
        extra = [k.work, *self.floors]
        if "error" not in spec:
            extra += self.pool_keys([spec["t"]]) + [k.qheads(q) for q in spec["queues"]]
        reply = self.call_script(
            "release",
            [k.jobs, k.tqdefs, k.tqempty, k.poolstamp, k.releasing],
            [self._base, job, self.clock(), json.dumps(spec)],
            extra,
        )
        return JobState(_text(reply[1])) if _text(reply[0]) == "ok" else None
