"""Read models: what the operator's views and re-pressure read of the store, typed.

The control plane's views (``matcher.explain``, ``matcher.status``) and re-pressure (``matcher.repressure``)
read more than whole jobs: a task queue's length and head, a job's place in it, the live pilots' records,
the completions since a cursor, the jobs of a rule. Each of those reads is a function here, so the Redis
client and the short field names of a stored job record stay inside the store. :class:`RecordView` reads
one record's fields without building a :class:`~taskqueues.store.records.Job` (re-pressure reads
thousands of records and most of it only needs a few fields).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .census import Census, take
from .guard import guarded
from .part import Part
from .records import Job, read_requirements
from .records import text as _text
from .reservations import held_for

#: Job ids read per HMGET by :class:`RecordCache`.
FETCH_CHUNK = 1000


class RecordView:
    """The fields of one stored job record that re-pressure reads, by name."""

    __slots__ = ("id", "raw")

    def __init__(self, job: str, raw: dict[str, Any]) -> None:
        self.id = job
        self.raw = raw

    @property
    def state(self) -> str:
        return str(self.raw["s"])

    @property
    def request(self) -> str:
        return str(self.raw.get("q", ""))

    @property
    def rule(self) -> str:
        return str(self.raw.get("ru") or "")

    @property
    def key(self) -> str:
        return str(self.raw.get("k") or "")

    @property
    def task_queue(self) -> str:
        return str(self.raw["t"])

    @property
    def deps(self) -> list[str]:
        return [str(d) for d in self.raw.get("dp") or []]

    @property
    def dependents(self) -> list[str]:
        return [str(d) for d in self.raw.get("dn") or []]

    @property
    def ete(self) -> float:
        return float(self.raw.get("e", 0.0))

    @property
    def priority(self) -> float | None:
        """The job's own priority (``pilotfish update --priority``), None when it has its request's."""
        value = self.raw.get("py")
        return float(value) if isinstance(value, int | float) else None

    @property
    def hint(self) -> float | None:
        """The run-time estimate the user gave (``ete``), if any."""
        raw = self.raw.get("h")
        return None if raw is None else float(raw)

    @property
    def pressure(self) -> float:
        return float(self.raw.get("pr", 0.0))

    @property
    def score(self) -> float:
        return float(self.raw.get("sc", 0.0))

    @property
    def since(self) -> float | None:
        """When the job started running (or was matched, before its start is reported)."""
        since = self.raw.get("st") or self.raw.get("tm")
        return None if since is None else float(since)

    @property
    def member(self) -> str:
        """Its task-queue member (records keep its tail), empty when it has none."""
        tail = self.raw.get("mt")
        return self.id + str(tail) if tail else ""

    def requirements(self) -> dict[str, Any]:
        return read_requirements(self.raw)

    def job(self) -> Job:
        return Job.from_record(json.dumps(self.raw), self.id)


def readable(job: str, raw: bytes | str | None) -> RecordView | None:
    """A stored record, or None when there is none or it cannot be read (a damaged record is left alone: the
    scripts park it)."""
    if not raw:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return RecordView(job, rec) if isinstance(rec, dict) and isinstance(rec.get("s"), str) else None


class RecordCache:
    """Job records fetched on demand and cached (None for an id with no readable record); ``read`` counts the
    records fetched."""

    def __init__(self, client: redis.Redis, key: str, where: str) -> None:
        self.client = client
        self.key = key
        self.where = where
        self.cache: dict[str, RecordView | None] = {}
        self.read = 0

    @guarded("reading job records")
    def fetch(self, ids: Iterable[str]) -> None:
        todo = [i for i in dict.fromkeys(ids) if i not in self.cache]
        for start in range(0, len(todo), FETCH_CHUNK):
            chunk = todo[start : start + FETCH_CHUNK]
            raws = self.client.hmget(self.key, chunk)
            self.read += len(chunk)
            for job, raw in zip(chunk, raws, strict=True):
                self.cache[job] = readable(job, raw)

    def get(self, job: str) -> RecordView | None:
        if job not in self.cache:
            self.fetch([job])
        return self.cache[job]


@dataclass(frozen=True)
class Place:
    """Where a job stands in its task queue: its rank (None when it is not in it), the queue's length, and
    when its back-off ends (None when it is not delayed)."""

    rank: int | None
    length: int
    delayed: float | None


@dataclass(frozen=True)
class Head:
    """The head of a task queue as its member says: what it needs, and its score."""

    task_queue: str
    cpu: int
    mem: int
    tmp: int
    need: float
    score: float


@dataclass(frozen=True)
class TaskQueueSummary:
    """A task queue's length, head score (None when empty) and SubmitPool."""

    waiting: int
    head_score: float | None
    queues: list[str]


