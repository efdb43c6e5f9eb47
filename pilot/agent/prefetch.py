"""Prefetch: the next jobs leased before a core frees, started the moment one does.

Without it, every core stood idle between one payload's exit and the next one's start for one exchange with
the store (the completion and the match in one round trip): from the reaping of a payload to the spawn of
the next on its core, 1.1-1.3 ms (median) against 0.12-0.15 ms with it, on a two-core host at load 3
(docs/performance.md). With it, the pilot holds a few jobs matched ahead (at most :data:`HOLD` pilots' worth
of cores, memory and scratch, each job fitting the empty pilot), and a payload's exit starts the first held
job that fits at once, in the same wake-up (:meth:`Prefetch.start`); the exchange that reports the end and
refills the hold runs while the new payload does. A refill waits until :data:`REFILL` pilots' worth of cores
is free in the hold, and leases them in one match (the pilot's size caps each job: ``PilotOffer.cap``): a
one-core pilot refilled one job per payload, one match call for each job on top of its completion.

The lease rule: a pilot never leases more than its free slots will take within its lease. It prefetches
only while payloads are short (:meth:`Prefetch.wanted`): each of the last :data:`RECENT` payloads ran for at
most the horizon (a quarter of the lease), and a payload running now has run for less than that and is like
them (its run-time estimate is no longer than the horizon or than the longest estimate among them), so a core
is expected to free well within the lease of the held job. Long payloads are never prefetched for: a held job
would wait for a slot while another pilot could run it (seen: a 30 s job started after short ones, and the
other 30 s job held behind it for its whole run while an idle pilot found nothing). And once no running
payload is expected to end within the horizon any more (one estimated short ran past it), the held jobs go
back to their task queue at the next heartbeat (:meth:`Prefetch.give_back_overdue`). A held job's lease is
renewed by the heartbeat like a running one's (its state is still ``matched``); the heartbeat's "lost" drops
it, a kill request fails it unstarted, and when the pilot stops taking jobs (drain, preemption, its time up)
it gives its held jobs back at once (``fail`` with requeue, as a match answered after the pilot stopped
does); one that no longer fits the time the pilot has left (its MJF announced an end) goes back when its turn
comes. A pilot killed outright leaves them leased: their leases expire and the reaper requeues them, as it
does the jobs that were running.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from pilot.agent.payload import Payload
from pilot.agent.processes import Processes
from pilot.agent.slots import Amount
from pilot.agent.state import PilotState
from taskqueues.errors import StoreError
from taskqueues.store import Job, RunResult, time_needed

log = logging.getLogger("pilot.agent")

#: How many of the latest payloads' run times decide whether payloads are short enough to prefetch for.
RECENT = 16
#: The horizon, as a fraction of the lease: a core must be expected to free within it.
HORIZON_FRACTION = 0.25
#: How many pilots' worth the hold takes: with one, a payload shorter than the round trip that refills the
#: hold often found it empty (54-63% of the starts came from the hold for 1 ms payloads at load 3; 89-94%
#: with two). Each core then starts three held jobs at most within three horizons, three quarters of a lease.
HOLD = 3
#: How many pilots' worth of cores must be free in the hold before a prefetch refills it, all in one match:
#: with one, a one-core pilot's every payload end sent a match for one job (2.0 scripts a job with the
#: completion, against 1.56 for a two-core pilot: docs/performance.md). HOLD - REFILL pilots' worth (one)
#: stays held while the refill is on its way, as with HOLD = 2 refilled one job at a time.
REFILL = 2


class Prefetch:
    """The jobs the pilot holds matched but not started (oldest first), and when it may hold more."""

    def __init__(self, state: PilotState, processes: Processes) -> None:
        self.state = state
        self.processes = processes
        self.held: deque[Job] = deque()
        # (run time, run-time estimate) in seconds of the latest payloads
        self._recent: deque[tuple[float, float]] = deque(maxlen=RECENT)
        self._not_before = 0.0  # after a prefetch that found nothing: until a payload ends, or backoff_max

    @property
    def horizon(self) -> float:
        return self.state.config.lease * HORIZON_FRACTION

    def observe(self, wall: float, ete: float) -> None:
        """A payload estimated at ``ete`` seconds ended after running ``wall`` (the next exchange may prefetch
        again)."""
        self._recent.append((wall, ete))
        self._not_before = 0.0

    def found_nothing(self) -> None:
        """A prefetch found nothing: the next waits for a payload's end (its exchange goes anyway) or
        ``backoff_max``, and the free slots' back-off is left alone."""
        self._not_before = time.monotonic() + self.state.config.backoff_max

    def wanted(self, now_mono: float) -> bool:
        """Whether the pilot may lease jobs for slots not free yet: it takes jobs, its recent payloads were
        short and one running now is expected to end within the horizon: it has run for less than that, and
        its estimate is no longer than the horizon or than the recent payloads' (whose run times showed what
        such an estimate means here). A long job started after short ones is not expected to end soon."""
        if not self.state.accepting or now_mono < self._not_before or not self._recent:
            return False
        if max(wall for wall, _ in self._recent) > self.horizon:
            return False
        return self._a_core_frees_soon(now_mono)

    def _a_core_frees_soon(self, now_mono: float) -> bool:
        """Whether a payload running now is expected to end within the horizon: it has run for less than that,
        and its estimate is no longer than the horizon or than the recent payloads'."""
        horizon = self.horizon
        like = max(horizon, *(ete for _, ete in self._recent))
        return any(now_mono - p.start_mono <= horizon and p.job.ete <= like for p in self.state.slots.running.values())

    def give_back_overdue(self, now_mono: float) -> None:
        """No payload running now is expected to end within the horizon any more (one estimated short ran past
        it, or a long one took the last core): the held jobs would wait for its end while another pilot could
        run them, so every one goes back to its task queue now. Checked at each heartbeat, before the leases
        are renewed. (A held job never waits beside a free core that fits it: :meth:`start` runs after each
        wake-up.)"""
        if not self.held or self._a_core_frees_soon(now_mono):
            return
        reason = f"pilot {self.state.name} held it behind payloads not expected to end within {self.horizon:g} s"
        while self.held:
            self.processes.give_back(self.held.popleft(), reason, unstarted=True)

    def amount(self) -> Amount:
        """What the held jobs will take."""
        cpu = mem = tmp = 0
        for job in self.held:
            cpu, mem, tmp = cpu + job.cpu, mem + job.mem, tmp + job.tmp
        return cpu, mem, tmp

    def room(self) -> Amount | None:
        """What a prefetch may ask for (one is on its way at a time): :data:`HOLD` times the pilot's size
        less what is held, each job capped at the pilot's size (a held job must fit the empty pilot:
        ``PilotOffer.cap``); None until :data:`REFILL` pilots' worth of cores is free in the hold."""
        slots = self.state.slots
        cpu, mem, tmp = self.amount()
        if HOLD * slots.cores - cpu < REFILL * slots.cores:
            return None
        return HOLD * slots.cores - cpu, max(0, HOLD * slots.mem - mem), max(0, HOLD * slots.tmp - tmp)

    def hold(self, jobs: list[Job]) -> None:
        """Jobs a prefetch brought: held until a core frees (given back if the pilot stopped taking jobs)."""
        self.held.extend(jobs)
        if not self.state.accepting:
            self.give_back()

    def start(self) -> list[Payload]:
        """Start the held jobs, oldest first, while the first fits what is free; returns the payloads started.
        A job that does not fit even the empty pilot (the store erred) is handed to the launch, which gives
        it back."""
        state = self.state
        slots = state.slots
        started: list[Payload] = []
        while self.held:
            job = self.held[0]
            if not slots.fits(job) and (slots.running or slots.free() != (slots.cores, slots.mem, slots.tmp)):
                break
            self.held.popleft()
            left = state.time_left()
            need = time_needed(job.requirements.get("wall"), job.ete, state.store.ete_safety_factor)
            if left is not None and need > left:  # the pilot's end came nearer (MJF) while the job was held
                self.processes.give_back(
                    job, f"pilot {state.name} has {left:.0f} s left, the job needs {need} s", unstarted=True
                )
                continue
            payload = self.processes.launch(job)
            if payload is not None:
                started.append(payload)
        return started

    def give_back(self) -> None:
        """The pilot takes no more jobs: every held job goes back to its task queue now."""
        while self.held:
            job = self.held.popleft()
            self.processes.give_back(
                job, f"pilot {self.state.name} stopped taking jobs ({self.state.stop_reason})", unstarted=True
            )

    def leased(self) -> dict[str, int]:
        """The held jobs (their leases must be renewed): id -> attempt."""
        return {job.id: job.attempt for job in self.held}

    def lost(self, job_id: str) -> bool:
        """The job is no longer this pilot's (the heartbeat said so): forget it if it is held."""
        for job in self.held:
            if job.id == job_id:
                self.held.remove(job)
                log.warning("held job %s is no longer this pilot's (lease lost): dropped", job_id)
                return True
        return False

    def kill(self, job_id: str, reason: str) -> bool:
        """A kill request for a held job: it ends failed without running (the store records the request's
        reason); False when it is not held here."""
        for job in self.held:
            if job.id == job_id:
                self.held.remove(job)
                log.info("held job %s: kill requested before it started: %s", job_id, reason)
                result = RunResult(exit_code=None, reason=f"killed before it started: {reason}")
                try:
                    self.state.store.fail(job.id, job.attempt, self.state.name, result, requeue=False)
                except StoreError as exc:  # its lease expires unrenewed; the reaper applies the kill
                    log.warning("held job %s: its kill could not be reported: %s", job_id, exc)
                return True
        return False
