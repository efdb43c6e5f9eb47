"""A Redis lock for periodic tasks: at most one run at a time, whoever starts it (two beats, many workers).

``SET key token NX PX ttl`` takes the lock; only the holder of the token may release (``unlock.lua``:
compare-and-delete) or extend it (``renew.lua``: compare-and-expire). The time to live bounds how long a
crashed holder blocks the others. A run that may take longer than the ttl renews; a holder that lost
its lock (expired while it was paused) learns it from :meth:`Lock.renew` and from :meth:`Lock.release`
returning False, and never deletes somebody else's lock.

This is a *skip* lock, not a queue: :meth:`taskqueues.store.control.Control.locked` yields False when
someone else holds it, and the periodic task simply skips this run (the next beat will come).
"""

from __future__ import annotations

import secrets

import redis

from ..errors import StoreError
from . import functions
from .guard import client_url, guard

__all__ = ["Lock", "LockError"]


class LockError(StoreError):
    """A lock was asked for with a bad time to live, or used without being held."""


def _ms(ttl: float) -> int:
    if not ttl > 0:
        raise LockError(f"a lock's time to live must be > 0 seconds, got {ttl!r}")
    return max(1, round(ttl * 1000))


class Lock:
    """One attempt at holding ``key``: a fresh random token, so no two holders ever share one."""

    def __init__(self, client: redis.Redis, key: str, ttl: float) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = _ms(ttl)
        self.token = secrets.token_hex(16)
        self.held = False
        self._unlock = functions.Function(client, "unlock")
        self._renew = functions.Function(client, "renew")

    def acquire(self) -> bool:
        """Take the lock if it is free; False (at once, no waiting) if someone holds it."""
        with guard(client_url(self.client), f"taking lock {self.key}"):
            self.held = bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))
        return self.held

    def renew(self, ttl: float | None = None) -> bool:
        """Give the lock ``ttl`` (default: the original ttl) seconds more; False if it was lost meanwhile."""
        if not self.held:
            raise LockError(f"renew of lock {self.key}, which this holder does not hold")
        ms = self.ttl_ms if ttl is None else _ms(ttl)
        self.held = bool(self._call(self._renew, [self.token, ms]))
        return self.held

    def release(self) -> bool:
        """Release the lock if it is still ours; False if it expired (and maybe someone else holds it now)."""
        if not self.held:
            return False
        self.held = False
        return bool(self._call(self._unlock, [self.token]))

    def _call(self, script: functions.Function, args: list[str | int]) -> object:
        with guard(client_url(self.client), f"using lock {self.key}"):
            return script(keys=[self.key], args=args)
