"""After submission: ``pilotfish hold``, ``release``, ``resubmit``, ``update`` and ``events`` (issue 28).

Each command names jobs (ids) or one request (id or unique name: its jobs in the states the command acts on).
The store does the work, one atomic Lua call per batch (:mod:`taskqueues.store.lifecycle`); this module picks
the jobs, checks them first so that a refusal changes nothing (a job named that is running, for a hold,
refuses the whole command), validates an update as at submission (:func:`matcher.submission.place`: the
same requirement checks, catalog and task-queue computation) and says what happened in one line.
"""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taskqueues.catalog import Catalog
from taskqueues.errors import JobRefused, NotFound, ValidationError
from taskqueues.placement import BACKEND_OPTIONS, INSTANCE_TYPE
from taskqueues.requirements import CONSUMABLES
from taskqueues.store import Job, JobEvent, JobState, JobUpdate, Placed, Store

from .limits import MAX_PRIORITY, check_number
from .status import find_request
from .submission import place

__all__ = [
    "Targets",
    "hold",
    "job_events",
    "local_user",
    "parse_assignments",
    "release",
    "render_events",
    "resubmit",
    "targets",
    "update",
]

#: The states a job may be held in (a blocked or releasing one is held as soon as it would wait).
HOLDABLE = frozenset({JobState.WAITING, JobState.BLOCKED, JobState.RELEASING})
#: The states a resubmitted job may be in.
ENDED = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
#: The states an update may change a job in.
UPDATABLE = frozenset({JobState.WAITING, JobState.HELD})


def local_user() -> str:
    """Who acts when a command does not say: the local user."""
    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):
        return "unknown"


@dataclass(frozen=True)
class Targets:
    """The jobs a command acts on; ``request``: the request they were picked from, if one was named."""

    jobs: list[Job]
    request: str | None = None

    @property
    def ids(self) -> list[str]:
        return [j.id for j in self.jobs]


def targets(store: Store, names: Sequence[str]) -> Targets:
    """``JOB...`` or ``REQUEST``: one name that is no job id is a request (id or unique name), else job ids
    (NotFound names the first unknown one)."""
    if not names:
        raise ValidationError("name a request, or one job id or more")
    if len(names) == 1:
        try:
            return Targets([store.job(names[0])])
        except NotFound:
            try:
                request = find_request(store, names[0])
            except NotFound:
                raise NotFound(f"no job or request {names[0]!r}") from None
            return Targets(store.request_jobs(request), request)
    jobs = store.jobs(list(dict.fromkeys(names)))
    found = {j.id for j in jobs}
    missing = [n for n in names if n not in found]
    if missing:
        raise NotFound(f"no job {missing[0]!r}")
    return Targets(jobs)


def _refuse_unless(jobs: Iterable[Job], allowed: frozenset[JobState], what: str) -> None:
    for job in jobs:
        if job.state not in allowed:
            states = ", ".join(sorted(s.value for s in allowed))
            raise JobRefused(f"job {job.id} is {job.state.value}: only a job that is {states} {what} (nothing changed)")


