"""The API's application: its state (the local :class:`~matcher.client.Client` it calls, the authenticator, the
audit log, the rate limiter), the caller dependency, the error answers, and the routers of :mod:`.routes`.

Every answer that is not a success is JSON ``{"error": "<one line>", "kind": "<error class>"}``: 400 for input that
is wrong, 401 (with ``WWW-Authenticate: Bearer``) without a valid credential, 403 for what the caller may not do,
404 for what does not exist, 409 for what has already ended or whose state refuses the call (a hold of a running
job), 413 for a body too big, 429 (``Retry-After``) past the caller's rate, 503 when the store does not answer,
504 past ``api_timeout``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from taskqueues import __version__
from taskqueues.errors import (
    PilotfishError,
    ValidationError,
)
from taskqueues.settings import Settings

from .errors import STATUS as ERROR_STATUS
from .identity import Identity
from .limits import BodyLimit, TimeLimit, retry_after
from .state import Api, RateLimited, api, origin


class Json(JSONResponse):
    """JSON that keeps an infinite value (a share's usage rank can be one) as Python's json writes it."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


#: HTTP status by error class (the first that matches); any other PilotfishError is 400.
STATUS: list[tuple[type[Exception], int]] = [*ERROR_STATUS, (RateLimited, 429)]


def _status(exc: Exception) -> int:
    return next((code for kind, code in STATUS if isinstance(exc, kind)), 400)


async def _refused(request: Request, exc: Exception) -> JSONResponse:
    code = _status(exc)
    state = api(request)
    who: Identity | None = getattr(request.state, "caller", None)
    if request.method != "GET" or code in (401, 403):
        action = f"{request.method} {request.url.path}"
        state.audit.record(who, action, request.url.path, f"{code} {exc}", origin(request))
    headers: dict[str, str] = {}
    if code == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="pilotfish"'
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = retry_after(exc.wait)
    return Json({"error": str(exc), "kind": type(exc).__name__}, status_code=code, headers=headers)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """A body or parameter FastAPI could not read: one line naming where."""
    assert isinstance(exc, RequestValidationError)
    problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()]
    return await _refused(request, ValidationError("; ".join(problems[:10]) or "invalid request"))


async def _http(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own refusals (no such path, method not allowed) in the same one-line form."""
    assert isinstance(exc, StarletteHTTPException)
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return Json({"error": message, "kind": "HTTPError"}, status_code=exc.status_code, headers=exc.headers)


def create_app(settings: Settings) -> FastAPI:
    """The API of the deployment these settings name."""
    from .routes import admin, jobs, lifecycle, pages, pilots, requests, shares

    app = FastAPI(
        title="Pilotfish",
        version=__version__,
        description="The HTTP API of a Pilotfish deployment: every call but /healthz needs a bearer token.",
        default_response_class=Json,
    )
    app.state.api = Api.of(settings)
    app.add_exception_handler(PilotfishError, _refused)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    for module in (requests, jobs, lifecycle, pilots, shares, admin, pages):
        app.include_router(module.router)
    app.add_middleware(TimeLimit, seconds=settings.api_timeout)
    app.add_middleware(BodyLimit, limit=settings.api_max_body)
    return app


def app_from_environment() -> FastAPI:
    """The app of the settings the environment names: what each ``pilotfish serve --workers N`` process builds
    (sealed, as the parent: non-dumpable, listed for ``down``)."""
    from taskqueues.credentials import seal

    seal()
    return create_app(Settings.load())
