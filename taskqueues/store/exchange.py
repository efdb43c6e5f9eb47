"""A pilot's reports and its next match, sent in one write and answered later.

For a short payload the network round trip costs more than the scripts it carries, so a pilot sends the
starts it has not reported yet, the successful ends, and the match for its freed resources together
(:meth:`Store.send_exchange`), applied by Redis in this order: starts ``(job, attempt, started at)``,
completions ``(job, attempt, result)``, then the match. Each is its own atomic script, exactly as
:meth:`Store.start`, :meth:`Store.complete` and :meth:`Store.match` — one refused report changes
nothing and does not stop the others; they only share the write and the wait.

The pilot does not have to wait: it keeps its exchanges on one connection of its own (so Redis applies
them in the order they were sent), watches the socket with its selector and calls :meth:`receive` when
:meth:`ready` says the replies are there. A completion that releases dependents into task queues it did
not declare is redone alone when its reply is read, after the match of the same exchange (which so did
not see those dependents); so is any function Redis had lost (a flush, or a server without the data), and any
script a Redis Cluster node redirected (the community's slot moved: ``MOVED``, ``ASK``, ``TRYAGAIN``): scripts
that ask for keys write nothing before asking, and a redirected one did not run.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any, Protocol

import redis
from redis.connection import Connection

from ..errors import StaleReport, StoreError
from . import cluster
from .functions import not_found
from .guard import converted
from .packed import reconnect
from .records import Exchange, Job, PilotOffer, RunResult
from .records import text as _text

_OPERATION = "exchanging a pilot's reports and match"


class Redoer(Protocol):
    """What an exchange needs of the store to settle its replies: each report or match redone alone
    (:class:`taskqueues.store.facade.Store` is one; naming it here would make the two modules import each other)."""

    where: str

    def reload_scripts(self) -> None: ...

    def start(self, job: str, attempt: int, pilot: str, at: float | None = None) -> None: ...

    def complete(self, job: str, attempt: int, pilot: str, result: RunResult | None = None) -> list[str]: ...

    def match(self, offer: PilotOffer, max_jobs: int = 1) -> list[Job]: ...

    def matched(self, reply: list[Any]) -> list[Job]: ...


class PendingExchange:
    """Reports and a match written to ``conn`` whose replies are still to be read."""

    def __init__(
        self,
        store: Redoer,
        conn: Connection,
        pilot: str,
        starts: Sequence[tuple[str, int, float]],
        completions: Sequence[tuple[str, int, RunResult]],
        offer: PilotOffer | None,
        max_jobs: int,
        commands: Sequence[bytes],
    ) -> None:
        self.store = store
        self.conn = conn
        self.pilot = pilot
        self.starts = list(starts)
        self.completions = list(completions)
        self.offer = offer
        self.max_jobs = max_jobs
        self._count = len(commands)
        self._sock: socket.socket | None = None  # the socket it was written on: its replies come there or never
        if commands:
            try:
                if conn._sock is None:
                    reconnect(conn)
                conn.send_packed_command([b"".join(commands)])  # type: ignore[no-untyped-call]
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                conn.disconnect()  # type: ignore[no-untyped-call]
                raise converted(exc, store.where, _OPERATION) from None
            self._sock = conn._sock

    @property
    def socket(self) -> socket.socket | None:
        """The socket the replies arrive on (for a selector: watch it as an object, not by its number, which
        the kernel hands to the next socket once this one is closed); None when no reply is due."""
        return self._sock

    @property
    def lost(self) -> bool:
        """Its connection was closed before its replies were read (an outage's start closes every connection,
        or a failed call on it), maybe reconnected since for a later exchange: its replies never come."""
        return self._count > 0 and self.conn._sock is not self._sock

    def ready(self) -> bool:
        """Whether a reply can be read without waiting (it may already sit in the connection's buffer); an
        exchange whose connection broke is ready too: :meth:`receive` then says the store is unreachable."""
        if self._count == 0 or self.lost:  # closed: can_read would connect anew and wait forever
            return True
        try:
            return bool(self.conn.can_read(timeout=0))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return True

    def receive(self) -> Exchange:
        """Read every reply (waiting for them if needed) and settle what must be redone alone."""
        replies: list[Any] = []
        lost = False
        if self.lost:  # closed meanwhile (an outage dropped every connection), maybe reconnected since
            raise converted(
                redis.ConnectionError("connection closed before the replies were read"), self.store.where, _OPERATION
            )
        try:
            for _ in range(self._count):
                try:
                    replies.append(self.conn.read_response())
                except redis.ResponseError as exc:
                    lost = lost or not_found(exc)
                    # Not run: the function was lost, or the community's slot moves (taskqueues.store.cluster).
                    replies.append(None if not_found(exc) or cluster.redirected(exc) else exc)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.conn.disconnect()  # type: ignore[no-untyped-call]
            raise converted(exc, self.store.where, _OPERATION) from None
        errors = [r for r in replies if isinstance(r, Exception)]
        if errors:
            raise StoreError(f"a script of a pilot's exchange failed: {errors[0]}")
        if lost:
            self.store.reload_scripts()
        return self._settle(replies)

    def _settle(self, replies: list[Any]) -> Exchange:
        store, pilot = self.store, self.pilot
        refused: dict[str, str] = {}
        released: list[str] = []
        for (job, attempt, at), reply in zip(self.starts, replies, strict=False):
            if reply is None or _text(reply[0]) == "needkeys":  # a start taking its job back needs more keys
                try:
                    store.start(job, attempt, pilot, at)
                except StaleReport as exc:
                    refused[job] = str(exc)
            elif _text(reply[0]) == "stale":
                refused[job] = _text(reply[1])
        done = replies[len(self.starts) :]
        for (job, attempt, result), reply in zip(self.completions, done, strict=False):
            if reply is None or _text(reply[0]) == "needkeys":
                try:
                    released += store.complete(job, attempt, pilot, result)
                except StaleReport as exc:
                    refused[job] = str(exc)
            elif _text(reply[0]) == "stale":
                refused[job] = _text(reply[1])
            else:
                released += [_text(x) for x in reply[1:]]
        matched: list[Job] = []
        if self.offer is not None:  # a match Redis had lost is redone alone
            matched = store.match(self.offer, self.max_jobs) if replies[-1] is None else store.matched(replies[-1])
        return Exchange(refused, released, matched)
