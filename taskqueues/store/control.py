"""The control plane's own records in the store (``store.control``): who is alive, counters, locks.

* **Beats** (:meth:`Control.beat`): a long-running component writes ``<component>@<host>`` → now into the
  zset ``alive:<component>`` from the loop that does its work (the Celery worker from its event-loop
  heartbeat, beat from its scheduler tick, the director from its cycle); ``pilotfish health`` (the
  Kubernetes liveness probe, same pod, same host name) reads its own member only
  (:meth:`Control.last_beat`), so a hung replica fails its probe while its siblings beat, no process can
  keep another one alive, and the writer's and the reader's clocks are the same clock. Pilots need no entry
  here: their heartbeat already records them in ``pilotseen`` under their own name. Pod names change at
  every rollout, so each write also drops the entries nobody refreshed for :data:`KEEP` seconds.
* **Counters** (:meth:`Control.count_submitted`, :meth:`Control.count_error`): what no script counts (the
  director's submissions and errors) is added to the ``stats`` hash (:mod:`taskqueues.store.counters`).
* **Locks** (:meth:`Control.lock`, :meth:`Control.locked`): skip locks for periodic work
  (:mod:`taskqueues.store.lock`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .counters import StatField
from .guard import guarded
from .keys import MATCHED_COUNT
from .lock import Lock
from .part import Part

__all__ = ["KEEP", "Control", "member"]

#: Seconds a beat nobody refreshes is kept (far above any probe's max age).
KEEP = 3600.0


def member(component: str, host: str | None = None) -> str:
    """The entry of ``component`` on ``host`` (default: this host)."""
    return f"{component}@{host or socket.gethostname()}"


class Control(Part):
    """Component beats, counters and locks of the control plane."""

    @guarded("reading the match count")
    def matched(self) -> int:
        """The jobs match.lua has leased (it counts them with the heads it writes, not in the stats hash: a call
        pays no command of its own for it)."""
        return int(self.client.hget(self.keys.heads, MATCHED_COUNT) or 0)

    @guarded("recording that a component is alive")
    def beat(self, component: str, now: float | None = None) -> None:
        """This process's beat: ``<component>@<this host>`` is alive now (one round trip)."""
        now = time.time() if now is None else now
        key = self.keys.alive(component)
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(key, {member(component): now})
        pipe.zremrangebyscore(key, "-inf", now - KEEP)
        pipe.execute()

    def _where(self, component: str) -> tuple[str, str]:
        """The zset and member of ``component``'s process on this host; a pilot's is ``pilot:<its name>``."""
        kind, _, name = component.partition(":")
        if kind == "pilot":
            return self.keys.pilotseen, name
        return self.keys.alive(component), member(component)

    @guarded("reading a component's last beat")
    def last_beat(self, component: str) -> tuple[str, float | None]:
        """The member that beats for ``component`` on this host (``pilot:<name>`` for a pilot), and when it last
        beat (epoch seconds; None if it never did)."""
        key, name = self._where(component)
        score = self.client.zscore(key, name)
        return name, None if score is None else float(score)

    @guarded("reading the other components' beats")
    def others_beating(self, component: str, since: float) -> int:
        """How many other processes of ``component`` beat since ``since``: told on failure, as they do not count."""
        key, name = self._where(component)
        count = int(self.client.zcount(key, since, "+inf"))
        score = self.client.zscore(key, name)
        return count - (1 if score is not None and float(score) >= since else 0)

    @guarded("counting a submitted pilot")
    def count_submitted(self, backend: str) -> None:
        """One more pilot submitted to ``backend`` (the stats field ``submitted:<backend>``)."""
        self.client.hincrby(self.keys.stats, StatField.SUBMITTED + backend, 1)

    @guarded("counting a batch-system error")
    def count_error(self, backend: str) -> None:
        """One more failed call of ``backend`` (the stats field ``errors:<backend>``)."""
        self.client.hincrby(self.keys.stats, StatField.ERRORS + backend, 1)

    def lock(self, name: str, ttl: float) -> Lock:
        """The periodic-work lock ``name``, not yet taken (:meth:`Lock.acquire`)."""
        return Lock(self.client, self.keys.lock(name), ttl)

    @contextmanager
    def locked(self, name: str, ttl: float) -> Iterator[bool]:
        """Hold the lock ``name`` for the block; yields False (skip this run) when it is taken.

        ``ttl`` should exceed the longest expected run: the lock frees itself that long after a crash.
        """
        lock = self.lock(name, ttl)
        got = lock.acquire()
        try:
            yield got
        finally:
            if got:
                lock.release()
