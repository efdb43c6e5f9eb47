"""Who am I, the audit log (operators), and the health probe (no token: Kubernetes asks it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from ..authz import require_operator
from ..identity import Identity
from ..state import Caller, api

router = APIRouter(tags=["admin"])


@router.get("/v1/whoami")
def whoami(caller: Identity = Caller) -> dict[str, object]:
    """The caller as the API knows it: user, groups, role, and the credential."""
    return caller.to_json()


@router.get("/v1/audit")
def audit(request: Request, limit: int = Query(50, ge=1, le=10_000), caller: Identity = Caller) -> dict[str, Any]:
    """The last entries of the audit log, oldest first."""
    require_operator(caller, "read the audit log")
    return {"entries": api(request).local.store.audit.read(limit)}


@router.get("/healthz")
def healthz(request: Request) -> dict[str, bool]:
    """200 when the API answers and its store does (one read)."""
    api(request).local.store.outstanding_work()
    return {"ok": True}
