"""Stop requests for one pilot, as stored: what :class:`taskqueues.store.pilots.Pilots` writes and reads.

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
from dataclasses import dataclass
from typing import Any

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
