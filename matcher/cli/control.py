"""Operator actions on requests and jobs: cancel a request, cancel or kill one job."""

from __future__ import annotations

from collections import Counter

from taskqueues.errors import NotFound, PilotfishError
from taskqueues.store import JobState, Store


class AlreadyEnded(PilotfishError):
    """A cancel or kill named a job or request that has already ended: nothing was done."""


def cancel_request(
    store: Store, request: str, reason: str = "request cancelled", by: str | None = None
) -> dict[str, int]:
    """Cancel every unfinished job of a request: waiting and blocked ones at once, running ones killed (``by``:
    who asks, as the jobs' events say it; default "cancel").

    Returns how many ended at once and how many kill requests were sent to pilots.
    """
    counts = {"ended": 0, "requested": 0}
    for job in store.request_jobs(request):
        if job.state.final or job.state is JobState.DEP_FAILED:
            continue
        outcome = store.cancel(job.id, reason, by=by)
        if outcome in counts:
            counts[outcome] += 1
    return counts


def stop_job(store: Store, job: str, reason: str, *, kill: bool = False, by: str | None = None) -> str:
    """Cancel (or kill) one job; a line saying what happened. A job that is still waiting ends at once; a
    running one's pilot is told on its own channel and stops the payload at once (its heartbeat is the
    safety net). Raises NotFound for an unknown job and :class:`AlreadyEnded` for one that has ended."""
    outcome = store.cancel(job, reason, kill=kill, by=by)
    record = store.job(job)
    if outcome == "final":
        raise AlreadyEnded(f"job {job} has already ended ({record.state.value})")
    if outcome == "requested":
        return f"job {job}: {'kill' if kill else 'cancel'} sent to pilot {record.pilot}, which stops its payload now"
    return f"job {job}: ended ({record.state.value}; it was not running)"


def stop_target(store: Store, target: str, reason: str, by: str | None = None) -> str:
    """``pilotfish cancel TARGET``: a request (id) or else a job; a line saying what happened."""
    try:
        jobs = store.request_jobs(target)
    except NotFound:
        try:
            return stop_job(store, target, reason, by=by)
        except NotFound:
            raise NotFound(f"no request or job {target!r}") from None
    if all(j.state.final for j in jobs):
        states = Counter(j.state.value for j in jobs)
        raise AlreadyEnded(
            f"request {target} has already ended ("
            + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            + ")"
        )
    counts = cancel_request(store, target, reason, by)
    asked = f"{counts['requested']} matched or running jobs asked to stop now"
    return f"request {target}: {counts['ended']} jobs cancelled, {asked}"


def drain_pilot(store: Store, pilot: str, *, shutdown: bool = False, reason: str | None = None) -> str:
    """``pilotfish drain PILOT``: ask a live pilot (seen within the live window) to drain, or with ``shutdown``
    to give its running payloads back now; a line saying what happened. NotFound names the live pilots."""
    window = store.pilots.live_window
    live = store.pilot_records(window)
    mode = "shutdown" if shutdown else "drain"
    if pilot not in live or live[pilot].get("stopped"):
        raise NotFound(
            f"no live pilot {pilot!r} (pilots seen within {window:g} s: "
            f"{', '.join(sorted(n for n, r in live.items() if not r.get('stopped'))) or 'none'})"
        )
    store.pilots.request_stop(pilot, mode, reason or f"{mode} requested by operator")
    return f"pilot {pilot}: {'shutting down' if shutdown else 'draining'}"