def _counted(outcomes: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def hold(store: Store, names: Sequence[str], by: str, reason: str = "") -> str:
    """Hold jobs (a request: its waiting, blocked and releasing jobs); one line saying what happened."""
    picked = targets(store, names)
    jobs = picked.jobs
    if picked.request is None:
        _refuse_unless(jobs, HOLDABLE | {JobState.HELD}, "is held")
    else:
        jobs = [j for j in jobs if j.state in HOLDABLE]
        if not jobs:
            raise JobRefused(f"request {picked.request} has no waiting, blocked or releasing job to hold")
    outcomes = store.lifecycle.hold([j.id for j in jobs], by, reason)
    who = f" by {by}" + (f" ({reason})" if reason else "")
    if picked.request is None and len(outcomes) == 1:
        ((job, outcome),) = outcomes.items()
        if outcome == "hold-pending":
            return f"job {job}: will be held as soon as its dependencies let it wait{who}"
        return f"job {job}: {outcome}{who}" + (
            ": it is matched by no pilot until released" if outcome == "held" else ""
        )
    where = f"request {picked.request}" if picked.request else f"{len(outcomes)} jobs"
    return f"{where}: {_counted(outcomes)}{who}".replace("hold-pending", "held when they would wait")


def release(store: Store, names: Sequence[str], by: str, reason: str = "") -> str:
    """Release held jobs (a request: its held jobs and pending holds); one line saying what happened."""
    picked = targets(store, names)
    jobs = [j for j in picked.jobs if j.state is JobState.HELD or j.held_by is not None]
    if picked.request is None and len(jobs) < len(picked.jobs):
        (first,) = [j for j in picked.jobs if j not in jobs][:1]
        raise JobRefused(f"job {first.id} is {first.state.value}, not held (nothing changed)")
    if not jobs:
        raise JobRefused(f"request {picked.request} has no held job")
    outcomes = store.lifecycle.hold([j.id for j in jobs], by, reason, release=True)
    if picked.request is None and len(outcomes) == 1:
        job = next(iter(outcomes))
        return f"job {job}: released by {by}: {store.job(job).state.value} again, with the urgency it had"
    where = f"request {picked.request}" if picked.request else f"{len(outcomes)} jobs"
    return f"{where}: {_counted(outcomes)} by {by}"


def resubmit(
    store: Store, names: Sequence[str], by: str, reason: str = "", states: Iterable[JobState] | None = None
) -> str:
    """Run ended jobs again (a request: its jobs in ``states``, by default the failed ones); their dep-failed
    dependents come back with them. One line saying what happened."""
    picked = targets(store, names)
    if picked.request is None:
        if states is not None:
            raise ValidationError("--failed and --state pick the jobs of a REQUEST: name one, not job ids")
        _refuse_unless(picked.jobs, ENDED, "is resubmitted")
        jobs = picked.jobs
    else:
        wanted = frozenset(states) if states is not None else frozenset({JobState.FAILED})
        bad = sorted(s.value for s in wanted - ENDED)
        if bad:
            raise ValidationError(f"--state {', '.join(bad)}: only done, failed or cancelled jobs are resubmitted")
        jobs = [j for j in picked.jobs if j.state in wanted]
        if not jobs:
            shown = ", ".join(sorted(s.value for s in wanted))
            raise JobRefused(f"request {picked.request} has no {shown} job to resubmit")
    named = [j.id for j in jobs]
    back = store.lifecycle.resubmit(named, by, reason)
    dependents = [j for j in back if j not in set(named)]
    with_them = f", and {len(dependents)} dep-failed dependents with them" if dependents else ""
    if picked.request is None and len(named) == 1:
        job = jobs[0]
        with_it = f", with its dep-failed dependents {', '.join(dependents[:10])}" if dependents else ""
        runs = f"it ran {job.attempt} times; its next run is attempt {job.attempt + 1}"
        return f"job {job.id}: resubmitted by {by} ({runs}){with_it}"
    where = f"request {picked.request}" if picked.request else "jobs"
    return f"{where}: {len(named)} jobs resubmitted by {by}{with_them}"


def parse_assignments(values: Iterable[str]) -> dict[str, object]:
    """``K=V`` requirements from the command line: V as JSON when it reads as such (a number, a list), else as
    text; ``K=`` (nothing) removes the requirement (None)."""
    out: dict[str, object] = {}
    for value in values:
        name, eq, text = value.partition("=")
        if not eq or not name.strip():
            raise ValidationError(f"--requirement {value!r} is not NAME=VALUE")
        if not text:
            out[name.strip()] = None
            continue
        try:
            out[name.strip()] = json.loads(text)
        except ValueError:
            out[name.strip()] = text
    return out


def _raw_requirements(job: Job, definition: str | None) -> dict[str, object]:
    """The requirements the job was placed with: its exact values and the placement hints its task queue's
    ``definition`` carries (instance type, backend options)."""
    raw: dict[str, object] = dict(job.requirements)
    if definition:
        hints = json.loads(definition)
        raw.update({k: hints[k] for k in (INSTANCE_TYPE, BACKEND_OPTIONS) if k in hints})
    return raw


def _planned(
    catalog: Catalog,
    job: Job,
    *,
    vo: str,
    priority: float | None,
    changes: Mapping[str, object],
    request: Mapping[str, Any],
    definition: str | None,
) -> JobUpdate:
    """Check one job's update as at submission and place it; raises naming the job, nothing changed."""
    job_id = job.id
    said: list[str] = []
    if priority is not None:
        check_number(
            priority, job=job_id, field="priority", low=-MAX_PRIORITY, high=MAX_PRIORITY, what="a number of seconds"
        )
        was = job.priority if job.priority is not None else float(request.get("priority", 0.0))
        said.append(f"priority {was:g} -> {priority:g}")
    placed: Placed | None = None
    if changes:
        raw = _raw_requirements(job, definition)
        for name, value in changes.items():
            if value is None:
                raw.pop(name, None)
            else:
                raw[name] = value
        where = place(catalog, raw, job=job_id, vo=vo)
        req = where.requirements
        placed = Placed(where.tq_id, where.tq_def, where.queues, dict(req.values), req.cpu, req.mem, req.tmp, req.wall)
        for name in sorted(changes):
            before = job.requirements.get(name, job.cpu if name == "cpu" else None)
            after = req.values.get(name, req.cpu if name == "cpu" else None)
            if name in CONSUMABLES or before != after:
                said.append(f"{name} {'-' if before is None else before} -> {'-' if after is None else after}")
    return JobUpdate(job_id, "updated: " + "; ".join(said), priority, placed)


def update(
    store: Store,
    catalog: Catalog,
    job_ids: Sequence[str],
    by: str,
    *,
    vo: str = "default",
    priority: float | None = None,
    requirements: Mapping[str, object] | None = None,
    wall: str | None = None,
) -> str:
    """Change waiting or held jobs' priority, requirements or wall, validated as at submission; each moves to
    its new task queue. A line per job saying what changed. Every job is checked and placed here, then all are
    changed in one atomic step that checks each again (:meth:`taskqueues.store.Lifecycle.update`): a
    ValidationError (the job, the requirement and the queue that excluded it) or a JobRefused (a job not waiting
    nor held, here or by then: matched in between) leaves every job as it was."""
    changes = dict(requirements or {})
    if wall is not None:
        changes["wall"] = wall
    if priority is None and not changes:
        raise ValidationError("say what to change: --priority, --requirement or --wall")
    if not job_ids:
        raise ValidationError("name one job id or more to update")
    ids = list(dict.fromkeys(job_ids))
    found = {job.id: job for job in store.jobs(ids)}
    jobs = [found.get(job_id) or store.job(job_id) for job_id in ids]  # store.job says why one was not read
    _refuse_unless(jobs, UPDATABLE, "is updated")
    # What the plans read, read once for all jobs (a request's jobs share it): not three round trips a job.
    requests = (
        {r: store.request(r) for r in {job.request for job in jobs if job.request}} if priority is not None else {}
    )
    definitions = store.tq_definitions_of(sorted({job.tq_id for job in jobs})) if changes else {}
    planned = [
        _planned(
            catalog,
            job,
            vo=vo,
            priority=priority,
            changes=changes,
            request=requests.get(job.request, {}),
            definition=definitions.get(job.tq_id),
        )
        for job in jobs
    ]
    states = store.lifecycle.update(planned, by)
    now = {j.id: j.tq_id for j in store.jobs([j.id for j in jobs])}
    lines: list[str] = []
    for job, change, state in zip(jobs, planned, states, strict=True):
        tq = now.get(job.id, job.tq_id)
        moved = f" (task queue {job.tq_id} -> {tq})" if tq != job.tq_id else ""
        lines.append(f"job {job.id}: {change.what}{moved}, {state.value}")
    return "\n".join(lines)


def job_events(store: Store, job: str) -> list[JobEvent]:
    """Every change of a job's state, oldest first (``pilotfish events``)."""
    return store.lifecycle.events(job)


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}"


def render_events(job: str, events: Sequence[JobEvent]) -> list[str]:
    """One line per event: when, from -> to, by whom, then the attempt, pilot, exit code and reason."""
    lines = [f"job {job}: {len(events)} events"]
    for e in events:
        change = f"{e.source} -> {e.state}" if e.source and e.source != e.state else e.state
        extra = [
            f"attempt {e.attempt}" if e.attempt else "",
            f"pilot {e.pilot}" if e.pilot and not e.by.endswith(e.pilot) else "",
            f"exit {e.exit_code}" if e.exit_code is not None else "",
        ]
        tail = ", ".join(x for x in extra if x)
        lines.append(
            f"{_stamp(e.time)}  {change:<22} by {e.by}"
            + (f"  ({tail})" if tail else "")
            + (f"  {e.reason}" if e.reason else "")
        )
    return lines
