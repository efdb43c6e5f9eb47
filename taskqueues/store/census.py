"""What a community's store holds now, counted for monitoring (``pilotfish metrics``): a read model.

Reading only, in a few pipelined round trips, never loading every job: waiting jobs are counted from the
task-queue zsets (ZCARD), blocked ones from the counters the scripts keep (:mod:`taskqueues.store.counters`), leased
ones from the leases zset (their records are read, a page at a time, for their task queue and pilot), pilots
from their heartbeat records. The oldest waiting job is looked for among the heads of the task queues (the
job each one hands out next): a job queued behind a more urgent one of its own task queue is not seen.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from .counters import StatField
from .keys import MATCHED_COUNT, Keys
from .records import text

#: Job records read per round trip when the leased jobs are counted.
PAGE = 1000


@dataclass(frozen=True)
class PilotCount:
    """Live pilots of one queue in one state (idle, busy, draining, stopped)."""

    queue: str
    state: str
    pilots: int


@dataclass
class Census:
    """Counts of one community at :attr:`at`."""

    at: float
    #: Jobs by state: waiting (in a task queue or in back-off), blocked, releasing, matched, running, parked, held.
    jobs: dict[str, int] = field(default_factory=dict)
    #: (catalog queue, state) -> jobs; a waiting or blocked job counts in every queue its task queue may use.
    by_queue: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (task queue, state) -> jobs (waiting, blocked, running: matched or running).
    by_task_queue: Counter[tuple[str, str]] = field(default_factory=Counter)
    pilots: list[PilotCount] = field(default_factory=list)
    #: The stats hash as stored (:mod:`taskqueues.store.counters`).
    counters: dict[str, float] = field(default_factory=dict)
    #: Seconds since the oldest job among the task-queue heads was submitted (None: no job waits).
    oldest_waiting: float | None = None

    def counter(self, name: str) -> float:
        return self.counters.get(name, 0.0)

    def with_prefix(self, prefix: str) -> dict[str, float]:
        """Counters whose field starts with ``prefix``, by the rest of their name."""
        return {k.removeprefix(prefix): v for k, v in self.counters.items() if k.startswith(prefix)}


def pilot_state(record: Mapping[str, Any]) -> str:
    """What a pilot is doing, from its heartbeat record."""
    if record.get("stopped"):
        return "stopped"
    if record.get("draining"):
        return "draining"
    return "busy" if record.get("running") else "idle"


def take(client: redis.Redis, keys: Keys, live_within: float, now: float) -> Census:
    """Count what the store holds at ``now``; pilots are live when they beat within ``live_within`` seconds
    (``store.views.census``, which guards it)."""
    census = Census(at=now)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.stats)
    pipe.hkeys(keys.tqdefs)
    pipe.zcard(keys.delayed)
    pipe.zcard(keys.releasing)
    pipe.hlen(keys.parked)
    pipe.zrange(keys.leases, 0, -1)
    pipe.hgetall(keys.pilots)
    pipe.zrangebyscore(keys.pilotseen, now - live_within, "+inf")
    pipe.zcard(keys.held)
    pipe.hget(keys.heads, MATCHED_COUNT)  # match.lua counts its leases there (Control.matched)
    raw_stats, tq_ids, delayed, releasing, parked, leased, pilot_raw, seen, held, matched = pipe.execute()
    census.counters = {text(k): float(v) for k, v in raw_stats.items()}
    census.counters[StatField.MATCHED] = float(matched or 0)
    tqs = sorted(text(t) for t in tq_ids)

    pipe = client.pipeline(transaction=False)
    for tq in tqs:
        pipe.zcard(keys.tq(tq))
        pipe.zrange(keys.tq(tq), 0, 0)
        pipe.smembers(keys.pool(tq))
    replies = pipe.execute()
    pools: dict[str, list[str]] = {}
    heads: list[str] = []
    waiting = 0
    for i, tq in enumerate(tqs):
        n, head, pool = replies[3 * i : 3 * i + 3]
        pools[tq] = sorted(text(q) for q in pool)
        if n:
            waiting += int(n)
            census.by_task_queue[tq, "waiting"] += int(n)
            for queue in pools[tq]:
                census.by_queue[queue, "waiting"] += int(n)
        if head:
            heads.append(text(head[0]).split(":", 1)[0])

    blocked = census.with_prefix(StatField.BLOCKED_IN)
    for tq, n in blocked.items():
        if n > 0:
            census.by_task_queue[tq or "deferred", "blocked"] += int(n)
            for queue in pools.get(tq, []):
                census.by_queue[queue, "blocked"] += int(n)

    live = {text(p) for p in seen}
    records: dict[str, dict[str, Any]] = {}
    for name, raw in pilot_raw.items():
        pilot = text(name)
        if pilot in live:
            try:
                records[pilot] = json.loads(raw)
            except ValueError:
                continue
    by_pilot = Counter((str(r.get("queue", "")), pilot_state(r)) for r in records.values())
    census.pilots = [PilotCount(q, s, n) for (q, s), n in sorted(by_pilot.items())]

    states: Counter[str] = Counter()
    for rec in _records(client, keys, [text(j) for j in leased]):
        state = str(rec.get("s", ""))
        states[state] += 1
        census.by_task_queue[str(rec.get("t", "")), "running"] += 1
        held_by = records.get(str(rec.get("pl", "")), {}).get("queue")
        if held_by:
            census.by_queue[str(held_by), "running"] += 1

    census.jobs = {
        "waiting": waiting + int(delayed),
        "blocked": max(0, int(census.counter(StatField.BLOCKED))),
        "releasing": int(releasing),
        "matched": states["matched"],
        "running": states["running"],
        "parked": int(parked),
        "held": int(held),
    }
    submitted = [float(rec["ts"]) for rec in _records(client, keys, heads) if "ts" in rec]
    census.oldest_waiting = max(0.0, now - min(submitted)) if submitted else None
    return census


def _records(client: redis.Redis, keys: Keys, ids: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The readable records of ``ids``, read a page at a time (one that cannot be read is skipped)."""
    wanted = list(ids)
    for start in range(0, len(wanted), PAGE):
        for raw in client.hmget(keys.jobs, wanted[start : start + PAGE]):
            if raw is None:
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec
