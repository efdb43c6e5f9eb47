"""JWTs of an OIDC issuer (the WLCG Common JWT profile): verified against the issuer's JWKS, claims mapped.

The token must be signed with an asymmetric algorithm (:data:`ALGORITHMS`; ``none`` and the HMAC ones are
refused before anything else) by a key of the issuer's JWKS (``api_oidc_jwks_url``, else the ``jwks_uri`` of the
issuer's discovery document), carry the configured issuer and audience, and not be expired. The user is the
``api_oidc_user_claim`` (``sub``), the groups the ``api_oidc_groups_claim`` (``wlcg.groups``: ``/prod`` is group
``prod``; a subgroup path, which is not a Pilotfish group name, is ignored). A member of one of
``api_oidc_operator_groups`` is an operator, anyone else a user.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import jwt

from taskqueues.errors import ConfigError, Unauthenticated, ValidationError
from taskqueues.settings import Settings
from taskqueues.store import check_account_name as check_name

from .identity import OPERATOR, USER, Identity

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: The WLCG profile's audience that any service accepts, when none is configured.
WLCG_ANY = "https://wlcg.cern.ch/jwt/v1/any"
#: Seconds of clock skew allowed on exp, nbf, iat.
LEEWAY = 30


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class OidcVerifier:
    """Verifies one issuer's JWTs (see the module doc)."""

    def __init__(self, settings: Settings) -> None:
        self.issuer = settings.api_oidc_issuer.rstrip("/")
        self.audience = settings.api_oidc_audience or settings.api_url or WLCG_ANY
        self.user_claim = settings.api_oidc_user_claim
        self.groups_claim = settings.api_oidc_groups_claim
        self.operators = {g.strip().lstrip("/") for g in settings.api_oidc_operator_groups.split(",") if g.strip()}
        self._jwks_url = settings.api_oidc_jwks_url
        self._keys: jwt.PyJWKClient | None = None

    def _client(self) -> jwt.PyJWKClient:
        if self._keys is None:
            url = self._jwks_url or self._discover()
            self._keys = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=10)
        return self._keys

    def _discover(self) -> str:
        where = f"{self.issuer}/.well-known/openid-configuration"
        try:
            with urllib.request.urlopen(where, timeout=10) as answer:
                return str(json.load(answer)["jwks_uri"])
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"api_oidc_issuer: cannot read jwks_uri from {where}: {exc}") from None

    def verify(self, token: str) -> Identity:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"not a JWT: {exc}") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthenticated(f"JWT algorithm {alg!r} refused (accepted: {', '.join(ALGORITHMS)})")
        try:
            key = self._client().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientError as exc:
            raise Unauthenticated(f"JWT not signed by a key of {self.issuer}'s JWKS ({exc})") from None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud", self.user_claim]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("JWT expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated(f"JWT audience is not {self.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated(f"JWT issuer is not {self.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated(f"JWT signature does not verify with {self.issuer}'s key") from None
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"JWT refused: {exc}") from None
        return self.identity(claims)

    def identity(self, claims: dict[str, Any]) -> Identity:
        user = claims.get(self.user_claim)
        try:
            check_name(user, "user")
        except ValidationError:
            raise Unauthenticated(
                f"JWT claim {self.user_claim!r} ({user!r}) is not a Pilotfish user name: map it, or use a token"
            ) from None
        raw = claims.get(self.groups_claim, [])
        groups = []
        for value in raw if isinstance(raw, list) else [raw]:
            name = str(value).lstrip("/")
            try:
                groups.append(check_name(name, "group"))
            except ValidationError:
                continue
        role = OPERATOR if self.operators & set(groups) else USER
        return Identity(str(user), tuple(dict.fromkeys(groups)), role, f"jwt {self.issuer}")
