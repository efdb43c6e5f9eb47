"""Requests: submit one (the caller owns it), see them, cancel one."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from taskqueues.errors import NotFound

from ...calls import Overview
from ..authz import (
    check_act,
    check_see,
    job_account,
    may_see,
    owner_of_submission,
    request_account,
    task_queue_account,
)
from ..identity import Identity
from ..state import Caller, api

router = APIRouter(prefix="/v1", tags=["requests"])


class Submission(BaseModel):
    workflow: dict[str, Any] = Field(description="The workflow, as a workflow file holds it (JSON).")
    owner: str = Field("", description="Who owns it: the caller (an operator may name another).")
    group: str = Field(
        "", description="The group charged: one of the caller's (default: the workflow's, else the caller's first)."
    )

    source: str = Field("<request>", description="The workflow file's name, for messages.")
    notify: str = Field("", description="A webhook called once when the request ends (default: the workflow's).")


class Reason(BaseModel):
    reason: str = "cancelled by user"


@router.post("/requests", status_code=201)
def submit(body: Submission, request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """Submit a workflow as one request; the answer names its id, its jobs' ids and its ETA."""
    state = api(request)
    owner, group = owner_of_submission(
        caller, body.owner or str(body.workflow.get("owner") or ""), body.group or str(body.workflow.get("group") or "")
    )
    done = state.local.submit(body.workflow, owner=owner, group=group, source=body.source, notify=body.notify)
    state.done(request, caller, "submit", done.id, jobs=len(done.ids), owner=owner, group=group)
    return {"request": done.id, "name": done.name, "ids": done.ids, "eta": done.eta}


@router.get("/requests")
def overview(request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """The requests and task queues the caller may see (a task queue's id names its group and owner), and
    (operators) the parked jobs."""
    state = api(request)
    everything = state.local.overview()
    see_all = state.settings.api_users_see_all
    shown = Overview(
        [r for r in everything.requests if may_see(caller, r.group or "default", r.owner or "default", see_all)],
        [q for q in everything.task_queues if may_see(caller, *task_queue_account(q.id), see_all)],
        everything.parked if caller.operator else [],
    )
    return {**shown.to_json(), "parked_jobs": [asdict(p) for p in shown.parked]}


@router.get("/requests/{request_id}")
def status(request_id: str, request: Request, examples: int = 0, caller: Identity = Caller) -> dict[str, Any]:
    """One request (by id or unique name): its jobs by state, ETA, critical path."""
    state = api(request)
    rid = state.local.request_id(request_id)
    check_see(caller, f"request {rid}", *request_account(state.local.store, rid), state.settings.api_users_see_all)
    return state.local.status(rid, examples=examples).to_json()


@router.post("/requests/{request_id}/cancel")
def cancel(request_id: str, body: Reason, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Cancel every unfinished job of a request."""
    state = api(request)
    rid = state.local.request_id(request_id)
    check_act(caller, f"request {rid}", *request_account(state.local.store, rid))
    line = state.local.cancel(rid, body.reason, by=caller.user)
    state.done(request, caller, "cancel", rid, reason=body.reason)
    return {"result": line}


@router.post("/cancel/{target}")
def cancel_target(target: str, body: Reason, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """``pilotfish cancel TARGET``: a request (by id) or else a job."""
    state = api(request)
    store = state.local.store
    try:
        account, what = request_account(store, target), f"request {target}"
    except NotFound:
        try:
            account, what = job_account(store, target), f"job {target}"
        except NotFound:
            raise NotFound(f"no request or job {target!r}") from None
    check_act(caller, what, *account)
    line = state.local.cancel(target, body.reason, by=caller.user)
    state.done(request, caller, "cancel", target, reason=body.reason)
    return {"result": line}