class Views(Part):
    """The read models (``store.views``): what the operator's views and re-pressure read, typed."""

    @guarded("counting jobs and pilots for metrics")
    def census(self, live_within: float, now: float | None = None) -> Census:
        """Count what the store holds now; pilots are live when they beat within ``live_within`` seconds."""
        return take(self.client, self.keys, live_within, time.time() if now is None else now)

    @guarded("reading the reservations")
    def held_for(self, queues: Iterable[str], job: str, now: float, *, bounded: bool = False) -> list[str]:
        """Which pilot holds cores for which reserved job in each of ``queues``, as explain shows it
        (:func:`taskqueues.store.reservations.held_for`)."""
        return held_for(self.client, self.keys, queues, job, now, bounded=bounded)

    def cache(self) -> RecordCache:
        """An empty cache of job records, filled on demand."""
        return RecordCache(self.client, self.keys.jobs, self.where)

    @guarded("reading a cursor")
    def cursor(self, name: str) -> str | None:
        """One field of the periodic tasks' cursor hash."""
        raw = self.client.hget(self.keys.cursor, name)
        return None if raw is None else _text(raw)

    @guarded("reading the cursors")
    def cursors(self, names: Sequence[str]) -> list[str | None]:
        """Several fields of the cursor hash, in order."""
        return [None if raw is None else _text(raw) for raw in self.client.hmget(self.keys.cursor, list(names))]

    @guarded("reading the completions")
    def completions(self, low: str, batch: int) -> list[tuple[str, float]]:
        """Up to ``batch`` successful jobs of the done log from ``low`` on (a Redis score bound), oldest first."""
        entries: Any = self.client.zrangebyscore(self.keys.donelog, low, "+inf", start=0, num=batch, withscores=True)
        return [(_text(member), float(score)) for member, score in entries]

    @guarded("reading a rule's jobs")
    def rule_members(self, rule: str) -> list[str]:
        """The jobs listed under a rule (unfinished when listed)."""
        return [_text(m) for m in self.client.sscan_iter(self.keys.byrule(rule), count=1000)]

    @guarded("forgetting a rule's finished jobs")
    def forget_rule_members(self, finished: dict[str, list[str]]) -> None:
        """Drop finished jobs from their rules' lists (rule -> job ids), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for rule, ids in finished.items():
            if ids:
                pipe.srem(self.keys.byrule(rule), *ids)
        pipe.execute()

    @guarded("reading request records")
    def request_records(self, requests: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The records of these requests that exist."""
        if not requests:
            return {}
        raws = self.client.hmget(self.keys.requests, list(requests))
        return {q: json.loads(raw) for q, raw in zip(requests, raws, strict=True) if raw}

    @guarded("reading a job's task-queue member")
    def job_member(self, job: str) -> str:
        """The task-queue member a job's record names (empty when there is none, or no record)."""
        raw = self.client.hget(self.keys.jobs, job)
        rec = json.loads(raw) if raw else {}
        return job + str(rec["mt"]) if rec.get("mt") else ""

    @guarded("reading a job's place")
    def place(self, job: str, tq_id: str, member: str) -> Place:
        """The job's place in task queue ``tq_id`` (one round trip)."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zrank(k.tq(tq_id), member)
        pipe.zcard(k.tq(tq_id))
        pipe.zscore(k.delayed, job)
        rank, length, delayed = pipe.execute()
        return Place(None if rank is None else int(rank), int(length), None if delayed is None else float(delayed))

    @guarded("reading the leased jobs")
    def leased(self, limit: int) -> list[str] | None:
        """The ids of the leased jobs, or None when there are more than ``limit``."""
        if int(self.client.zcard(self.keys.leases)) > limit:
            return None
        return [_text(i) for i in self.client.zrange(self.keys.leases, 0, -1)]

    @guarded("reading the heads before a job")
    def heads_before(self, queue: str, score: float, *, skip: str = "") -> list[Head]:
        """Heads of the task queues of ``queue`` (but ``skip``) more urgent than ``score``: those the heads index
        puts before it, as their task queues hold them now (the index may lag below the real head: the real one
        decides)."""
        k = self.keys
        entries: Any = self.client.zrangebyscore(k.qheads(queue), "-inf", f"({score!r}", withscores=True)
        tqs = [_text(tq) for tq, _ in entries if _text(tq) != skip]
        if not tqs:
            return []
        pipe = self.client.pipeline(transaction=False)
        for tq in tqs:
            pipe.zrange(k.tq(tq), 0, 0, withscores=True)
        out = []
        for tq, head in zip(tqs, pipe.execute(), strict=True):
            if head and float(head[0][1]) < score:
                _, cpu, mem, tmp, need = _text(head[0][0]).split(":")
                out.append(Head(tq, int(cpu), int(mem), int(tmp), float(need), float(head[0][1])))
        return out

    @guarded("reading the task queues")
    def task_queue_summaries(self, tq_ids: Sequence[str]) -> dict[str, TaskQueueSummary]:
        """Length, head score and SubmitPool of each task queue (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for tq in tq_ids:
            pipe.zcard(self.keys.tq(tq))
            pipe.zrange(self.keys.tq(tq), 0, 0, withscores=True)
            pipe.smembers(self.keys.pool(tq))
        replies = pipe.execute() if tq_ids else []
        out = {}
        for i, tq in enumerate(tq_ids):
            waiting, head, pool = replies[3 * i : 3 * i + 3]
            out[tq] = TaskQueueSummary(
                int(waiting), float(head[0][1]) if head else None, sorted(_text(q) for q in pool)
            )
        return out

    @guarded("reading a page of an index")
    def zset_page(self, key: str, start: int, stop: int, *, reverse: bool = False) -> list[tuple[str, float]]:
        """(member, score) of ranks ``start``..``stop`` of a zset of the store (lowest score first, or highest
        with ``reverse``): the listings page through their indexes with it."""
        page: Any = self.client.zrange(key, start, stop, desc=reverse, withscores=True)
        return [(_text(member), float(score)) for member, score in page]

    @guarded("reading index sizes")
    def zset_sizes(self, keys: Sequence[str]) -> list[int]:
        """The sizes of several zsets, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zcard(key)
        return [int(n) for n in pipe.execute()]

    @guarded("reading the task queues")
    def task_queue_ids(self) -> list[str]:
        """Every task queue the store defines, sorted."""
        return sorted(_text(tq) for tq in self.client.hkeys(self.keys.tqdefs))

    @guarded("reading the request records")
    def all_request_records(self) -> dict[str, dict[str, Any]]:
        """Every request record (re-pressure's load step: the requests submitted after one whose work moved)."""
        raw: Any = self.client.hgetall(self.keys.requests)
        return {_text(k): json.loads(v) for k, v in raw.items()}
