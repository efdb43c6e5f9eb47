"""What the parts of one pilot share.

The pilot (:mod:`pilot.agent.pilot`) is made of parts, each a module of one concept: the exchange with the
store (:mod:`~pilot.agent.reports`), the payload processes (:mod:`~pilot.agent.processes`), the wake-ups
(:mod:`~pilot.agent.wake`), what the outside asks (:mod:`~pilot.agent.control`), the heartbeat
(:mod:`~pilot.agent.heartbeat`) and $JOBSTATUS (:mod:`~pilot.agent.status`). Each keeps its own state to
itself and acts on another through that part's methods; what several of them read or change lives here, in
one :class:`PilotState`: who the pilot is and what it talks to, its slots, its features and payload area,
whether it still takes jobs, and when it next matches, heartbeats and publishes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pilot.agent.config import Identity, PilotConfig
from pilot.agent.observer import Observer, PilotInfo
from pilot.agent.slots import Slots
from pilot.mjf.features import Features
from pilot.mjf.payload import PayloadArea
from taskqueues.store import LatencyHistogram, Outage, Store

log = logging.getLogger("pilot.agent")


@dataclass
class PilotState:
    """The pilot's shared facts. ``dirty``: $JOBSTATUS must be published again (a payload started or ended,
    the MJF values changed, the pilot stopped taking jobs). ``next_match``, ``next_heartbeat`` and
    ``idle_since`` are ``time.monotonic()`` values; ``backoff`` is the wait after the next empty match."""

    config: PilotConfig
    identity: Identity
    store: Store
    observer: Observer
    outage: Outage
    started: float
    slots: Slots = field(default_factory=Slots)
    features: Features | None = None
    area: PayloadArea | None = None
    info: PilotInfo | None = None
    accepting: bool = True
    stop_reason: str = ""
    processed: int = 0
    launched: int = 0
    #: When the latest payload started (``time.time()``, its own reading): $JOBSTATUS's ``last_job_start``
    #: must count a payload that ended before the next publication too (publications are rate-limited).
    last_start: float = 0.0
    dirty: bool = True
    next_match: float = 0.0
    backoff: float = 0.0
    next_heartbeat: float = 0.0
    idle_since: float = field(default_factory=time.monotonic)
    #: How long its match calls took (sent to reply read), until the next heartbeat sends it to the store.
    match_latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    def __post_init__(self) -> None:
        self.backoff = self.config.backoff_min

    @property
    def name(self) -> str:
        return self.identity.name

    def notify(self, method: str, *args: Any) -> None:
        """Call an observer method; an observer failure is logged and never reaches the payloads."""
        call: Callable[..., None] = getattr(self.observer, method)
        try:
            call(*args)
        except Exception:
            log.exception("observer.%s failed", method)

    def stop_accepting(self, reason: str) -> None:
        if self.accepting:
            self.accepting = False
            self.stop_reason = reason
            self.dirty = True  # can_postpone_last_job turns False
            log.info("pilot %s takes no more jobs: %s", self.name, reason)

    def match_now(self) -> None:
        """Something may fit now (a payload ended, work arrived, a match brought jobs): match at once."""
        self.next_match = 0.0
        self.backoff = self.config.backoff_min

    def back_off(self) -> None:
        """Nothing matched: try again after the back-off, which doubles up to ``backoff_max``."""
        self.next_match = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, self.config.backoff_max)

    def time_left(self) -> float | None:
        """Seconds left in reference (normalised) time, what the match compares job estimates with."""
        assert self.features is not None
        return self.features.time_left_normalised(time.time(), self.config.stop_margin)

    def time_left_real(self) -> float | None:
        assert self.features is not None
        return self.features.time_left(time.time(), self.config.stop_margin)


def seconds_text(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.0f} s"
