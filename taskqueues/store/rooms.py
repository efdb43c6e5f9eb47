"""The store's rooms, one property each on :class:`taskqueues.store.Store` (a base of it, as
:class:`taskqueues.store.facade_reads.StoreReads` is), and the connections of one's own it hands out.

A room is a :class:`taskqueues.store.part.Part`: the facade's client, keys and address, every method that
talks to Redis guarded. A new concept's room is one more property here (CONTRIBUTING.md); a room that runs
the store's scripts takes the facade itself and is a property of the facade (``Store.logs``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import redis
from redis.connection import Connection

from .audit import Audit
from .connection import Subscription, follow, give_back, own_connection
from .control import Control
from .fairshare import Shares
from .gheads import GroupHeads
from .guard import guarded
from .history import History
from .keys import Keys
from .notices import Notices
from .part import Scripted
from .payload_logs import Logs
from .pilots import Pilots
from .registry import Registry
from .rescore import Rescored
from .retention import Forgotten, forget_ended
from .tokens import Tokens
from .views import Views

__all__ = ["StoreRooms"]


class StoreRooms:
    """The rooms and connections of a store (mixed into :class:`taskqueues.store.Store`)."""

    client: redis.Redis
    keys: Keys
    where: str
    lease_seconds: float
    clock: Callable[[], float]

    @cached_property
    def shares(self) -> Shares:
        """The shares policy and the fair-share usage."""
        return Shares(self.client, self.keys, self.where)

    @cached_property
    def gheads(self) -> GroupHeads:
        """The heads indexes by group that a fair-share match walks (issue 31)."""
        return GroupHeads(self.client, self.keys, self.where)

    @cached_property
    def pilots(self) -> Pilots:
        """Live pilots (the live window) and their stop requests."""
        return Pilots(self.client, self.keys, self.where, lease_seconds=self.lease_seconds, clock=self.clock)

    @cached_property
    def control(self) -> Control:
        """The control plane's beats, counters and locks."""
        return Control(self.client, self.keys, self.where)

    @cached_property
    def tokens(self) -> Tokens:
        """The API's tokens, kept as hashes (issue 30)."""
        return Tokens(self.client, self.keys, self.clock)

    @cached_property
    def audit(self) -> Audit:
        """The API's audit log: who did what to which request or job."""
        return Audit(self.client, self.keys)

    @cached_property
    def views(self) -> Views:
        """The read models of the operator's views and re-pressure."""
        return Views(self.client, self.keys, self.where)

    @cached_property
    def registry(self) -> Registry:
        """The pilots the directors submitted."""
        return Registry(self.client, self.keys, self.where)

    # -- the rooms that run scripts or read jobs: they take the facade itself -----------------

    @property
    def logs(self: Scripted) -> Logs:
        """The payloads' shipped output."""
        return Logs(self)

    @property
    def history(self: Scripted) -> History:
        """The history of ended jobs by time, owner and group (:mod:`taskqueues.store.history`)."""
        return History(self.client, self.keys, self.where, self.jobs)

    @property
    def notices(self: Scripted) -> Notices:
        """Request-end notifications: watched requests, the due queue, claims (:mod:`taskqueues.store.notices`)."""
        base = self.keys.base + ":"
        return Notices(
            self.client, self.keys, self.where, lambda name, keys, args: self.call_script(name, keys, [base, *args])
        )

    @guarded("pinging the store")
    def ping(self) -> None:
        """One round trip to the server."""
        self.client.ping()

    def subscribe(self, *, ignore_subscribe_messages: bool = False) -> Subscription:
        """A subscription to channels of the store, on a connection of its own (no channel yet)."""
        return Subscription(self.client, ignore_subscribe_messages=ignore_subscribe_messages)

    @guarded("taking a connection of one's own")
    def own_connection(self) -> Connection:
        """A connection taken out of the pool for one user's ordered traffic (:meth:`send_exchange`); give it
        back with :meth:`give_back`."""
        return own_connection(self.client)

    @guarded("following the community's primary")
    def follow(self, conn: Connection) -> None:
        """Before sending on a connection of one's own with no reply due: on a Redis Cluster, move it to the
        community's primary if the slot moved."""
        follow(conn)

    def give_back(self, conn: Connection) -> None:
        """Close a connection taken with :meth:`own_connection` (replies may still be due on it), return it."""
        give_back(self.client, conn)

    def rescore(
        self: Scripted,
        jobs: Sequence[Rescored],
        *,
        waiting_tqs: Iterable[str] = (),
        etas: Mapping[str, float] | None = None,
        loads: Mapping[str, float] | None = None,
        progress: Mapping[str, str] | None = None,
        marks: Mapping[str, str] | None = None,
    ) -> tuple[int, int]:
        """Store one batch; ``waiting_tqs`` are the task queues of the waiting jobs among them (their members
        move); ``loads`` are new load dates of requests (:mod:`matcher.eta`). Returns (jobs rewritten, task-queue
        members moved)."""
        keys = self.keys
        body: dict[str, Any] = {"jobs": [j.entry() for j in jobs]}
        if etas is not None or loads is not None or progress is not None or marks is not None:
            body.update(
                requests=dict(etas or {}),
                loads=dict(loads or {}),
                progress=dict(progress or {}),
                marks=dict(marks or {}),
            )
        reply = self.call_script(
            "rescore",
            [keys.jobs, keys.requests, keys.cursor],
            [keys.base + ":", json.dumps(body)],
            [keys.work, *self.floors, *self.pool_keys(sorted(set(waiting_tqs)))],
        )
        return int(reply[1]), int(reply[2])

    def forget_ended(self: Scripted, cutoff: float) -> Forgotten:
        """The job retention (:func:`taskqueues.store.retention.forget_ended`)."""
        return forget_ended(self, cutoff)
