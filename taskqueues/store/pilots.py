"""The pilots as the store knows them: who is live, and the stop requests waiting for them (``store.pilots``).

A pilot is **live** while its heartbeat is younger than the live window, :data:`LIVE_LEASES` leases
(:attr:`Pilots.live_window`): every view that asks "which pilots are there" (eta's capacity, explain,
metrics, ``drain``, ``run``, the director) uses this one window.

A pilot is told to stop through the store, so any process can ask (the director, ``pilotfish drain``) and the
request survives until the pilot reads it. The ``stops`` hash holds at most one request per pilot:

- ``release`` (the director): the demand this pilot could serve is gone and another pilot waits for its
  room. The pilot stops only if it is idle when it reads the request (nothing running, no match on the
  way); while busy it keeps the request and looks again when it next finds nothing to match. So a
  release never kills a payload and never strands a job it has matched. The director withdraws it when
  demand for the pilot comes back.
- ``drain`` (an operator): take no new work, let the running payloads finish, then exit.
- ``shutdown`` (an operator): Celery's warm shutdown for a pilot: take no new work and give the running
  payloads back to their task queue (SIGTERM, then SIGKILL after the kill grace) at once.

An operator's request replaces a director's release, never the other way round. Storing a request publishes
on the pilot's own channel (``keys.pilot_channel``): the pilot, subscribed to it beside the wake channel,
heartbeats at once, which is also how a kill request (``cancel.lua`` publishes there too) reaches the payload
without waiting for the next heartbeat. The heartbeat reads the request anyway, so a lost message costs one
heartbeat interval, nothing more.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import ValidationError
from .guard import guarded
from .keys import Keys
from .part import Part
from .records import text as _text

__all__ = ["LIVE_LEASES", "MODES", "LivePilots", "Pilots", "StopRequest"]

#: A pilot is live while its last heartbeat is younger than this many leases.
LIVE_LEASES = 3

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


@dataclass(frozen=True)
class LivePilots:
    """The records of the pilots seen since a time, and how many pilots the pilots hash holds in all."""

    records: dict[str, dict[str, Any]]
    total: int


class Pilots(Part):
    """Live pilots and their stop requests."""

    def __init__(
        self, client: redis.Redis, keys: Keys, where: str, *, lease_seconds: float, clock: Callable[[], float]
    ) -> None:
        super().__init__(client, keys, where)
        #: Seconds within which a pilot's heartbeat makes it live (:data:`LIVE_LEASES` leases).
        self.live_window = LIVE_LEASES * lease_seconds
        self.clock = clock

    @guarded("reading the live pilots")
    def live(self, since: float | None = None) -> LivePilots:
        """The pilots with a heartbeat since ``since`` (default: within the live window), by name (sorted),
        with their records as stored; a record that is gone or is not a JSON object reads as empty."""
        k = self.keys
        since = self.clock() - self.live_window if since is None else since
        seen: Any = self.client.zrangebyscore(k.pilotseen, since, "+inf")
        live = sorted(_text(p) for p in seen)
        raws = self.client.hmget(k.pilots, live) if live else []
        records: dict[str, dict[str, Any]] = {}
        for pilot, raw in zip(live, raws, strict=True):
            try:
                rec = json.loads(raw) if raw else {}
            except ValueError:
                rec = {}
            records[pilot] = rec if isinstance(rec, dict) else {}
        return LivePilots(records, int(self.client.hlen(k.pilots)))

    @guarded("asking a pilot to stop")
    def request_stop(self, pilot: str, mode: str, reason: str, now: float | None = None) -> bool:
        """Store a stop request for ``pilot`` and nudge it; False when a request at least as strong was there
        (it stays, and the pilot is not nudged again)."""
        if mode not in MODES:
            raise ValidationError(f"stop mode must be one of {', '.join(MODES)}, got {mode!r}")
        keys = self.keys
        wanted = StopRequest(mode, reason, time.time() if now is None else now)
        with self.client.pipeline(transaction=True) as pipe:
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

    @guarded("withdrawing a release request")
    def withdraw_release(self, pilot: str) -> bool:
        """Remove ``pilot``'s release request (demand for it came back); an operator's request stays."""
        keys = self.keys
        with self.client.pipeline(transaction=True) as pipe:
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

    @guarded("reading a pilot's stop request")
    def stop_request(self, pilot: str) -> StopRequest | None:
        """``pilot``'s pending stop request, if any."""
        return StopRequest.parse(self.client.hget(self.keys.stops, pilot))

    @guarded("reading the stop requests")
    def stop_requests(self) -> dict[str, StopRequest]:
        """Every pending stop request, by pilot."""
        out = {}
        for name, raw in self.client.hgetall(self.keys.stops).items():
            parsed = StopRequest.parse(raw)
            if parsed is not None:
                out[_text(name)] = parsed
        return out

    @guarded("forgetting stop requests")
    def forget_stops(self, *pilots: str) -> None:
        """Drop the requests of pilots that acted on them or are gone."""
        if pilots:
            self.client.hdel(self.keys.stops, *pilots)
