"""Operator views of requests and task queues: what is where, and when the work should be done.

Reading only (no script, no lock): a request's jobs are read in one HMGET (their ids are consecutive),
task queues in one pipeline. These views are for people and the ``status`` command, not for the hot path.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from taskqueues.errors import NotFound
from taskqueues.store import Job, JobState, Parked, Store, canonical_json

from .formats import Columns, duration, stamp

__all__ = [
    "REQUEST_COLUMNS",
    "RequestStatus",
    "TaskQueueStatus",
    "ended_summary",
    "find_request",
    "render_parked",
    "render_requests",
    "render_task_queues",
    "request_status",
    "requests_status",
    "task_queues",
]

STATE_ORDER = [s.value for s in JobState]


@dataclass(frozen=True)
class RequestStatus:
    """One request: its jobs by state and how long its critical path still is."""

    id: str
    name: str
    priority: float
    submitted: float
    eta: float
    critical_path: float
    """Seconds still needed along the critical path: the largest pressure among unfinished jobs."""
    jobs: int
    states: dict[str, int]
    examples: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """Per state, the first few jobs (``id``, ``name``) in id order: filled for one request's view only."""
    owner: str = ""
    group: str = ""
    """Who submitted it and the group charged ("" for a request stored before owners existed)."""
    notify: dict[str, Any] | None = None
    """Its webhook's notification (:mod:`matcher.notify`): url, state, attempts, error...; None without one."""

    @property
    def final(self) -> bool:
        """Every job ended (done, failed, cancelled or dep-failed)."""
        return sum(n for s, n in self.states.items() if JobState(s).final) == self.jobs

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "final": self.final}


@dataclass(frozen=True)
class TaskQueueStatus:
    """One task queue: how many jobs wait, the most urgent score, its requirement class and queues."""

    id: str
    waiting: int
    head_score: float | None
    requirements: dict[str, Any]
    queues: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: Jobs named per state by ``status REQUEST`` (``pilotfish jobs`` is for the full listing).
EXAMPLES = 5


def _status(
    request: str, rec: dict[str, Any], jobs: Sequence[Job], examples: int = 0, notice: Any = None
) -> RequestStatus:
    states = Counter(j.state.value for j in jobs)
    named: dict[str, list[dict[str, str]]] = {}
    for j in sorted(jobs, key=lambda j: int(j.id) if j.id.isdigit() else 0) if examples else ():
        listed = named.setdefault(j.state.value, [])
        if len(listed) < examples:
            listed.append({"id": j.id, "name": j.name})
    unfinished = [j.pressure for j in jobs if not j.state.final]
    return RequestStatus(
        id=request,
        name=str(rec.get("name", request)),
        priority=float(rec.get("priority", 0.0)),
        submitted=float(rec.get("ts", 0.0)),
        eta=float(rec.get("eta", 0.0)),
        critical_path=max(unfinished, default=0.0),
        jobs=len(jobs),
        states={s: states[s] for s in STATE_ORDER if states[s]},
        examples={s: named[s] for s in STATE_ORDER if s in named},
        owner=str(rec.get("owner", "")),
        group=str(rec.get("group", "")),
        notify=notice.to_json()
        if notice is not None
        else ({"url": rec["notify"], "state": "waiting"} if rec.get("notify") else None),
    )


def request_status(store: Store, request: str, examples: int = 0, jobs: Sequence[Job] | None = None) -> RequestStatus:
    """The status of one request (by id), naming up to ``examples`` jobs per state; NotFound if there is none.
    ``jobs``: its jobs, when the caller has just read them (the request page), else they are read here."""
    notice = store.notices.of([request]).get(request)
    record = store.request(request)
    return _status(request, record, store.request_jobs(request) if jobs is None else jobs, examples, notice)


def requests_status(store: Store, owner: str | None = None, group: str | None = None) -> list[RequestStatus]:
    """Every request (of ``owner``, of ``group`` when given), oldest first (ties by job ids, which grow with each
    submission)."""
    requests = sorted(
        (
            (rid, rec)
            for rid, rec in store.requests().items()
            if (owner is None or rec.get("owner") == owner) and (group is None or rec.get("group") == group)
        ),
        key=lambda kv: (float(kv[1].get("ts", 0)), int(kv[1].get("first", 0))),
    )
    notices = store.notices.of([rid for rid, rec in requests if rec.get("notify")])
    return [_status(rid, rec, store.request_jobs(rid), notice=notices.get(rid)) for rid, rec in requests]


def ended_summary(statuses: Sequence[RequestStatus]) -> str:
    """One line for requests not shown (ended ones): how many, and their jobs by state."""
    states: Counter[str] = Counter()
    for s in statuses:
        states.update(s.states)
    jobs = ", ".join(f"{states[state]} {state}" for state in STATE_ORDER if states[state])
    return f"{len(statuses)} ended requests not shown ({jobs or 'no job'}): pilotfish status --all lists them"


