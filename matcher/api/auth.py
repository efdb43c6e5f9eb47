"""Who is calling: a bearer token the deployment issued (``pft_...``, :mod:`taskqueues.store.tokens`) or a JWT of
the configured OIDC issuer (:mod:`.oidc`). Anything else, or nothing, is :class:`Unauthenticated` (401)."""

from __future__ import annotations

from taskqueues.errors import Unauthenticated
from taskqueues.settings import Settings
from taskqueues.store import Store

from .identity import Identity
from .oidc import OidcVerifier, looks_like_jwt


class Authenticator:
    """Turns an ``Authorization`` header into an :class:`Identity`."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.oidc = OidcVerifier(settings) if settings.api_oidc_issuer else None

    def identify(self, authorization: str | None) -> Identity:
        if not authorization:
            raise Unauthenticated("no token: send Authorization: Bearer <token>")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be Bearer <token>")
        if token.startswith("pft_"):
            record = self.store.tokens.verify(token)
            return Identity(record.user, record.groups, record.role, f"token {record.id}")
        if looks_like_jwt(token):
            if self.oidc is None:
                raise Unauthenticated("a JWT, but this API trusts no OIDC issuer (api_oidc_issuer is not set)")
            return self.oidc.verify(token)
        raise Unauthenticated("not a Pilotfish token (pft_...) nor a JWT")
