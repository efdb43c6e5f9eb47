"""Connections to the store that are not one script or one read: the client, pings, subscriptions, and a
connection of one's own.

A pilot listens on the wake channel and its own channel (``pilot.agent.wake``) and sends its exchanges on a
connection it keeps (``pilot.agent.reports``); the control plane's releaser listens on the release channel
(``matcher.release_listener``); commands ping the server. They do it through this module, so the Redis client
library is used in the store package only.
"""

from __future__ import annotations

import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import redis
from redis.connection import Connection

from ..errors import StoreUnavailable
from . import cluster, sentinel
from .guard import client_url, guard, guarded

#: The client of one server (what :class:`~taskqueues.store.Store` is built on).
Client = redis.Redis

#: The errors that mean the connection broke or timed out (the store may be back later).
CONNECTION_LOST: tuple[type[redis.ConnectionError], type[redis.TimeoutError]] = (
    redis.ConnectionError,
    redis.TimeoutError,
)

__all__ = [
    "CONNECTION_LOST",
    "Client",
    "Connection",
    "PerPool",
    "Subscription",
    "broken",
    "connect",
    "follow",
    "give_back",
    "own_connection",
    "ping",
]


T = TypeVar("T")


class PerPool(Generic[T]):
    """One value per connection pool, made by ``make`` from the first client asked about that pool, and gone
    with the pool: what every store on one client shares (the held hot-path connections, the loaded library)."""

    def __init__(self, make: Callable[[Client], T]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, client: Client) -> T:
        pool = client.connection_pool
        with self._lock:
            value = self._made.get(pool)
            if value is None:
                value = self._made[pool] = self._make(client)
            return value


def connect(url: str, *, master: str | None = None, community: str | None = None) -> Client:
    """A client of the server at ``url`` (it connects when first used); a Sentinel URL gives a client of the
    primary named ``master`` (:mod:`taskqueues.store.sentinel`), found again after a failover; a Cluster URL
    one of the primary owning the slot of ``community`` (its key base: :mod:`taskqueues.store.cluster`),
    followed when the slot moves."""
    if cluster.is_cluster(url):
        return cluster.client(url, community)
    return sentinel.client(url, master=master)


def ping(client: Client) -> None:
    """Round trip to the server; raises what the client raises when it cannot be reached."""
    client.ping()


def broken(why: str) -> Exception:
    """The error a listener raises when its connection was closed under it (one of :data:`CONNECTION_LOST`)."""
    return redis.ConnectionError(why)


def own_connection(client: Client) -> Connection:
    """A connection taken out of the client's pool for one user's ordered traffic (give it back with
    :func:`give_back`)."""
    conn: Connection = client.connection_pool.get_connection()
    cluster.hold(conn)
    return conn


def follow(conn: Connection) -> None:
    """Before sending on a connection of one's own with no reply due: on a Redis Cluster, move it to the
    community's primary if the slot moved (until then its scripts answer ``MOVED`` and are redone alone)."""
    cluster.follow(conn)


def give_back(client: Client, conn: Connection) -> None:
    """Close a connection taken with :func:`own_connection` (replies may still be due on it) and return it."""
    conn.disconnect()  # type: ignore[no-untyped-call]
    client.connection_pool.release(conn)


class Subscription:
    """A subscription to channels of the store, on a connection of its own (``store.subscribe()``). Its errors
    are the guard's: a broken connection is a :class:`~taskqueues.errors.StoreUnavailable`."""

    def __init__(self, client: Client, *, ignore_subscribe_messages: bool = False) -> None:
        self.where = client_url(client)
        self._pubsub: Any = client.pubsub(  # type: ignore[no-untyped-call]
            ignore_subscribe_messages=ignore_subscribe_messages
        )

    @guarded("subscribing to a channel")
    def subscribe(self, channel: str) -> None:
        self._pubsub.subscribe(channel)

    @guarded("leaving a channel")
    def unsubscribe(self, channel: str) -> None:
        """Stop listening on ``channel`` (sent without waiting for the server's notice)."""
        self._pubsub.unsubscribe(channel)

    def message(self, timeout: float) -> dict[str, Any] | None:
        """The next message or subscription notice, waiting at most ``timeout`` seconds; None if none came."""
        with guard(self.where, "listening on a channel"):
            try:
                message: dict[str, Any] | None = self._pubsub.get_message(timeout=timeout)
            except (OSError, ValueError) as exc:
                # Its connection was closed under it: another thread dropped every connection at an outage's start.
                raise StoreUnavailable(f"the subscription to Redis at {self.where} was closed ({exc})") from None
        return message

    def drain(self) -> list[dict[str, Any]]:
        """Every message that has arrived, without waiting; subscription notices read and left out (where
        :meth:`message` answers None for an ignored notice, a message behind it in the buffer would stay
        unread while the socket shows nothing more to read)."""
        messages: list[dict[str, Any]] = []
        with guard(self.where, "listening on a channel"):
            try:
                while (response := self._pubsub.parse_response(block=False, timeout=0)) is not None:
                    message = self._pubsub.handle_message(response, ignore_subscribe_messages=True)
                    if message is not None:
                        messages.append(message)
            except (OSError, ValueError) as exc:
                raise StoreUnavailable(f"the subscription to Redis at {self.where} was closed ({exc})") from None
        return messages

    def socket(self) -> socket.socket | None:
        """The socket messages arrive on (for a selector), None before the first subscription."""
        conn = self._pubsub.connection
        return None if conn is None else conn._sock

    def close(self) -> None:
        self._pubsub.close()
