"""The base of the store's rooms: an object built from the facade's client, keys and address.

Every operation of the store that is not one of :class:`taskqueues.store.Store`'s own (jobs, leases, the
match) lives in a room reached from the facade by one property (``store.shares``, ``store.pilots``…). A room
holds the facade's client and keys and the address its errors name; each of its methods that talks to Redis
is :func:`taskqueues.store.guard.guarded`, so whatever leaves it is a :class:`taskqueues.errors.PilotfishError`.
A new operation goes in the room of its concept, or in a new room: a module under ``taskqueues/store/``
with a class deriving from :class:`Part`, and one property on the facade (CONTRIBUTING.md).
"""

from __future__ import annotations

import redis

from .guard import client_url
from .keys import Keys

__all__ = ["Part"]


class Part:
    """One room of the store: the facade's ``client`` and ``keys``, and ``where`` for the guard's messages."""

    def __init__(self, client: redis.Redis, keys: Keys, where: str | None = None) -> None:
        self.client = client
        self.keys = keys
        #: Where the store lives, as errors name it (no password).
        self.where = client_url(client) if where is None else where
