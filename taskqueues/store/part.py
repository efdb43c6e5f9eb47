"""The base of the store's rooms: an object built from the facade's client, keys and address.

Every operation of the store that is not one of :class:`taskqueues.store.Store`'s own (jobs, leases, the
match) lives in a room reached from the facade by one property (``store.shares``, ``store.pilots``…). A room
holds the facade's client and keys and the address its errors name; each of its methods that talks to Redis
is :func:`taskqueues.store.guard.guarded`, so whatever leaves it is a :class:`taskqueues.errors.PilotfishError`.
A new operation goes in the room of its concept, or in a new room: a module under ``taskqueues/store/``
with a class deriving from :class:`Part`, and one property on the facade (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import redis

from .guard import client_url
from .keys import Keys
from .records import Job

__all__ = ["Part", "Scripted"]


class Part:
    """One room of the store: the facade's ``client`` and ``keys``, and ``where`` for the guard's messages."""

    def __init__(self, client: redis.Redis, keys: Keys, where: str | None = None) -> None:
        self.client = client
        self.keys = keys
        #: Where the store lives, as errors name it (no password).
        self.where = client_url(client) if where is None else where


class Scripted(Protocol):
    """What a room that runs the store's scripts uses of the facade (:class:`taskqueues.store.Store` is one):
    its script runner, which declares the keys a script asks for, and the keys every mover of members keeps."""

    client: redis.Redis
    keys: Keys
    where: str
    clock: Callable[[], float]
    floors: list[str]

    def call_script(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[Any],
        extra: Iterable[str] = (),
        client: redis.Redis | None = None,
    ) -> list[Any]: ...

    def pool_keys(self, tq_ids: Iterable[str]) -> list[str]: ...

    def jobs(self, ids: Sequence[str]) -> list[Job]: ...
