"""Operator actions on requests and jobs: cancel a request, cancel or kill one job."""

from __future__ import annotations

from taskqueues.records import JobState
from taskqueues.store import Store


def cancel_request(store: Store, request: str, reason: str = "request cancelled") -> dict[str, int]:
    """Cancel every unfinished job of a request: waiting and blocked ones at once, running ones killed.

    Returns how many ended at once and how many kill requests were sent to pilots.
    """
    counts = {"ended": 0, "requested": 0}
    for job in store.request_jobs(request):
        if job.state.final or job.state is JobState.DEP_FAILED:
            continue
        outcome = store.cancel(job.id, reason)
        if outcome in counts:
            counts[outcome] += 1
    return counts
