"""The pilot's exchange with the store: reports of starts and ends, and matches for what is free.

**The fill** is one exchange with the store (:meth:`Store.send_exchange`) that carries the starts and
successful ends not yet reported and the match for the freed resources, whose matched jobs start when its
reply arrives. A payload's start is reported once it has run :data:`START_REPORT_DELAY`, or inside its
completion if it ends first; a successful end goes with the next match or at the turn's end, or, while the
pilot starts held jobs (:mod:`~pilot.agent.prefetch`: the next end's refill is near), with the next match
within :data:`SUCCESS_REPORT_DELAY`; a failure is reported at once, alone. For short payloads the store
hears of a payload's start and end and answers the next match in one round trip, without the pilot waiting
for it (:meth:`Reports.send`, :meth:`Reports.received`): the
gap between one payload's exit and the next one's start — the pilot's overhead on every core — is that
round trip and a spawn. When nothing fits the pilot backs off (``backoff_min`` doubling to
``backoff_max``) and tries again at once when a payload ends.

Every report carries the attempt, so a job taken from this pilot (lease expired, killed) answers
:class:`~taskqueues.errors.StaleReport` and the pilot moves on. A store outage is ridden out: reports
wait (:class:`PendingReport`) and matches back off, while the payloads keep running. A waiting report is
retried, at once when the store answers again, for as long as the pilot lives: the store alone decides,
atomically in ``complete``/``fail``, whether its attempt may still be recorded (a lease that expired during
the outage but was not requeued yet still may; the heartbeat renews it meanwhile), and a report is dropped
only when the store says the attempt was superseded (:class:`StaleReport`, or the heartbeat's "lost"). Giving
up on a clock instead let the reaper requeue a job that had run to its end, and it ran twice. At the pilot's
end (:meth:`Reports.flush`) the reports still waiting get up to one lease for the store to come back.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field

from pilot.agent.payload import Payload, Report, Stop
from pilot.agent.prefetch import Prefetch
from pilot.agent.processes import Processes
from pilot.agent.slots import Amount
from pilot.agent.state import PilotState
from pilot.agent.wake import Wake
from taskqueues.errors import StaleReport, StoreError, StoreUnavailable
from taskqueues.store import Connection, PendingExchange, PilotOffer, RunResult

log = logging.getLogger("pilot.agent")

#: Seconds a payload runs before its start is reported; a payload that ends sooner reports its start inside
#: its completion (one script less per short payload).
START_REPORT_DELAY = 0.05
#: Seconds a success may wait, while the pilot starts held jobs, for the exchange of the hold's next refill
#: (which comes with a later payload's end: pilot.agent.prefetch.REFILL) before it goes alone: a one-core
#: pilot's every end was an exchange of its own, one completion each (docs/performance.md, "Two pilots").
SUCCESS_REPORT_DELAY = 0.05


@dataclass
class InFlight:
    """An exchange sent to the store: what it reported and the resources its match may fill."""

    exchange: PendingExchange
    starts: list[Payload]
    succeeded: list[tuple[Payload, RunResult]]
    reserved: Amount
    want: int
    prefetch: bool = False  # its match is for slots not free yet: what it brings is held (pilot.agent.prefetch)
    sent_at: float = field(default_factory=time.monotonic)


@dataclass
class PendingReport:
    """A report the store could not take (Redis unreachable): retried until the store takes or refuses it."""

    payload: Payload
    result: RunResult


class Reports:
    """What the pilot has to tell the store, and the exchanges on their way, on the pilot's own connection
    (so Redis applies them in the order they were sent)."""

    def __init__(self, state: PilotState, wake: Wake, processes: Processes) -> None:
        self.state = state
        self.wake = wake
        self.processes = processes
        self.prefetch = Prefetch(state, processes)
        self.inflight: deque[InFlight] = deque()  # exchanges sent, replies not yet read (oldest first)
        self.unstarted: list[Payload] = []  # spawned, start not yet reported to the store
        self.succeeded: list[tuple[Payload, RunResult]] = []  # ended well, completion not yet reported
        self.pending: list[PendingReport] = []
        self._next_retry = 0.0  # reports waiting for the store are retried from then on
        self._channel: Connection | None = None  # the pilot's own connection for exchanges (ordered)

    @property
    def busy(self) -> bool:
        """Something is unreported, on the way from a match or held for a slot."""
        return bool(self.inflight or self.unstarted or self.succeeded or self.prefetch.held)

    def leased(self) -> dict[str, int]:
        """The jobs of reports still waiting for the store (their leases must be renewed): id -> attempt."""
        return {r.payload.id: r.payload.job.attempt for r in self.pending}

    def forget(self, job: str) -> None:
        """The job is no longer this pilot's (lease lost): its waiting report is dropped."""
        self.pending = [r for r in self.pending if r.payload.id != job]

    def deadlines(self, now: float) -> list[float]:
        """When a retry or a start report is due (``time.monotonic()`` values)."""
        out = []
        if self.pending:
            out.append(max(self._next_retry, now + 0.05))
        if self.unstarted:
            out.append(self._start_report_due())
        if self.succeeded:
            out.append(self._success_report_due())
        if self.inflight and self.inflight[0].exchange.lost:
            out.append(now)  # no event comes for it (receive_lost)
        return out

    # -- sending -----------------------------------------------------------------------------------

    def fill(self) -> None:
        """Offer what is free to the store (with the reports not yet sent); the jobs it matches are
        started when the reply arrives (:meth:`received`), the loop meanwhile goes on."""
        state = self.state
        if not state.accepting:
            self.prefetch.give_back()
            return
        now = time.monotonic()
        if now < state.next_match:
            return
        if state.time_left_real() == 0:
            state.stop_accepting("time is up")
            self.prefetch.give_back()
            return
        cpu, mem, tmp = state.slots.free()
        if cpu <= 0 or self.prefetch.held:
            self._fill_ahead(now)
            return
        config = state.config
        want = self._allowed(cpu)
        if want <= 0:
            return
        # What it runs, for the match's reservations, only when no other offer is in flight: free + running
        # must be the whole pilot (a partial view would reserve for jobs that fit it anyway).
        offering = any(sent.want for sent in self.inflight)
        running = None if offering else state.slots.ends(now)
        self.send(
            PilotOffer(state.name, config.queue, cpu, max(0, mem), max(0, tmp), state.time_left(), running=running),
            want,
        )

    def _allowed(self, want: int) -> int:
        """``want`` less what ``max_jobs`` leaves (the pilot stops taking jobs once it ran them all)."""
        state, limit = self.state, self.state.config.max_jobs
        if limit is None:
            return want
        want = min(want, limit - state.launched - len(self.prefetch.held) - sum(s.want for s in self.inflight))
        if want <= 0 and not self.inflight and not self.prefetch.held:
            state.stop_accepting(f"ran its maximum of {limit} jobs")
        return want

    def _fill_ahead(self, now: float) -> None:
        """Every slot is taken (or a held job waits for one): lease the jobs that will take the slots next,
        within the lease rule (:mod:`pilot.agent.prefetch`), one prefetch at a time. Without reservations (the
        strict match, as when another offer is in flight): the slots it fills are not free yet."""
        state, prefetch = self.state, self.prefetch
        if any(sent.prefetch for sent in self.inflight) or not prefetch.wanted(now):
            return
        room = prefetch.room()
        if room is None:
            return
        want = self._allowed(room[0])
        if want <= 0:
            return
        left = state.time_left()
        if left is not None:  # a held job starts up to the horizon later
            left = max(0.0, left - prefetch.horizon)
        slots = state.slots
        cap = (slots.cores, max(0, slots.mem), max(0, slots.tmp))
        offer = PilotOffer(state.name, state.config.queue, *room, left, running=None, cap=cap)
        self.send(offer, want, prefetch=True)

    def send_unmatched(self) -> None:
        """At the turn's end: what no match carried goes alone (the successes, the starts that are due)."""
        now = time.monotonic()
        if (self.succeeded and now >= self._success_report_due()) or (
            self.unstarted and now >= self._start_report_due()
        ):
            self.send(None, 0)

    def _success_report_due(self) -> float:
        """When the unreported successes must go even if no match carries them: at once, unless the pilot
        holds jobs for its cores while it takes jobs (its hold's refill, with a later end, carries them)."""
        oldest = self.succeeded[0][0].end_mono  # set when it was reaped
        if oldest is not None and self.prefetch.held and self.state.accepting:
            return oldest + SUCCESS_REPORT_DELAY
        return 0.0

    def _start_report_due(self) -> float:
        """When the oldest unreported start must go to the store even if no match carries it."""
        return self.unstarted[0].start_mono + START_REPORT_DELAY

    def send(self, offer: PilotOffer | None, want: int, *, all_starts: bool = False, prefetch: bool = False) -> None:
        """Send the successful ends not yet reported, the starts that are due (or ``all_starts``) and, with
        an offer, a match, on the pilot's own connection without waiting for the reply
        (:class:`PendingExchange`). A start that is not due yet stays: if its payload ends first, it
        travels inside the completion (one script less for a short payload)."""
        state = self.state
        succeeded, self.succeeded = self.succeeded, []
        ended = {p.id for p, _ in succeeded}
        due = time.monotonic() - START_REPORT_DELAY
        starts: list[Payload] = []
        waiting: list[Payload] = []
        for payload in self.unstarted:
            (starts if all_starts or payload.id in ended or payload.start_mono <= due else waiting).append(payload)
        self.unstarted = waiting
        if offer is None and not starts and not succeeded:
            return  # nothing to say: every exchange in flight has replies due, on its socket (_watch_channel)
        store = state.store
        try:
            if self._channel is None:
                self._channel = store.own_connection()
            elif not self.inflight:
                store.follow(self._channel)  # a Cluster slot that moved: to its new owner while no reply is due
            exchange = store.send_exchange(
                state.name,
                self._channel,
                starts=[(p.id, p.job.attempt, p.start_wall) for p in starts if p.id not in ended],
                completions=[
                    (p.id, p.job.attempt, dataclasses.replace(result, started=p.start_wall) if p in starts else result)
                    for p, result in succeeded
                ],
                offer=offer,
                max_jobs=want,
            )
        except StoreUnavailable as exc:
            self._unreachable(exc, starts, succeeded)
            return
        reserved = (offer.cpu, offer.mem, offer.tmp) if offer is not None else (0, 0, 0)
        self.inflight.append(
            InFlight(exchange, starts, succeeded, reserved, want if offer is not None else 0, prefetch)
        )
        if not prefetch:  # a prefetch reserves room in the hold, not in the slots (Prefetch.room)
            state.slots.reserve(reserved)
        self._watch_channel()
        if offer is not None:
            state.next_match = math.inf  # the reply says when to match again

    def _watch_channel(self) -> None:
        """Keep the selector on the socket the replies due arrive on (the newest exchange's) while any are due."""
        self.wake.watch("reply", self.inflight[-1].exchange.socket if self.inflight else None)

    # -- receiving ---------------------------------------------------------------------------------

    def receive_lost(self) -> None:
        """Settle now the exchanges whose connection was closed before their replies were read (an outage's
        start closes every connection of the store): their socket left the selector, no event comes for them."""
        if self.inflight and self.inflight[0].exchange.lost:
            self.receive_ready()

    def receive_ready(self) -> None:
        """Handle every reply that has arrived (several may sit in the connection's buffer)."""
        while self.inflight and self.inflight[0].exchange.ready():
            self.received(self._oldest())
        self._watch_channel()

    def drain(self) -> None:
        """Wait for every reply still due: before a report that must not overtake them, and at the end."""
        while self.inflight:
            self.received(self._oldest())
        self._watch_channel()

    def _oldest(self) -> InFlight:
        sent = self.inflight.popleft()
        if not sent.prefetch:
            self.state.slots.unreserve(sent.reserved)  # what its match brings takes its share below
        return sent

    def received(self, sent: InFlight) -> None:
        """Apply one exchange's reply: refused starts stop their payloads unreported, completions are
        noted, and the matched jobs start (or, when the pilot no longer takes jobs, go back). The dependents
        a completion released are not the pilot's business: ``complete`` announces those whose requirements
        wait for outputs on the release channel, and the control plane evaluates them."""
        state = self.state
        closed = sent.exchange.lost  # by an outage's start, counted then
        try:
            reply = sent.exchange.receive()
        except StoreUnavailable as exc:
            self._unreachable(exc, sent.starts, sent.succeeded, counted=closed)
            return
        except StoreError as exc:
            log.error("reports and match failed: %s", exc)
            for payload, result in sent.succeeded:
                self._ended_note(payload, result, "unreported")
            if sent.want > 0:
                state.back_off()
            return
        if state.outage.ok():
            state.next_heartbeat = 0.0  # renew every lease now: the reaper's grace after a restart is short
        for payload in sent.starts:
            why = reply.refused.get(payload.id)
            if why is not None and not payload.ended:
                log.warning("job %s was taken from this pilot before it started: %s", payload.id, why)
                payload.terminate(Stop("lease lost before start", "none"), 0.0)
        for payload, result in sent.succeeded:
            why = reply.refused.get(payload.id)
            if why is not None:
                log.warning("job %s: report refused, the job was taken from this pilot: %s", payload.id, why)
            self._ended_note(payload, result, "done" if why is None else "stale")
        if sent.want == 0:
            return
        state.match_latency.observe(time.monotonic() - sent.sent_at)
        # Only a pilot that found nothing for its free slots listens for work (pilot.agent.wake)
        if reply.matched or not (sent.prefetch or self.prefetch.held):
            self.wake.hungry(not reply.matched)
        if not reply.matched:
            if sent.prefetch:  # not the free slots' back-off: a normal match for them must not wait
                self.prefetch.found_nothing()
            else:
                state.back_off()
            self.start_held()  # what this offer reserved is free again
            return
        state.match_now()
        if sent.prefetch:
            self.prefetch.hold(reply.matched)
            self.start_held()
            return
        for job in reply.matched:
            if not state.accepting:
                self.processes.give_back(
                    job, f"pilot {state.name} stopped taking jobs ({state.stop_reason})", unstarted=True
                )
                continue
            launched = self.processes.launch(job)
            if launched is None:  # a job given back: do not take it again at once
                state.next_match = time.monotonic() + state.config.backoff_max
            else:
                self.unstarted.append(launched)
        self.start_held()

    def start_held(self) -> None:
        """Start the held jobs that fit what is free now (a payload ended, or an offer's reservation ended)."""
        if self.prefetch.held:
            self.unstarted += self.prefetch.start()

    def _unreachable(
        self,
        exc: StoreError,
        starts: list[Payload],
        succeeded: list[tuple[Payload, RunResult]],
        *,
        counted: bool = False,
    ) -> None:
        """The store did not answer an exchange: its reports wait, the next match waits the outage's back-off.
        An exchange whose connection an outage's start closed (``counted``) is old news once the store answers
        again: it starts no new outage (whose start would close the connection again, with the replies due on it)."""
        state = self.state
        counted = counted and not state.outage.down
        state.next_match = time.monotonic() + (0.0 if counted else state.outage.failed(exc))
        self.unstarted = starts + self.unstarted  # the heartbeat keeps their leases meanwhile
        self._next_retry = state.next_match
        self.pending += [PendingReport(p, result) for p, result in succeeded]

    # -- ends --------------------------------------------------------------------------------------

    def ended(self, payload: Payload, result: RunResult) -> None:
        """A payload's result: a success waits for the next round trip to the store, anything else is
        reported at once."""
        self.prefetch.observe(result.wall, payload.job.ete)
        if payload.stop is None and not payload.killed_from_outside and result.exit_code == 0:
            self.succeeded.append((payload, result))
        else:
            self.report(payload, result)

    def report(self, payload: Payload, result: RunResult) -> bool:
        """Report a payload that did not simply succeed (or retry a success the store could not take);
        False when Redis was unreachable (retried later)."""
        state = self.state
        store = state.store
        job = payload.job
        stop = payload.stop
        report: Report | None = stop.report if stop is not None else None
        if report is None and payload.killed_from_outside:
            # Not the job's fault: give it back (it counts against its retry limit).
            report = "requeue"
            result = dataclasses.replace(result, reason=f"{result.reason}; given back: killed from outside the pilot")
        if payload in self.unstarted and report != "none":
            self.send(None, 0, all_starts=True)  # its start first, so the store records when it ran
        self.drain()  # nothing sent before may land after this report
        state_now: str
        try:
            if report == "none":
                state_now = "lost"
            elif report is None and result.exit_code == 0:
                store.complete(job.id, job.attempt, state.name, result)
                state_now = "done"
            else:
                state_now = str(store.fail(job.id, job.attempt, state.name, result, requeue=report == "requeue"))
        except StaleReport as exc:
            log.warning("job %s: report refused, the job was taken from this pilot: %s", job.id, exc)
            state_now = "stale"
        except StoreUnavailable as exc:
            self._next_retry = time.monotonic() + state.outage.failed(exc)
            if not any(r.payload is payload for r in self.pending):
                self.pending.append(PendingReport(payload, result))
            return False
        except StoreError as exc:
            log.error("job %s: report failed: %s", job.id, exc)
            state_now = "unreported"
        else:
            if state.outage.ok():
                state.next_heartbeat = 0.0
        self._ended_note(payload, result, state_now)
        return True

    def _ended_note(self, payload: Payload, result: RunResult, state: str) -> None:
        log.info(
            "job %s attempt %d: %s%s",
            payload.id,
            payload.job.attempt,
            state,
            f" ({result.reason})" if result.reason else "",
        )
        self.state.notify("payload_ended", self.state.info, payload.job, result, state)

    def retry_due(self) -> bool:
        """Reports wait and their back-off is over, or the store answers again (another call went through)."""
        return bool(self.pending) and (not self.state.outage.down or time.monotonic() >= self._next_retry)

    def retry(self) -> None:
        """Report again what the store could not take; what it still cannot take stays for the next try
        (the heartbeat keeps its lease), what it refuses as stale is dropped (:meth:`report`)."""
        waiting, self.pending = self.pending, []
        for number, pending in enumerate(waiting):
            if not self.report(pending.payload, pending.result):
                self.pending += waiting[number + 1 :]  # still unreachable (report kept this one)
                return

    # -- the end -----------------------------------------------------------------------------------

    def flush(self, patience: float) -> None:
        """The pilot ends: send what is unreported, wait for every reply, then retry the waiting reports until
        the store takes them or ``patience`` seconds have passed (one lease: a payload that ran to its end is
        not run again because its pilot left during an outage; the kill grace when the pilot is stopped).
        Held jobs go back first."""
        self.prefetch.give_back()
        if self.unstarted or self.succeeded:
            self.send(None, 0, all_starts=True)
        self.drain()
        deadline = time.monotonic() + patience
        while self.pending:
            self.retry()
            if not self.pending:
                break
            now = time.monotonic()
            if now >= deadline:
                for pending in self.pending:
                    log.warning(
                        "job %s: the store is still unreachable as the pilot ends; its lease expires and the "
                        "reaper requeues it",
                        pending.payload.id,
                    )
                self.pending = []
                break
            time.sleep(max(0.0, min(self._next_retry, deadline) - now))

    def close(self) -> None:
        """Give the pilot's connection back (closed: replies may still be due on it)."""
        if self._channel is not None:
            self.state.store.give_back(self._channel)
            self._channel = None
