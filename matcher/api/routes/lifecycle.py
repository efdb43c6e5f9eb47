"""After submission (issue 28): hold, release, resubmit and update jobs, and read a job's events.

Who may: as for cancel, a user acts on its own jobs, a group admin on its groups', an operator on everything; for
a REQUEST target the request's account is checked, for job ids each job's (all of them before anything changes).
Who acts, as the job's events say it, is the caller: a ``by`` naming someone else is refused (403) unless the
caller is an operator (a service acting for a user); the audit log names the caller and that ``by``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from taskqueues.errors import Forbidden, ValidationError

from ...job_release import account_of_job
from ...joblist import parse_states
from ...lifecycle import targets
from ..authz import check_act, check_see, job_account, request_account
from ..identity import Identity
from ..state import Api, Caller, api

router = APIRouter(prefix="/v1", tags=["lifecycle"])

_BY = Field(None, description="Who acts, as the job's events say it: the caller (an operator may name another).")


class Change(BaseModel):
    targets: list[str] = Field(description="Job ids, or one request (id or unique name).")
    reason: str = Field("", description="Why, as the jobs' events say it.")
    by: str | None = _BY


class Resubmission(Change):
    states: list[str] | None = Field(
        None, description="Of a request, its jobs in these states (done, failed, cancelled; default: failed)."
    )


class Update(BaseModel):
    priority: float | None = Field(None, description="The job's own priority (seconds earlier it should start).")
    requirements: dict[str, Any] | None = Field(
        None, description="Requirements to set, as in a workflow; a null value removes one."
    )
    wall: str | None = Field(None, description="The job's wall time ('2h', seconds).")
    by: str | None = _BY


def acting(caller: Identity, by: str | None) -> str:
    """Who the job's events name: the caller, or (operators only) the ``by`` it names."""
    if not by or by == caller.user or caller.operator:
        return by or caller.user
    raise Forbidden(f"{caller.user} may not act as {by}: the events name the caller (only operators may name another)")


def _check_targets(state: Api, caller: Identity, names: list[str]) -> None:
    """Forbidden unless the caller may act on every job named (a request: on the request)."""
    store = state.local.store
    picked = targets(store, names)
    if picked.request is not None:
        check_act(caller, f"request {picked.request}", *request_account(store, picked.request))
        return
    accounts: dict[tuple[str, str], tuple[str, str]] = {}  # jobs of one request share its account
    for job in picked.jobs:
        key = (job.tq_id, job.request)
        if key not in accounts:
            accounts[key] = account_of_job(store, job)
        check_act(caller, f"job {job.id}", *accounts[key])


def _done(request: Request, caller: Identity, action: str, body: Change, by: str, result: str) -> dict[str, str]:
    api(request).done(request, caller, action, " ".join(body.targets), reason=body.reason, by=by)
    return {"result": result}


@router.post("/hold")
def hold(body: Change, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Keep waiting jobs (a request: all its waiting ones) from being matched until released."""
    state, by = api(request), acting(caller, body.by)
    _check_targets(state, caller, body.targets)
    return _done(request, caller, "hold", body, by, state.local.hold(*body.targets, reason=body.reason, by=by))


@router.post("/release")
def release(body: Change, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Give held jobs (a request: all its held ones) back to their task queues, with the urgency they had."""
    state, by = api(request), acting(caller, body.by)
    _check_targets(state, caller, body.targets)
    return _done(request, caller, "release", body, by, state.local.release(*body.targets, reason=body.reason, by=by))


@router.post("/resubmit")
def resubmit(body: Resubmission, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Run ended jobs again as a new attempt (a request: its failed ones, or those in ``states``), with their
    dep-failed dependents."""
    state, by = api(request), acting(caller, body.by)
    if body.states is not None:
        parse_states(body.states)  # a wrong state is named first, as locally
    _check_targets(state, caller, body.targets)
    line = state.local.resubmit(*body.targets, states=body.states, reason=body.reason, by=by)
    return _done(request, caller, "resubmit", body, by, line)


class JobsUpdate(Update):
    jobs: list[str] = Field(description="The job ids; every one is checked before any changes.")


def _update(request: Request, caller: Identity, jobs: list[str], body: Update) -> dict[str, str]:
    state, by = api(request), acting(caller, body.by)
    if not jobs:
        raise ValidationError("name one job id or more to update")
    for job in jobs:
        check_act(caller, f"job {job}", *job_account(state.local.store, job))
    line = state.local.update(*jobs, priority=body.priority, requirements=body.requirements, wall=body.wall, by=by)
    changes = {"priority": body.priority, "requirements": body.requirements, "wall": body.wall}
    state.done(request, caller, "update", " ".join(jobs), by=by, **{k: v for k, v in changes.items() if v is not None})
    return {"result": line}


@router.post("/update")
def update_jobs(body: JobsUpdate, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Change waiting or held jobs' priority, requirements or wall, validated as at submission; all or none."""
    return _update(request, caller, body.jobs, body)


@router.post("/jobs/{job}/update")
def update(job: str, body: Update, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Change a waiting or held job's priority, requirements or wall, validated as at submission."""
    return _update(request, caller, [job], body)


@router.get("/jobs/{job}/events")
def events(job: str, request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """Every change of a job's state, oldest first: when, from which state to which, by whom, why."""
    state = api(request)
    check_see(caller, f"job {job}", *job_account(state.local.store, job), state.settings.api_users_see_all)
    return {"job": job, "events": [e.to_json() for e in state.local.events(job)]}
