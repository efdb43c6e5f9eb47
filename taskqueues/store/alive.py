"""Each process's own liveness entry: what ``pilotfish health`` (the Kubernetes liveness probes) reads.

A long-running component writes ``<component>@<host>`` → now into the zset ``alive:<component>`` from the
loop that does its work: the Celery worker from its event-loop heartbeat, beat from its scheduler tick, the
director from its cycle. The probe runs in the same pod, so it has the same host name (a pod's host name is
its name), and reads the score of its own member only. So a hung replica fails its probe while its siblings
beat, no process can keep another one alive, and the writer's and the reader's clocks are the same clock.
Pilots need no entry here: their heartbeat already records them in ``pilotseen`` under their own name.

Pod names change at every rollout, so each write also drops the entries nobody refreshed for
:data:`KEEP` seconds (those of pods that are gone).
"""

from __future__ import annotations

import socket
import time

import redis

from .guard import client_url, guard
from .keys import Keys

#: Seconds an entry nobody refreshes is kept (far above any probe's max age).
KEEP = 3600.0


def member(component: str, host: str | None = None) -> str:
    """The entry of ``component`` on ``host`` (default: this host)."""
    return f"{component}@{host or socket.gethostname()}"


def record(client: redis.Redis, keys: Keys, component: str, now: float | None = None) -> None:
    """This process's beat: ``<component>@<this host>`` is alive now (one round trip)."""
    now = time.time() if now is None else now
    key = keys.alive(component)
    with guard(client_url(client), f"recording that {component} is alive"):
        pipe = client.pipeline(transaction=False)
        pipe.zadd(key, {member(component): now})
        pipe.zremrangebyscore(key, "-inf", now - KEEP)
        pipe.execute()


def last_seen(client: redis.Redis, key: str, name: str) -> float | None:
    """When ``name`` last beat in the zset ``key`` (epoch seconds), or None if it never did."""
    score = client.zscore(key, name)
    return None if score is None else float(score)


def fresh_others(client: redis.Redis, key: str, name: str, since: float) -> int:
    """How many other members beat since ``since``: told on failure, since they do not count."""
    count = int(client.zcount(key, since, "+inf"))
    score = last_seen(client, key, name)
    return count - (1 if score is not None and score >= since else 0)
