"""Jobs: list them, one job's record, its output, why it waits; cancel or kill one."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from ...history import HistoryListing
from ...job_release import account_of_job
from ...joblist import JobRow, Listing
from ..authz import check_act, check_see, job_account, may_see, request_account
from ..identity import Identity
from ..state import Api, Caller, api

router = APIRouter(prefix="/v1", tags=["jobs"])

#: The most jobs a private listing reads to find ``limit`` of the caller's own.
PRIVATE_SCAN = 10_000


class Reason(BaseModel):
    reason: str = ""


def _visible(state: Api, caller: Identity, request: str | None, limit: int, **filters: Any) -> Listing:
    """The listing, only of jobs the caller may see: read in growing pages until ``limit`` of them are found."""
    see_all = state.settings.api_users_see_all or caller.operator
    if request is not None:
        request = state.local.request_id(request)
        check_see(caller, f"request {request}", *request_account(state.local.store, request), see_all)
        see_all = True  # a request's jobs are its owner's
    if see_all:
        return state.local.listing(request=request, limit=limit, **filters)
    read = limit
    while True:
        listing = state.local.listing(request=request, limit=read, **filters)
        rows = [r for r in listing.rows if may_see(caller, r.group, r.owner, False)]
        if len(rows) > limit or not listing.more or read >= PRIVATE_SCAN:
            return Listing(rows[:limit], len(rows) > limit or listing.more)
        read = min(PRIVATE_SCAN, read * 4)


@router.get("/jobs")
def jobs(
    request: Request,
    state_: Annotated[list[str] | None, Query(alias="state")] = None,
    request_id: str | None = Query(None, alias="request"),
    queue: str | None = None,
    task_queue: str | None = None,
    pilot: str | None = None,
    owner: str | None = None,
    group: str | None = None,
    limit: int = Query(100, ge=1),
    caller: Identity = Caller,
) -> dict[str, Any]:
    """Jobs as ``pilotfish jobs`` lists them (the caller's own unless api_users_see_all)."""
    filters = {"queue": queue, "task_queue": task_queue, "pilot": pilot, "owner": owner, "group": group}
    found = _visible(api(request), caller, request_id, limit, states=state_ or (), **filters)
    return found.to_json()


@router.get("/history")
def history(
    request: Request,
    since: str = "1d",
    until: str = "now",
    state_: Annotated[list[str] | None, Query(alias="state")] = None,
    owner: str | None = None,
    group: str | None = None,
    after: str | None = None,
    limit: int = Query(100, ge=1),
    caller: Identity = Caller,
) -> dict[str, Any]:
    """Jobs that ended in a time window, oldest end first, a page at a time (``pilotfish history``): the
    caller's own unless api_users_see_all (a group admin's: its groups' too)."""
    state = api(request)
    see_all = state.settings.api_users_see_all or caller.operator
    if not see_all and owner is None and group is None:
        owner = caller.user
    page = state.local.history(since, until, owner=owner, group=group, states=state_ or (), after=after, limit=limit)
    rows = page.rows if see_all else [r for r in page.rows if may_see(caller, r.group, r.owner, False)]
    return HistoryListing(rows, page.next).to_json()


@router.get("/jobs/{job}")
def job(job: str, request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """One job as a row of the listing."""
    state = api(request)
    record = state.local.store.job(job)
    account = account_of_job(state.local.store, record)
    check_see(caller, f"job {job}", *account, state.settings.api_users_see_all)
    return JobRow.of(record, state.local.store.clock(), account).to_json()


@router.get("/jobs/{job}/logs")
def logs(
    job: str, request: Request, stream: str | None = None, attempt: int | None = None, caller: Identity = Caller
) -> dict[str, Any]:
    """The kept tail of a job's stdout and stderr, and where its pilot keeps the files."""
    state = api(request)
    check_see(caller, f"job {job}", *job_account(state.local.store, job), state.settings.api_users_see_all)
    return state.local.log_view(job, stream=stream, attempt=attempt).to_json()


@router.get("/jobs/{job}/follow")
def follow(
    job: str, request: Request, stream: str | None = None, attempt: int | None = None, caller: Identity = Caller
) -> StreamingResponse:
    """What a running payload prints, as it prints it, until that attempt ends: one JSON object a line,
    ``{"stream": "out"|"err", "text": ...}`` (``logs --follow``)."""
    state = api(request)
    check_see(caller, f"job {job}", *job_account(state.local.store, job), state.settings.api_users_see_all)
    pieces = state.local.follow(job, stream=stream, attempt=attempt)
    lines = (json.dumps({"stream": name, "text": text}) + "\n" for name, text in pieces)
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.get("/jobs/{job}/explain")
def explain(job: str, request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """Why a job still waits (or what it does instead)."""
    state = api(request)
    check_see(caller, f"job {job}", *job_account(state.local.store, job), state.settings.api_users_see_all)
    return state.local.explain(job).to_json()


@router.post("/jobs/{job}/cancel")
def cancel(job: str, body: Reason, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Cancel one job: waiting, it ends now; running, its pilot stops it at once."""
    return _stop(job, body.reason or "cancelled by user", request, caller, kill=False)


@router.post("/jobs/{job}/kill")
def kill(job: str, body: Reason, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Kill one running job: its pilot terminates the payload at once."""
    return _stop(job, body.reason or "killed by user", request, caller, kill=True)


def _stop(job: str, reason: str, request: Request, caller: Identity, *, kill: bool) -> dict[str, str]:
    state = api(request)
    check_act(caller, f"job {job}", *job_account(state.local.store, job))
    by = caller.user  # the job's events name the caller
    line = state.local.kill(job, reason, by=by) if kill else state.local.cancel(job, reason, by=by)
    state.done(request, caller, "kill" if kill else "cancel", job, reason=reason)
    return {"result": line}
