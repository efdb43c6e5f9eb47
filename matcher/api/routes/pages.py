"""The request page (issue 28, part 6): ``GET /v1/requests/{id}/page`` and each job's ``GET /v1/jobs/{job}/page``,
as HTML (:mod:`matcher.page`), with the JSON routes' authorization.

A link cannot carry an ``Authorization`` header, so these pages (and only these: every other route still wants the
header) also accept the token from the cookie ``pilotfish_page``. Opening a page once with ``?token=<token>`` sets
that cookie (HttpOnly, SameSite=Strict, Path=/v1, Secure over HTTPS, gone when the browser closes) and answers with
a small page that moves on to the same address without the token (a same-site navigation, so the strict cookie goes
with it), with ``Referrer-Policy: no-referrer``: the token never appears in a page, and leaves the address bar.
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from taskqueues.errors import PilotfishError, Unauthenticated

from ...page import job_page, request_page
from ...status import request_status
from ..authz import check_see, job_account, request_account
from ..identity import Identity
from ..state import api, identify

router = APIRouter(prefix="/v1", tags=["pages"])

#: The cookie that holds a page reader's token.
COOKIE = "pilotfish_page"

#: No script, nothing from elsewhere: the pages are HTML and inline SVG with one inline style sheet.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def page_caller(request: Request) -> Identity:
    """The caller, by its ``Authorization`` header, else by the page cookie."""
    header = request.headers.get("authorization")
    cookie = request.cookies.get(COOKIE)
    try:
        return identify(request, header or (f"Bearer {cookie}" if cookie else None))
    except Unauthenticated:
        if header or cookie:
            raise
        raise Unauthenticated(
            "no token: open this page once as ...?token=<token> (the browser then keeps it in an HttpOnly cookie), "
            "or send Authorization: Bearer <token>"
        ) from None


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=HEADERS)


def _keep_token(request: Request, token: str) -> HTMLResponse:
    """Check the token, keep it in the page cookie, and move on to the same page without it."""
    identify(request, f"Bearer {token}")
    here = escape(request.url.path, quote=True)
    answer = _html(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={here}"><title>Pilotfish</title></head>'
        f'<body><p><a href="{here}">Continue</a></p></body></html>'
    )
    answer.set_cookie(
        COOKIE,
        token,
        path="/v1",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@router.get("/requests/{request_id}/page", response_class=HTMLResponse)
def request_view(
    request_id: str,
    request: Request,
    token: str | None = Query(None, description="A token to keep in the page cookie (once; the page moves on)."),
) -> HTMLResponse:
    """One request as a page: its jobs by state, progress over time, graph by rule, and its jobs with links to
    their events and output. Its owner's (a group admin's, an operator's) unless api_users_see_all."""
    if token:
        return _keep_token(request, token)
    caller = page_caller(request)
    state = api(request)
    rid = state.local.request_id(request_id)
    check_see(caller, f"request {rid}", *request_account(state.local.store, rid), state.settings.api_users_see_all)
    store = state.local.store
    jobs = store.request_jobs(rid)  # read once, for the status and the page
    return _html(request_page(request_status(store, rid, jobs=jobs), jobs, store.clock()))


@router.get("/jobs/{job}/page", response_class=HTMLResponse)
def job_view(
    job: str,
    request: Request,
    token: str | None = Query(None, description="A token to keep in the page cookie (once; the page moves on)."),
) -> HTMLResponse:
    """One job as a page: its events in order and the kept tail of its output."""
    if token:
        return _keep_token(request, token)
    caller = page_caller(request)
    state = api(request)
    store = state.local.store
    check_see(caller, f"job {job}", *job_account(store, job), state.settings.api_users_see_all)
    try:
        logs, why = state.local.log_view(job), ""
    except PilotfishError as e:
        logs, why = None, str(e)
    return _html(job_page(store.job(job), state.local.events(job), logs, why))
