"""Tokens the deployment issues to its users for the API (``pilotfish token create``), kept only as hashes.

A token is ``pft_<id>_<secret>``: ``id`` (12 hex digits) names its record, ``secret`` is 256 random bits. The
record (``keys.tokens``, field ``<id>``) holds the user, the groups, the role (:data:`ROLES`), the creation and
expiry times, when it was revoked, and the SHA-256 of the whole token: a random secret of that size needs no
slow hash (nothing to guess from a dictionary), and the token itself is printed once and never stored. Field
``used:<id>`` holds its last use, written at most every :data:`USE_RESOLUTION` seconds, apart from the record so
that a use never rewrites (and never undoes) a revocation. The hash lives outside the pilots' key pattern
(:attr:`Keys.auth_base`): a pilot's ACL user can neither read nor write it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import redis

from ..errors import NotFound, Unauthenticated, ValidationError
from .fairshare import check_name
from .guard import client_url, guarded
from .keys import Keys
from .records import text

#: Roles, weakest first: a user acts on its own jobs, a group admin on its groups' jobs, an operator on everything.
ROLES = ("user", "group-admin", "operator")
PREFIX = "pft_"
_ID_HEX = 12
#: Seconds between two writes of a token's last use (a busy client does not write on every call).
USE_RESOLUTION = 60.0


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Token:
    """One issued token's record (never the token itself)."""

    id: str
    user: str
    groups: tuple[str, ...]
    role: str
    created: float
    expires: float | None
    sha256: str
    revoked: float | None = None
    last_used: float | None = None

    def state(self, now: float) -> str:
        """active, expired or revoked."""
        if self.revoked is not None:
            return "revoked"
        return "expired" if self.expires is not None and now >= self.expires else "active"

    def to_json(self) -> dict[str, Any]:
        """The record as ``token list --json`` shows it (no hash)."""
        out = asdict(self)
        out.pop("sha256")
        out["groups"] = list(self.groups)
        return out

    def stored(self) -> str:
        out = asdict(self)
        out.pop("last_used")
        out["groups"] = list(self.groups)
        return json.dumps(out, sort_keys=True)

    @classmethod
    def parse(cls, raw: Any, last_used: Any = None) -> Token:
        data = json.loads(text(raw))
        return cls(
            str(data["id"]),
            str(data["user"]),
            tuple(str(g) for g in data["groups"]),
            str(data["role"]),
            float(data["created"]),
            None if data.get("expires") is None else float(data["expires"]),
            str(data["sha256"]),
            None if data.get("revoked") is None else float(data["revoked"]),
            None if last_used is None else float(text(last_used)),
        )


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValidationError(f"role must be one of {', '.join(ROLES)}, got {role!r}", field="role")
    return role


class Tokens:
    """The issued tokens of one community (see the module doc)."""

    def __init__(self, client: redis.Redis, keys: Keys, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.keys = keys
        self.clock = clock
        self.where = client_url(client)

    @guarded("creating a token")
    def create(
        self, user: str, groups: Sequence[str], role: str = "user", lifetime: float | None = None
    ) -> tuple[Token, str]:
        """A new token for ``user`` (valid ``lifetime`` seconds, None: until revoked); returns its record and
        the token, which is not kept anywhere."""
        check_name(user, "user")
        for group in groups:
            check_name(group, "group")
        check_role(role)
        if lifetime is not None and not lifetime > 0:
            raise ValidationError(f"a token's lifetime must be positive, got {lifetime!r} s", field="expires")
        now = self.clock()
        while True:
            ident = secrets.token_hex(_ID_HEX // 2)
            token = f"{PREFIX}{ident}_{secrets.token_urlsafe(32)}"
            record = Token(
                ident,
                user,
                tuple(dict.fromkeys(groups)),
                role,
                now,
                None if lifetime is None else now + lifetime,
                digest(token),
            )
            if self.client.hsetnx(self.keys.tokens, ident, record.stored()):
                return record, token

    @guarded("listing tokens")
    def list(self) -> list[Token]:
        """Every issued token's record, oldest first (expired and revoked ones too)."""
        raw = {text(k): v for k, v in self.client.hgetall(self.keys.tokens).items()}
        out = [Token.parse(v, raw.get(f"used:{k}")) for k, v in raw.items() if not k.startswith("used:")]
        return sorted(out, key=lambda t: (t.created, t.id))

    @guarded("reading a token")
    def get(self, ident: str) -> Token:
        raw, used = self.client.hmget(self.keys.tokens, [ident, f"used:{ident}"])
        if raw is None or ident.startswith("used:"):
            raise NotFound(f"no token {ident!r}")
        return Token.parse(raw, used)

    @guarded("revoking a token")
    def revoke(self, ident: str) -> Token:
        """Revoke token ``ident`` (from now on it is refused); revoking twice keeps the first time."""
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.keys.tokens)  # type: ignore[no-untyped-call]
                    raw = pipe.hget(self.keys.tokens, ident)
                    if raw is None or ident.startswith("used:"):
                        pipe.unwatch()
                        raise NotFound(f"no token {ident!r}")
                    record = Token.parse(raw)
                    if record.revoked is not None:
                        pipe.unwatch()
                        return record
                    record = replace(record, revoked=self.clock())
                    pipe.multi()
                    pipe.hset(self.keys.tokens, ident, record.stored())
                    pipe.execute()
                    return record
                except redis.WatchError:
                    continue

    @guarded("checking a token")
    def verify(self, token: str) -> Token:
        """The record of a valid token; :class:`Unauthenticated` saying why otherwise (unknown, forged,
        expired, revoked). Notes its use (at most every :data:`USE_RESOLUTION` seconds)."""
        ident = token[len(PREFIX) : len(PREFIX) + _ID_HEX] if token.startswith(PREFIX) else ""
        if not ident or token[len(PREFIX) + _ID_HEX : len(PREFIX) + _ID_HEX + 1] != "_":
            raise Unauthenticated("not a Pilotfish token (pft_<id>_<secret>)")
        raw, used = self.client.hmget(self.keys.tokens, [ident, f"used:{ident}"])
        if raw is None:
            raise Unauthenticated(f"unknown token {ident}")
        record = Token.parse(raw, used)
        if not hmac.compare_digest(record.sha256, digest(token)):
            raise Unauthenticated(f"token {ident}: wrong secret")
        now = self.clock()
        state = record.state(now)
        if state != "active":
            raise Unauthenticated(f"token {ident} is {state}")
        if record.last_used is None or now - record.last_used >= USE_RESOLUTION:
            self.client.hset(self.keys.tokens, f"used:{ident}", repr(now))
        return record
