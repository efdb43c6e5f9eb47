"""What the store reads back (:class:`StoreReads`, a base of :class:`~taskqueues.store.facade.Store`): records,
requests, task queues, pools, pilots, parked jobs and learnt run times, each in one round trip or a pipeline.
Nothing here writes but the parked cursor (:meth:`StoreReads.newly_parked`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis

from ..errors import NotFound
from ..ete import RuleStats
from .guard import guarded
from .keys import Keys
from .records import (
    Job,
    Largest,
    Parked,
)
from .records import text as _text

#: Field of the cursor hash: when the last job reported by :meth:`StoreReads.newly_parked` was parked.
PARKED_CURSOR = "parked"
#: Job records read per ``HMGET``: a whole request's records in one command held the server 44 ms for 200,000
#: (a PING from another process waited that long: every pilot's match behind a ``pilotfish status``); read
#: 10,000 a command, the longest PING wait was 5-12 ms.
READ_CHUNK = 10_000


log = logging.getLogger(__name__)


class StoreReads:
    """The reading half of the store; :class:`~taskqueues.store.facade.Store` adds the scripts that write."""

    client: redis.Redis
    keys: Keys
    clock: Callable[[], float]
    #: Where the store lives, as errors name it (no password).
    where: str

    @guarded("reading learnt run times")
    def ete_stats(self, keys: Iterable[str], rules: Iterable[str]) -> tuple[dict[str, float], dict[str, RuleStats]]:
        """Learnt run times: last success per job key, running statistics per rule (one round trip)."""
        key_list, rule_list = sorted(set(keys)), sorted(set(rules))
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self.keys.etekeys, key_list or ["-"])
        pipe.hmget(self.keys.eterules, rule_list or ["-"])
        last, stats = pipe.execute()
        by_key = {k: float(v) for k, v in zip(key_list, last, strict=False) if v is not None}
        by_rule: dict[str, RuleStats] = {}
        for rule, raw in zip(rule_list, stats, strict=False):
            if raw is not None:
                by_rule[rule] = RuleStats.from_text(_text(raw))
        return by_key, by_rule

    @guarded("reading the outstanding work")
    def outstanding_work(self) -> float:
        """Core-seconds of work still to do (unfinished jobs with a known shape), kept by the scripts."""
        return float(self.client.get(self.keys.work) or 0)

    @guarded("reading a request")
    def request(self, request: str) -> dict[str, Any]:
        raw = self.client.hget(self.keys.requests, request)
        if raw is None:
            raise NotFound(f"no request {request!r}")
        record: dict[str, Any] = json.loads(raw)
        return record

    @guarded("reading the requests")
    def requests(self) -> dict[str, dict[str, Any]]:
        return {_text(k): json.loads(v) for k, v in self.client.hgetall(self.keys.requests).items()}

    @guarded("reading a request's jobs")
    def request_jobs(self, request: str) -> list[Job]:
        """Every job of a request (their ids are consecutive: one submission stores them all)."""
        rec = self.request(request)
        first, last = int(rec["first"]), int(rec["last"])
        return self.jobs([str(i) for i in range(first, last + 1)])

    @guarded("reading a job")
    def job(self, job: str) -> Job:
        raw = self.client.hget(self.keys.jobs, job)
        if raw is None:
            raise NotFound(f"no job {job!r}")
        return Job.from_record(raw, job)

    @guarded("reading jobs")
    def jobs(self, ids: Sequence[str]) -> list[Job]:
        """The jobs of ``ids`` that exist; one whose record cannot be read is left out with a warning (it is
        parked, or will be: see :meth:`parked`), so one damaged record does not fail every view of its request.
        Read :data:`READ_CHUNK` at a time: each command is atomic, the whole read is not (a view, not a step)."""
        if not ids:
            return []
        raws: list[Any] = []
        for at in range(0, len(ids), READ_CHUNK):
            raws += self.client.hmget(self.keys.jobs, list(ids[at : at + READ_CHUNK]))
        out = []
        for job, raw in zip(ids, raws, strict=True):
            if raw:
                try:
                    out.append(Job.from_record(raw, job))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("job %s: its record cannot be read (%s): left out", job, exc)
        return out

    @guarded("reading a task queue")
    def task_queue(self, tq_id: str) -> list[tuple[str, float]]:
        """Members (job ids) of one task queue with their scores, most urgent first."""
        entries: Any = self.client.zrange(self.keys.tq(tq_id), 0, -1, withscores=True)
        return [(_text(member).split(":", 1)[0], float(score)) for member, score in entries]

    @guarded("reading a SubmitPool")
    def pool(self, tq_id: str) -> set[str]:
        return {_text(q) for q in self.client.smembers(self.keys.pool(tq_id))}

    @guarded("reading task-queue definitions")
    def tq_definitions_of(self, tq_ids: Sequence[str]) -> dict[str, str]:
        values = self.client.hmget(self.keys.tqdefs, list(tq_ids)) if tq_ids else []
        return {tq: _text(v) for tq, v in zip(tq_ids, values, strict=True) if v is not None}

    @guarded("reading task-queue definitions")
    def tq_definitions(self) -> dict[str, str]:
        return {_text(a): _text(b) for a, b in self.client.hgetall(self.keys.tqdefs).items()}

    @guarded("reading a queue's demand")
    def waiting_heads(self, queue: str, per_tq: int = 200) -> list[tuple[str, str, int, int, int, float, float]]:
        """Demand a queue can serve: up to ``per_tq`` most urgent waiting jobs of each of its task queues.

        Tuples (task queue, job id, cpu, mem, tmp, need, score), need being the seconds a pilot must have
        left for the job (:func:`taskqueues.store.records.time_needed`) — read from the task-queue members, so no
        job record is loaded.
        """
        index: Any = self.client.zrange(self.keys.qheads(queue), 0, -1, withscores=True)
        tqs = [_text(tq) for tq, score in index if score < 1e18]
        pipe = self.client.pipeline(transaction=False)
        for tq in tqs:
            pipe.zrange(self.keys.tq(tq), 0, per_tq - 1, withscores=True)
        out = []
        for tq, members in zip(tqs, pipe.execute(), strict=True):
            for member, score in members:
                try:
                    job, cpu, mem, tmp, need = _text(member).split(":")
                    out.append((tq, job, int(cpu), int(mem), int(tmp), float(need), float(score)))
                except ValueError:
                    continue  # a member that cannot be read: the next match that meets it parks it
        return out

    @guarded("reading the pilots")
    def pilot_records(self, max_age: float | None = None) -> dict[str, dict[str, Any]]:
        """Records the live pilots sent with their heartbeats (seen within ``max_age`` seconds)."""
        names = None
        if max_age is not None:
            names = {_text(n) for n in self.client.zrangebyscore(self.keys.pilotseen, self.clock() - max_age, "+inf")}
        out = {}
        for name, raw in self.client.hgetall(self.keys.pilots).items():
            if names is None or _text(name) in names:
                out[_text(name)] = json.loads(raw)
        return out

    @guarded("reading the releasing jobs")
    def releasing(self, limit: int = 500) -> list[str]:
        return [_text(x) for x in self.client.zrange(self.keys.releasing, 0, limit - 1)]

    @guarded("reading the task queues' largest values")
    def tq_largest(self, tq_ids: Sequence[str]) -> dict[str, Largest]:
        """The largest exact cpu, mem, tmp and wall of the jobs that entered each task queue since it was
        last empty, as the scripts keep them (task queues no job entered yet are left out)."""
        values = self.client.hmget(self.keys.tqmax, list(tq_ids)) if tq_ids else []
        out: dict[str, Largest] = {}
        for tq, raw in zip(tq_ids, values, strict=True):
            try:
                cpu, mem, tmp, wall = (int(float(x)) for x in _text(raw).split(":"))
            except (ValueError, OverflowError):
                continue  # none, or damaged: the refresh judges that task queue on its definition
            out[tq] = Largest(cpu, mem, tmp, wall)
        return out

    @guarded("reading the parked jobs")
    def parked(self, ids: Sequence[str] | None = None) -> dict[str, Parked]:
        """Jobs taken out of their task queue because their member or record could not be read (all of
        them, or those of ``ids``)."""
        if ids is None:
            raw = {_text(k): v for k, v in self.client.hgetall(self.keys.parked).items()}
        else:
            raw = {
                i: v
                for i, v in zip(ids, self.client.hmget(self.keys.parked, list(ids)) if ids else [], strict=True)
                if v is not None
            }
        return {job: Parked.from_entry(job, value) for job, value in raw.items()}

    @guarded("reading the newly parked jobs")
    def newly_parked(self) -> list[Parked]:
        """Jobs parked since the last call (in any process): the cursor hash's ``parked`` field holds the
        time of the last one returned. Two concurrent callers may both return the same ones."""
        seen = float(self.client.hget(self.keys.cursor, PARKED_CURSOR) or 0)
        fresh = sorted((p for p in self.parked().values() if p.at > seen), key=lambda p: (p.at, p.job))
        if fresh:
            self.client.hset(self.keys.cursor, PARKED_CURSOR, repr(fresh[-1].at))
        return fresh
