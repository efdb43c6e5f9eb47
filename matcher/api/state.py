"""What the API's routes share: its state (:class:`Api`: the local :class:`~matcher.client.Client` it calls, the
authenticator, the audit log, the rate limiter) and the caller dependency (:data:`Caller`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request

from taskqueues.errors import PilotfishError, Unauthenticated
from taskqueues.settings import Settings

from ..client import Client
from .audit import AuditLog, audit_file
from .auth import Authenticator
from .identity import Identity
from .limits import RateLimiter, retry_after


class RateLimited(PilotfishError):
    """A caller went over its rate (``api_rate``, ``api_rate_burst``): 429."""

    def __init__(self, who: str, wait: float) -> None:
        super().__init__(f"{who}: too many calls (api_rate); retry in {retry_after(wait)} s")
        self.wait = wait


@dataclass
class Api:
    """What the routes share."""

    settings: Settings
    local: Client
    auth: Authenticator
    audit: AuditLog
    limiter: RateLimiter

    @classmethod
    def of(cls, settings: Settings) -> Api:
        local = Client(settings=settings)
        store = local.store  # built now: the threads that serve calls share it
        return cls(
            settings,
            local,
            Authenticator(store, settings),
            AuditLog(store, audit_file(settings)),
            RateLimiter(settings.api_rate, settings.api_rate_burst),
        )

    def done(self, request: Request, caller: Identity, action: str, target: str, **extra: Any) -> None:
        """Note a call that changed something in the audit log."""
        self.audit.record(caller, action, target, "ok", origin(request), **extra)


def origin(request: Request) -> str:
    """The caller's address (Starlette's peer, ``scope["client"]``), or "-"."""
    peer = request.scope.get("client")
    return str(peer[0]) if peer else "-"


def api(request: Request) -> Api:
    state: Api = request.app.state.api
    return state


def caller(request: Request) -> Identity:
    """The authenticated caller (401 otherwise), within its rate (429 otherwise; refused credentials count
    against their address's rate)."""
    return identify(request, request.headers.get("authorization"))


def identify(request: Request, authorization: str | None) -> Identity:
    """The caller this ``Authorization`` value names (401 otherwise), within its rate (429 otherwise)."""
    state = api(request)
    try:
        who = state.auth.identify(authorization)
    except Unauthenticated:
        # Refused credentials count against the address they come from: guessing is as slow as the rate.
        wait = state.limiter.take(f"address {origin(request)}")
        if wait:
            raise RateLimited(origin(request), wait) from None
        raise
    request.state.caller = who
    wait = state.limiter.take(f"{who.user}|{who.via}")
    if wait:
        raise RateLimited(who.user, wait)
    return who


Caller = Depends(caller)
