"""Each process's own liveness entry: what ``pilotfish health`` (the Kubernetes liveness probes) reads.

A long-running component writes ``<component>@<host>`` → now into the zset ``alive:<component>`` from the
loop that does its work: the Celery worker from its event-loop heartbeat, beat from its scheduler tick, the
director from its cycle. The probe runs in the same pod, so it has the same host name (a pod's host name is
its name), and reads the score of its own member only. So a hung replica fails its probe while its siblings
beat, no process can keep another one alive, and the writer's and the reader's clocks are the same clock.
Pilots need no entry here: their heartbeat already records them in ``pilotseen`` under their own name.

Pod names change at every rollout, so each write also drops the entries nobody refreshed for
:data:`KEEP` seconds (those of pods that are gone).
"""

from __future__ import annotations

import socket

#: Seconds an entry nobody refreshes is kept (far above any probe's max age).
KEEP = 3600.0


def member(component: str, host: str | None = None) -> str:
    """The entry of ``component`` on ``host`` (default: this host)."""
    return f"{component}@{host or socket.gethostname()}"
