"""JWTs of an OIDC issuer: signed by a key pair made here, verified against a JWKS served on loopback by the test
(a real HTTP server the API fetches, as it would the issuer's); expired, wrong audience, wrong issuer, wrong key
and ``alg: none`` are all refused, and nothing is stored."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient
from jwt.algorithms import RSAAlgorithm

from taskqueues.store import Store

from .conftest import HELLO, bearer

ISSUER = "https://iam.example.org/"
AUDIENCE = "https://pilotfish.example.org"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def keys() -> dict[str, rsa.RSAPrivateKey]:
    return {"good": _key(), "other": _key()}


@pytest.fixture
def jwks_url(keys: dict[str, rsa.RSAPrivateKey]) -> Iterator[str]:
    """The issuer's JWKS (the good key only, kid "k1"), served on a free loopback port."""
    jwk = json.loads(RSAAlgorithm.to_jwk(keys["good"].public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/jwks"
    server.shutdown()
    server.server_close()


@pytest.fixture
def oidc(make_api: Callable[..., TestClient], jwks_url: str) -> TestClient:
    return make_api(
        api_oidc_issuer=ISSUER.rstrip("/"),
        api_oidc_audience=AUDIENCE,
        api_oidc_jwks_url=jwks_url,
        api_oidc_operator_groups="/pilotfish/admins,ops",
    )


def _token(key: rsa.RSAPrivateKey, kid: str = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER.rstrip("/"),
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 600,
        "wlcg.groups": ["/prod", "/prod/analysis", "/dev"],
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


def test_a_valid_jwt_names_the_user_and_the_wlcg_groups(oidc: TestClient, keys: dict[str, Any]) -> None:
    answer = oidc.get("/v1/whoami", headers=bearer(_token(keys["good"])))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "user": "alice",
        "groups": ["prod", "dev"],  # a subgroup path is not a Pilotfish group name: ignored
        "role": "user",
        "via": f"jwt {ISSUER.rstrip('/')}",
    }
    admin = oidc.get("/v1/whoami", headers=bearer(_token(keys["good"], **{"wlcg.groups": ["/ops"]})))
    assert admin.json()["role"] == "operator"
    done = oidc.post("/v1/requests", json={"workflow": HELLO, "group": "dev"}, headers=bearer(_token(keys["good"])))
    assert done.status_code == 201, done.text


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("expired", "JWT expired"),
        ("audience", "audience is not"),
        ("issuer", "issuer is not"),
        ("key", "signature does not verify"),
        ("unknown kid", "not signed by a key of"),
        ("none", "algorithm 'none' refused"),
        ("hs256", "algorithm 'HS256' refused"),
        ("no sub", "sub"),
    ],
)
def test_bad_jwts_are_refused_and_nothing_stored(
    oidc: TestClient, keys: dict[str, Any], api_store: Store, case: str, reason: str
) -> None:
    good, other = keys["good"], keys["other"]
    now = int(time.time())
    token = {
        "expired": lambda: _token(good, iat=now - 7200, exp=now - 3600),
        "audience": lambda: _token(good, aud="https://elsewhere.example.org"),
        "issuer": lambda: _token(good, iss="https://evil.example.org"),
        "key": lambda: _token(other),  # kid k1, signed by another key
        "unknown kid": lambda: _token(good, kid="k9"),
        "none": lambda: jwt.encode(
            {"iss": ISSUER.rstrip("/"), "aud": AUDIENCE, "sub": "root", "exp": now + 600}, None, algorithm="none"
        ),
        "hs256": lambda: jwt.encode(
            {"iss": ISSUER.rstrip("/"), "aud": AUDIENCE, "sub": "root", "exp": now + 600},
            "a" * 32,
            algorithm="HS256",
            headers={"kid": "k1"},
        ),
        "no sub": lambda: jwt.encode(
            {"iss": ISSUER.rstrip("/"), "aud": AUDIENCE, "exp": now + 600},
            good,
            algorithm="RS256",
            headers={"kid": "k1"},
        ),
    }[case]()
    answer = oidc.post("/v1/requests", json={"workflow": HELLO}, headers=bearer(token))
    assert answer.status_code == 401 and reason in answer.json()["error"], answer.text
    assert api_store.requests() == {}


def test_without_an_issuer_a_jwt_is_refused(http: TestClient, keys: dict[str, Any]) -> None:
    answer = http.get("/v1/whoami", headers=bearer(_token(keys["good"])))
    assert answer.status_code == 401 and "trusts no OIDC issuer" in answer.json()["error"]
