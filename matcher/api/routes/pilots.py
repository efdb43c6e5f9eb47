"""Pilots: drain one (operators only)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from ..authz import require_operator
from ..identity import Identity
from ..state import Caller, api

router = APIRouter(prefix="/v1", tags=["pilots"])


class Drain(BaseModel):
    shutdown: bool = False
    reason: str | None = None


@router.post("/pilots/{pilot}/drain")
def drain(pilot: str, body: Drain, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Drain a live pilot (no new work; its payloads finish), or with ``shutdown`` give them back now."""
    require_operator(caller, f"drain pilot {pilot}")
    state = api(request)
    line = state.local.drain(pilot, shutdown=body.shutdown, reason=body.reason)
    state.done(request, caller, "shutdown" if body.shutdown else "drain", pilot)
    return {"result": line}