def _opt(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


#: The fields of ``status --format`` (a request a line): its own, and a count per job state.
REQUEST_COLUMNS: Columns[RequestStatus] = Columns(
    "request",
    {
        "id": ("REQUEST", lambda s: s.id),
        "name": ("NAME", lambda s: s.name),
        "owner": ("OWNER", lambda s: _opt(s.owner)),
        "group": ("GROUP", lambda s: _opt(s.group)),
        "priority": ("PRIORITY", lambda s: f"{s.priority:g}"),
        "jobs": ("JOBS", lambda s: str(s.jobs)),
        "ended": ("ENDED", lambda s: "yes" if s.final else "no"),
        "submit": ("SUBMIT", lambda s: stamp(s.submitted)),
        "eta": ("ETA", lambda s: "-" if s.final else stamp(s.eta)),
        "critical": ("CRITICAL", lambda s: duration(s.critical_path)),
        "notify": ("NOTIFY", lambda s: s.notify["state"] if s.notify else "-"),
        "attempts": ("ATTEMPTS", lambda s: str(s.notify.get("attempts", 0)) if s.notify else "-"),
        "error": ("ERROR", lambda s: _opt(s.notify.get("error")) if s.notify else "-"),
        **{
            state: (state.upper(), lambda s, state=state: str(s.states.get(state, 0)))  # type: ignore[misc]
            for state in STATE_ORDER
        },
    },
)


def find_request(store: Store, wanted: str) -> str:
    """A request id from an id or a unique name; NotFound says which names are close or ambiguous."""
    requests = store.requests()
    if wanted in requests:
        return wanted
    named = sorted(rid for rid, rec in requests.items() if rec.get("name") == wanted)
    if len(named) == 1:
        return named[0]
    if named:
        raise NotFound(f"{len(named)} requests are named {wanted!r}: give one id of {', '.join(named)}")
    raise NotFound(f"no request with id or name {wanted!r}")


def task_queues(store: Store) -> list[TaskQueueStatus]:
    """Every task queue known (with a definition), most urgent head first, empty ones last."""
    defs = store.tq_definitions()
    ids = sorted(defs)
    summaries = store.views.task_queue_summaries(ids)
    out = []
    for tq in ids:
        summary = summaries[tq]
        try:
            requirements = json.loads(defs[tq])
        except ValueError:
            requirements = {"unreadable": defs[tq]}
        out.append(
            TaskQueueStatus(
                id=tq,
                waiting=summary.waiting,
                head_score=summary.head_score,
                requirements=requirements if isinstance(requirements, dict) else {"value": requirements},
                queues=summary.queues,
            )
        )
    return sorted(out, key=lambda t: (t.head_score is None, t.head_score or 0.0, t.id))


def _when(seconds: float, now: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    delta = seconds - now
    return f"{stamp} ({'in ' if delta >= 0 else ''}{_duration(abs(delta))}{' ago' if delta < 0 else ''})"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def render_requests(statuses: Sequence[RequestStatus], now: float) -> list[str]:
    """Human lines: one block per request."""
    if not statuses:
        return ["no request"]
    lines = []
    for s in statuses:
        states = ", ".join(f"{n} {state}" for state, n in s.states.items()) or "no job"
        who = f" owner {s.owner} group {s.group}" if s.owner or s.group else ""
        lines.append(f"request {s.id} {s.name!r}{who} priority {s.priority:g}: {s.jobs} jobs ({states})")
        lines.append(f"  submitted {_when(s.submitted, now)}")
        for state, listed in s.examples.items():
            more = s.states.get(state, 0) - len(listed)
            jobs = ", ".join(f"{j['id']} {j['name']}" if j["name"] else j["id"] for j in listed)
            lines.append(f"  {state}: {jobs}" + (f" (+{more} more)" if more > 0 else ""))
        if s.notify:
            lines.append(f"  notify {s.notify['url']}: {notify_text(s.notify, now)}")
        if s.final:
            lines.append("  finished")
        else:
            lines.append(f"  ETA {_when(s.eta, now)}; critical path left {_duration(s.critical_path)}")
    return lines


def notify_text(notice: dict[str, Any], now: float) -> str:
    """A notification's state in words: waiting for the end, sent, or the attempts and last error."""
    state, attempts, error = notice.get("state", ""), notice.get("attempts", 0), notice.get("error", "")
    if state == "waiting":
        return "when the request ends"
    if state == "sent":
        return f"sent {_when(notice['sent'], now)}" + (
            f" (attempt {attempts}; before: {error})" if attempts > 1 else ""
        )
    if state == "retry":
        return f"attempt {attempts} failed: {error}; next {_when(notice['next'], now)}"
    if state == "failed":
        return f"failed for good after {attempts} attempts: {error}"
    return f"{state} (attempt {attempts})" + (f"; last error: {error}" if error else "")


def render_task_queues(queues: Sequence[TaskQueueStatus], now: float) -> list[str]:
    if not queues:
        return ["no task queue"]
    lines = []
    for q in queues:
        head = "empty" if q.head_score is None else f"head should start {_when(q.head_score, now)}"
        reqs = canonical_json(q.requirements)
        lines.append(f"task queue {q.id}: {q.waiting} waiting, {head}")
        lines.append(f"  requirements {reqs}")
        lines.append(f"  eligible queues: {', '.join(q.queues) or 'none'}")
    return lines


def render_parked(parked: Sequence[Parked], shown: int = 10) -> list[str]:
    """Human lines for the parked jobs (none when there are none): how many, and the first few."""
    if not parked:
        return []
    lines = [
        f"{len(parked)} jobs parked (a task-queue member or record could not be read; they wait for an "
        f"operator, outside every task queue): see pilotfish explain <job>"
    ]
    for p in sorted(parked, key=lambda p: (p.at, p.job))[:shown]:
        lines.append(f"  job {p.job}: {p.reason}" + (f" (task queue {p.task_queue})" if p.task_queue else ""))
    if len(parked) > shown:
        lines.append(f"  ... and {len(parked) - shown} more")
    return lines
