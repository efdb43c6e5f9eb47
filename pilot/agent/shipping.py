"""The pilot ships its payloads' output to the store: what is new while they run, the rest when they end.

While a payload runs, the new bytes of its stdout and stderr tails go to the job's log hash at most once per
``log_interval`` (``pilotfish logs --follow`` reads them there); when it ends, however it ends (success,
failure, kill, wall limit, given back), the rest goes before its end is reported, so whoever sees the job
end finds its output. Never more than ``output_cap`` bytes per stream and shipment: a payload that prints
gigabytes costs the store one capped tail per stream (``taskqueues.payload_logs``). A shipment the store
cannot take is dropped with a warning (the files stay in the pilot's log directory): output never holds up
a payload's report.
"""

from __future__ import annotations

import logging
import os
import time

from pilot.agent.payload import Payload
from pilot.agent.state import PilotState
from taskqueues.errors import StoreError

log = logging.getLogger("pilot.agent")


class Shipping:
    """When and what of the payloads' output goes to the store."""

    def __init__(self, state: PilotState) -> None:
        self.state = state
        self.next_at = 0.0  # time.monotonic() of the next live shipment

    def _unshipped(self) -> bool:
        return any(t.total > t.shipped for p in self.state.slots.running.values() for t in p.tails.values())

    def due(self, now: float) -> bool:
        return now >= self.next_at and self._unshipped()

    def deadlines(self, now: float) -> list[float]:
        """When the loop must wake to ship live output (nothing while nothing new was printed)."""
        return [max(now, self.next_at)] if self._unshipped() else []

    def live(self) -> None:
        """Ship what is new of every running payload's output."""
        self.next_at = time.monotonic() + self.state.config.log_interval
        for payload in list(self.state.slots.running.values()):
            self.ship(payload, live=True)

    def ship(self, payload: Payload, *, live: bool) -> None:
        """Ship ``payload``'s new output; ``live`` False for its last shipment (it ended)."""
        tails = payload.tails
        chunks = {}
        for stream, tail in tails.items():
            new = tail.total - tail.shipped
            if new > 0:
                data = tail.data
                chunks[stream] = (data[len(data) - min(new, len(data)) :], tail.total)
        if not chunks and (live or not any(t.shipped for t in tails.values())):
            return  # nothing new; and a payload that never printed has no log to close
        state = self.state
        config = state.config
        try:
            refused = state.store.logs.ship(
                payload.id,
                payload.job.attempt,
                state.name,
                cap=config.output_cap,
                host=state.identity.node,
                directory=os.path.abspath(config.logs),
                live=live,
                chunks=chunks,
            )
        except StoreError as exc:
            log.warning(
                "job %s: its output was not shipped to the store (%s); it is in %s", payload.id, exc, config.logs
            )
            refused = None
        if refused is not None:
            log.warning("job %s: its output was refused by the store: %s", payload.id, refused)
        for tail in tails.values():
            tail.shipped = tail.total
