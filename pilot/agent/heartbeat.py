"""The pilot's heartbeat, every ``heartbeat`` seconds (a third of the lease unless set), and at once when its
own channel announces a kill or stop request or when the store answers again after an outage.

Each beat re-reads the dynamic MJF keys (time left, shutdown times), renews the subscription to the wake
channel if it was lost and the guardian if it died, renews the leases of every job the pilot holds
(running, or with a report waiting for the store) and writes the pilot's record for operators, records the
payloads' peak memory and CPU time, then obeys what the store answers: a stop request, kill requests, jobs
that are no longer this pilot's (stopped unreported).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from pilot.agent.control import Control
from pilot.agent.observer import PilotLoad
from pilot.agent.payload import Stop
from pilot.agent.processes import Processes
from pilot.agent.reports import Reports
from pilot.agent.state import PilotState, seconds_text
from pilot.agent.wake import Wake
from pilot.mjf.source import FeatureReader
from taskqueues.errors import PilotfishError, StoreError, StoreUnavailable

log = logging.getLogger("pilot.agent")


class Heartbeat:
    """One pilot's heartbeat: :meth:`beat` when ``state.next_heartbeat`` is due."""

    def __init__(
        self,
        state: PilotState,
        reader: FeatureReader,
        wake: Wake,
        processes: Processes,
        reports: Reports,
        control: Control,
    ) -> None:
        self.state = state
        self.reader = reader
        self.wake = wake
        self.processes = processes
        self.reports = reports
        self.control = control

    def beat(self) -> None:
        state = self.state
        state.next_heartbeat = time.monotonic() + state.config.heartbeat
        if not self.wake.listening and self.wake.is_open:
            self.wake.listen()
        self._refresh_features()
        self.processes.revive_guardian()
        self.reports.prefetch.give_back_overdue(time.monotonic())
        running = state.slots.running
        jobs = {p.id: p.job.attempt for p in running.values()}
        jobs.update(self.reports.leased())
        jobs.update(self.reports.prefetch.leased())
        record, latency = self.outgoing()
        try:
            reply = state.store.heartbeat(state.name, jobs, record, self.processes.usage())
        except StoreUnavailable as exc:
            state.outage.failed(exc)
            if latency is not None:
                state.match_latency.give_back(latency)
        except StoreError as exc:
            log.warning("heartbeat failed (leases not renewed): %s", exc)
        else:
            state.outage.ok()
            self.control.obey_stop_request(reachable=True)
            for job, reason in reply.kills.items():
                if job in running:
                    log.info("job %s: kill requested: %s", job, reason)
                    self.processes.stop(job, Stop(reason, "fail"))
                else:
                    self.reports.prefetch.kill(job, reason)
            for job in reply.lost:
                self.reports.prefetch.lost(job)
                if job in running:
                    log.warning("job %s is no longer this pilot's (lease lost): stopping it unreported", job)
                    self.processes.stop(job, Stop("lease lost", "none"))
                self.reports.forget(job)
        assert state.info is not None
        state.notify("heartbeat", state.info, self.load())

    def _refresh_features(self) -> None:
        """Take the new dynamic MJF values (the pilot's size stays what it was at its start)."""
        state = self.state
        try:
            features = self.reader.refresh()
        except PilotfishError as exc:
            log.warning("MJF refresh failed, keeping the previous values: %s", exc)
            return
        if features == state.features:
            return
        before = state.time_left()
        state.features = features
        assert state.area is not None
        state.area.update(features)
        log.info("MJF changed: time left %s (was %s)", seconds_text(state.time_left()), seconds_text(before))
        state.dirty = True

    def record(self) -> dict[str, Any]:
        """What operators read about this pilot in the store's pilots hash."""
        state = self.state
        slots = state.slots
        ident = state.identity
        cpu, mem, tmp = slots.used()
        return {
            "name": state.name,
            "queue": state.config.queue,
            "node": ident.node,
            "batch": ident.batch,
            "batch_id": ident.batch_id,
            "pid": os.getpid(),
            "cores": slots.cores,
            "mem": slots.mem,
            "tmp": slots.tmp,
            "used_cpu": cpu,
            "used_mem": mem,
            "used_tmp": tmp,
            "running": sorted(slots.running),
            "processed": state.processed,
            "started": round(state.started, 3),
            "time_left": state.time_left(),
            "draining": not state.accepting,
        }

    def outgoing(self) -> tuple[dict[str, Any], list[float] | None]:
        """The record a heartbeat sends: :meth:`record` and the match latencies seen since the last one (its
        ``mlat``: :mod:`taskqueues.store.counters`), which are taken (given back to the histogram if it fails)."""
        record = self.record()
        latency = self.state.match_latency.take()
        if latency is not None:
            record["mlat"] = latency
        return record, latency

    def load(self) -> PilotLoad:
        state = self.state
        cpu, mem, _ = state.slots.used()
        return PilotLoad(
            used_cpu=cpu,
            used_mem=mem,
            running=tuple(sorted(state.slots.running)),
            processed=state.processed,
            time_left=state.time_left(),
            draining=not state.accepting,
        )
