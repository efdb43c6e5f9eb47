"""Stop requests for one pilot, and the nudge that makes it act on them (and on kill requests) at once.

A pilot is told to stop through the store, so any process can ask (the director, ``pilotfish drain``) and
the request survives until the pilot reads it. The ``stops`` hash holds at most one request per pilot:

- ``release`` (the director): the demand this pilot could serve is gone and another pilot waits for its
  room. The pilot stops only if it is idle when it reads the request (nothing running, no match on the
  way); while busy it keeps the request and looks again when it next finds nothing to match. So a
  release never kills a payload and never strands a job it has matched. The director withdraws it when
  demand for the pilot comes back.
- ``drain`` (an operator): take no new work, let the running payloads finish, then exit.
- ``shutdown`` (an operator): Celery's warm shutdown for a pilot: take no new work and give the running
  payloads back to their task queue (SIGTERM, then SIGKILL after the kill grace) at once.

An operator's request replaces a director's release, never the other way round. Storing a request
publishes on the pilot's own channel (``keys.pilot_channel``): the pilot, subscribed to it beside the
wake channel, heartbeats at once, which is also how a kill request (``cancel.lua`` publishes there too)
reaches the payload without waiting for the next heartbeat. The heartbeat reads the request anyway,
so a lost message costs one heartbeat interval, nothing more.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import ValidationError
from .keys import Keys

#: Stop modes, weakest first: a stronger request replaces a weaker one.
MODES = ("release", "drain", "shutdown")


@dataclass(frozen=True)
class StopRequest:
    """One pilot's pending stop request."""

    mode: str
    reason: str
    at: float

    def to_json(self) -> str:
        return json.dumps({"mode": self.mode, "reason": self.reason, "at": self.at})

    @classmethod
    def parse(cls, raw: Any) -> StopRequest | None:
        """The request stored as ``raw``; None for something unreadable (treated as no request)."""
        try:
            data = json.loads(raw)
            mode, reason, at = str(data["mode"]), str(data.get("reason", "")), float(data.get("at", 0.0))
        except (ValueError, TypeError, KeyError):
            return None
        return cls(mode, reason, at) if mode in MODES else None


def request(client: redis.Redis, keys: Keys, pilot: str, mode: str, reason: str, now: float | None = None) -> bool:
    """Store a stop request for ``pilot`` and nudge it; False when a request at least as strong was there
    (it stays, and the pilot is not nudged again)."""
    if mode not in MODES:
        raise ValidationError(f"stop mode must be one of {', '.join(MODES)}, got {mode!r}")
    wanted = StopRequest(mode, reason, time.time() if now is None else now)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys.stops)  # type: ignore[no-untyped-call]
                held = StopRequest.parse(pipe.hget(keys.stops, pilot))
                if held is not None and MODES.index(held.mode) >= MODES.index(mode):
                    pipe.unwatch()
                    return False
                pipe.multi()
                pipe.hset(keys.stops, pilot, wanted.to_json())
                pipe.publish(keys.pilot_channel(pilot), "1")
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def withdraw_release(client: redis.Redis, keys: Keys, pilot: str) -> bool:
    """Remove ``pilot``'s release request (demand for it came back); an operator's request stays."""
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys.stops)  # type: ignore[no-untyped-call]
                held = StopRequest.parse(pipe.hget(keys.stops, pilot))
                if held is None or held.mode != "release":
                    pipe.unwatch()
                    return False
                pipe.multi()
                pipe.hdel(keys.stops, pilot)
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def read(client: redis.Redis, keys: Keys, pilot: str) -> StopRequest | None:
    """``pilot``'s pending stop request, if any."""
    return StopRequest.parse(client.hget(keys.stops, pilot))


def pending(client: redis.Redis, keys: Keys) -> dict[str, StopRequest]:
    """Every pending stop request, by pilot."""
    out = {}
    for name, raw in client.hgetall(keys.stops).items():
        parsed = StopRequest.parse(raw)
        if parsed is not None:
            out[name.decode() if isinstance(name, bytes) else str(name)] = parsed
    return out


def forget(client: redis.Redis, keys: Keys, *pilots: str) -> None:
    """Drop the requests of pilots that acted on them or are gone."""
    if pilots:
        client.hdel(keys.stops, *pilots)
