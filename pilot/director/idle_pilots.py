"""Releasing idle pilots: the Seven Bridges rule "release empty instances", for pilots in batch systems.

An idle pilot lives until its idle timeout (a minute by default). That is cheap while nothing else wants
its room, and a stall when another of our pilots waits for that room in the same batch system: three
idle 1-core pilots kept two 8-core pilots pending on an 8-core node for a minute. So each cycle the
director looks, per backend (one batch system, or one local host), at the running pilots that no waiting
job fits (by what their last heartbeat says is free, their time left and the jobs' shape hints): when a
pilot of ours waits in that backend, each of them is asked to release itself. The request is withdrawn
when a waiting job fits the pilot again, not when the waiting pilot starts: a pilot asked to go has no
work left, and keeping it would only make the next wait longer.

The request goes through the store (``store.pilots``), not through the batch system: a pilot stops
on it only when it is idle (nothing running, no match on the way), so a release never kills a payload and
never strands a job a pilot has just matched. Cancelling the batch job instead would race with the
pilot's next match and kill what it had started. A pilot that is busy when asked (its heartbeat was
older than its work) keeps the request and stops the next time it finds nothing to match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from taskqueues.store import Pilots


@dataclass
class Room:
    """One backend's pilots this cycle: the running ones no waiting job fits (name -> queue), the running
    ones some waiting job fits, and how many of our pilots wait there for room."""

    idle: dict[str, str] = field(default_factory=dict)
    serving: set[str] = field(default_factory=set)
    waiting: int = 0
    #: Running pilots whose time left is shorter than every waiting job's wall of their queue (name ->
    #: queue): they can never take one of those jobs, and idling out would keep their room (the queue's
    #: ``max_running``, the host) for their idle timeout; asked to release whatever waits.
    expired: dict[str, str] = field(default_factory=dict)


def release_idle(pilots: Pilots, rooms: Iterable[Room], live: set[str]) -> list[str]:
    """Ask idle pilots to release themselves where another pilot waits; withdraw the requests that no
    longer hold; forget the requests of pilots that are gone. Returns the pilots newly asked."""
    pending = pilots.stop_requests()
    asked: list[str] = []
    for room in rooms:
        for name, queue in room.expired.items():
            reason = f"released by the director: too little time left for any waiting job of {queue}"
            if pilots.request_stop(name, "release", reason):
                asked.append(name)
        for name, queue in room.idle.items():
            if name in room.expired:
                continue
            if room.waiting:
                reason = (
                    f"released by the director: no waiting job of {queue} fits it, and {room.waiting} "
                    f"pilot(s) wait for room in its batch system"
                )
                if pilots.request_stop(name, "release", reason):
                    asked.append(name)
        for name in room.serving & set(pending):
            pilots.withdraw_release(name)
    pilots.forget_stops(*(name for name in pending if name not in live))
    return asked
