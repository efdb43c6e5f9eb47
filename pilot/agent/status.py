"""The pilot's $JOBSTATUS: what its running payloads hold and until when, and whether it is retiring.

Published in each turn in which a payload started or ended (or the MJF values changed, or the pilot
stopped taking jobs), at most once per ``jobstatus_interval`` (:meth:`Status.publish`). An idle pilot that
still takes jobs publishes its ends ``IDLE_HORIZON`` ahead (bounded by its own end) and republishes every
half of that: a site reading the spec's ``remaining_time`` or ``draining_waste`` from it never gets a
negative figure. Draining it costs its idle cores until it next looks, which is what ``draining_waste``
then says (at most ``allocated_CPU x IDLE_HORIZON``). The writer and its
hold after a withdrawn drain are :mod:`pilot.mjf.jobstatus`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from pilot.agent.processes import wall_requirement
from pilot.agent.state import PilotState
from pilot.mjf.formulas import denormalise
from pilot.mjf.jobstatus import JobStatusWriter, RunningPayload
from taskqueues.errors import PilotfishError

log = logging.getLogger("pilot.agent")

#: The horizon used for $JOBSTATUS when neither the job nor the pilot has any known end.
NO_END = 365 * 86400.0

#: How far ahead an idle pilot that still takes jobs publishes its ends: it republishes after half of it, so
#: its ends are never in the past while it lives, even when a turn comes late on a loaded node.
IDLE_HORIZON = 60.0


class Status:
    """The $JOBSTATUS writer of one pilot: :meth:`open` once its size is known."""

    def __init__(self, state: PilotState) -> None:
        self.state = state
        self.jobstatus: JobStatusWriter | None = None
        self._next_publish = 0.0
        self.idle_horizon = IDLE_HORIZON
        self._idle_refresh: float | None = None  # time.monotonic() by which an idle publication is renewed

    def open(self) -> None:
        state = self.state
        config = state.config
        directory = config.jobstatus_dir or (os.environ.get("JOBSTATUS") or None)
        self.jobstatus = JobStatusWriter(
            directory,
            allocated_CPU=state.slots.cores,
            pilot_start=state.started,
            workdir=config.workdir,
            priority_factor=config.priority_factor,
            revert_hold=config.jobstatus_revert_hold,
        )

    @property
    def directory(self) -> Path:
        assert self.jobstatus is not None
        return self.jobstatus.directory

    def due(self) -> bool:
        """Whether to publish now: something changed and the interval since the last publication is over.
        The end of the hold after a withdrawn drain is a change (the held values are published fresh)."""
        if self.hold_ended() or (self._idle_refresh is not None and time.monotonic() >= self._idle_refresh):
            self.state.dirty = True
        return self.state.dirty and time.monotonic() >= self._next_publish

    def deadlines(self, now: float) -> list[float]:
        """When a publication may be due (``time.monotonic()`` values)."""
        out = [self._next_publish] if self.state.dirty else []
        hold = self.jobstatus.hold_until if self.jobstatus is not None else None
        if hold is not None:
            out.append(now + hold - time.time())
        if self._idle_refresh is not None:
            out.append(self._idle_refresh)
        return out

    def publish(self) -> None:
        """Rewrite $JOBSTATUS for the payloads running now.

        Called in each turn in which a payload started or ended, but at most once per
        ``jobstatus_interval``: payloads that last longer than that are each published at their start
        and end; a burst of shorter ones is published as one state at the end of the interval (the
        values are whole seconds; rewriting nine files under a lock per millisecond payload would make
        the pilot, not the payloads, the bottleneck).
        """
        state = self.state
        assert self.jobstatus is not None and state.features is not None and state.area is not None
        state.dirty = False
        self._next_publish = time.monotonic() + state.config.jobstatus_interval
        pilot_end = state.area.pilot_end(state.features)
        factor = state.features.cpufactor
        entries = []
        for payload in state.slots.running.values():
            start = payload.start_wall
            wall = wall_requirement(payload.job)
            ends = [e for e in (pilot_end, start + denormalise(wall, factor) if wall else None) if e is not None]
            max_end = min(ends) if ends else start + NO_END
            ete = payload.job.ete
            expected = start + denormalise(ete, factor) if ete > 0 else max_end
            entries.append(RunningPayload(cores=payload.job.cpu, start=start, expected_end=expected, max_end=max_end))
        self.jobstatus.can_postpone_last_job = self.can_postpone([e.expected_end for e in entries])
        idle_end = None
        self._idle_refresh = None
        if not entries and state.accepting:
            now = time.time()
            idle_end = (
                now + self.idle_horizon if pilot_end is None else min(now + self.idle_horizon, max(now, pilot_end))
            )
            self._idle_refresh = time.monotonic() + self.idle_horizon / 2
        try:
            self.jobstatus.publish(entries, idle_end=idle_end, latest_start=state.last_start)
        except PilotfishError as exc:
            log.warning("$JOBSTATUS not updated: %s", exc)

    def hold_ended(self) -> bool:
        """True once the hold of $JOBSTATUS after a withdrawn drain is over (its values are then stale)."""
        hold = self.jobstatus.hold_until if self.jobstatus is not None else None
        return hold is not None and time.time() >= hold

    def can_postpone(self, expected_ends: list[float]) -> bool:
        """$JOBSTATUS ``can_postpone_last_job``: False once the pilot is retiring (spec: "ready to be
        retired, and does not expect more user jobs to be fetched").

        That is the case when it takes no more jobs, and while the site announces a shutdown time
        (``shutdowntime`` or ``shutdowntime_job``) that its running payloads cannot all finish before: it is
        draining, nothing it starts may end after that time, and the payloads it has already run into it.
        A shutdown time far enough away for every running payload leaves it True (the pilot keeps filling
        its cores with jobs that end before it); so does a shutdown time the site withdraws.
        """
        state = self.state
        if not state.accepting:
            return False
        assert state.features is not None
        shutdowns = [
            t for t in (state.features.machine.shutdowntime, state.features.job.shutdowntime_job) if t is not None
        ]
        if not shutdowns:
            return True
        deadline = min(shutdowns) - state.config.stop_margin
        return all(end < deadline for end in expected_ends)
