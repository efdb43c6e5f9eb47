"""A script call whose constant part is packed once, on a connection held for it: the match hot path.

redis-py encodes every argument of every call; a pilot's match sends the same task-queue keys each time,
so they are packed into RESP bytes once per change and only the few varying arguments are packed per
call. And redis-py checks a connection out of its pool and back in around every command, which costs
more than the round trip of a trivial script (about 20 us of 50 us measured with redis-py 8 here), so
the hot path keeps one connection per thread and process (:class:`HotLine`). Replies and errors still go
through redis-py's own parser.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import AbstractConnection

from . import cluster
from .connection import PerPool
from .functions import Function, not_found


def _bulk(value: Any) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_script(function: Function, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """One FCALL (FCALL_RO) of ``function`` in RESP."""
    parts = [function.command, function.function, len(keys), *keys, *args]
    return b"*%d\r\n" % len(parts) + b"".join(_bulk(p) for p in parts)


class HotLine:
    """One connection of ``client``'s pool per thread and process, taken once and kept.

    Shared by every caller on the same pool (:meth:`of`), so the connections kept stay one per thread
    however many stores use the client. A forked child takes its own (the pool resets itself after a
    fork); a connection that failed is disconnected and reconnects on its next use.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = weakref.ref(pool)  # the line lives in a mapping keyed by its pool: no strong cycle
        self._local = threading.local()

    @classmethod
    def of(cls, client: redis.Redis) -> HotLine:
        return _LINES.of(client)

    def connection(self) -> AbstractConnection:
        local = self._local
        conn: AbstractConnection | None = getattr(local, "conn", None)
        if conn is None or local.pid != os.getpid():
            pool = self._pool()
            if pool is None:
                raise redis.ConnectionError("the connection pool of this store is gone")
            conn = pool.get_connection()
            local.conn, local.pid = conn, os.getpid()
        elif conn._sock is None:
            reconnect(conn)
        return conn


_LINES: PerPool[HotLine] = PerPool(lambda client: HotLine(client.connection_pool))


def reconnect(conn: AbstractConnection) -> None:
    """Connect a connection held outside its pool again, through its own ``connect``: redis-py reconnects
    one implicitly to the address it had, while a Sentinel-managed one must ask the sentinels for the primary
    (the old one may be dead, or a replica now)."""
    conn.connect()  # type: ignore[no-untyped-call]


class PackedCall:
    """FCALL of ``function`` with a fixed list of keys; rebuild it when the keys change."""

    def __init__(self, line: HotLine, function: Function, keys: Sequence[str], n_args: int) -> None:
        self.line = line
        self.function = function
        self.keys = list(keys)
        self._head = (
            b"*%d\r\n" % (3 + len(keys) + n_args)
            + _bulk(function.command)
            + _bulk(function.function)
            + _bulk(len(keys))
        )
        self._head += b"".join(_bulk(k) for k in keys)
        self._n_args = n_args

    def pack(self, args: Sequence[Any]) -> bytes:
        """The whole command in RESP, to send alone or with others in one round trip."""
        if len(args) != self._n_args:
            raise ValueError(f"expected {self._n_args} arguments, got {len(args)}")
        return self._head + b"".join(_bulk(a) for a in args)

    def __call__(self, args: Sequence[Any]) -> Any:
        packed = self.pack(args)
        self.function.library.ensure(self.function.client)
        client = self.function.client
        if cluster.is_slot_client(client):  # sent again while the community's slot moves
            return cluster.patiently(lambda: self._send(packed), cluster.slot_of(client))
        return self._send(packed)

    def _send(self, packed: bytes) -> Any:
        conn = self.line.connection()
        try:
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
            try:
                return conn.read_response()
            except redis.ResponseError as exc:
                if not not_found(exc):
                    raise
            self.function.reload()
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
            return conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
