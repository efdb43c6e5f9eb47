"""Shares: the policy with each group's usage (anyone with a token), storing or removing it (operators)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from ..authz import require_operator
from ..identity import Identity
from ..state import Caller, api

router = APIRouter(prefix="/v1", tags=["shares"])


class Policy(BaseModel):
    policy: str | None = Field(description="The shares file's TOML text; null removes the stored policy.")
    source: str = Field("<policy>", description="The file's name, for messages.")


@router.get("/shares")
def shares(request: Request, caller: Identity = Caller) -> dict[str, Any]:
    """The stored policy's groups and limits (``{"policy": null}`` without one)."""
    return {"policy": api(request).local.shares()}


@router.post("/shares")
def set_shares(body: Policy, request: Request, caller: Identity = Caller) -> dict[str, str]:
    """Store (or, with a null policy, remove) the community's shares and limits policy."""
    require_operator(caller, "set the shares policy")
    state = api(request)
    line = state.local.set_shares(body.policy, body.source)
    state.done(request, caller, "shares off" if body.policy is None else "shares", body.source)
    return {"result": line}
