"""What a running pilot tells the outside world, and the commands it takes from it.

The pilot's fill loop calls an :class:`Observer` at each event of its life; ``pilot.celery_events``
implements one that speaks Celery's event and remote-control protocols, so Flower shows each pilot as
a worker and each payload as a task, and can kill a payload or shut a pilot down. Observers must not
raise (a monitoring outage never stops payloads) and must return quickly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from taskqueues.store import Job, RunResult


@dataclass(frozen=True)
class PilotInfo:
    """Who the pilot is: ``name`` is unique (batch job id and node), e.g. ``slurm-1234@node07``."""

    name: str
    queue: str
    vo: str
    cores: int
    mem: int
    tmp: int
    started: float
    batch: str = "local"
    batch_id: str = ""
    node: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PilotLoad:
    """A heartbeat's snapshot: what is busy, what has been done."""

    used_cpu: int
    used_mem: int
    running: tuple[str, ...]
    processed: int
    time_left: float | None
    draining: bool


@dataclass(frozen=True)
class Command:
    """An operator's request: ``kill`` a payload (by job id), ``shutdown`` the pilot (its running payloads
    go back to their task queue) or ``drain`` it (take nothing new, let the running payloads finish)."""

    kind: Literal["kill", "shutdown", "drain"]
    job: str = ""
    reason: str = ""


class Observer(Protocol):
    def pilot_started(self, info: PilotInfo) -> None: ...
    def heartbeat(self, info: PilotInfo, load: PilotLoad) -> None: ...
    def payload_started(self, info: PilotInfo, job: Job) -> None: ...
    def payload_ended(self, info: PilotInfo, job: Job, result: RunResult, state: str) -> None: ...
    def pilot_stopped(self, info: PilotInfo, reason: str) -> None: ...
    def commands(self) -> list[Command]:
        """Commands received since the last call (non-blocking)."""
        ...

    def close(self) -> None: ...


class NullObserver:
    """The observer of a pilot nobody watches."""

    def pilot_started(self, info: PilotInfo) -> None:
        pass

    def heartbeat(self, info: PilotInfo, load: PilotLoad) -> None:
        pass

    def payload_started(self, info: PilotInfo, job: Job) -> None:
        pass

    def payload_ended(self, info: PilotInfo, job: Job, result: RunResult, state: str) -> None:
        pass

    def pilot_stopped(self, info: PilotInfo, reason: str) -> None:
        pass

    def commands(self) -> list[Command]:
        return []

    def close(self) -> None:
        pass
