"""The HTTP API against a real redis-server (FastAPI's TestClient on the real app): who may do what, and the
guards (body size, rate, errors as one JSON line)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from taskqueues.store import Store
from taskqueues.store.tokens import Tokens

from .conftest import HELLO, bearer

Tokens_ = Callable[[], dict[str, str]]


def _submit(http: TestClient, token: str, **body: Any) -> Any:
    return http.post("/v1/requests", json={"workflow": HELLO, **body}, headers=bearer(token))


def _post_paths(http: TestClient) -> list[str]:
    """Every POST path of the served schema, its parameters filled in."""
    schema = http.get("/openapi.json").json()
    paths = [re.sub(r"\{[^}]+\}", "1", p) for p, ops in schema["paths"].items() if "post" in ops]
    assert len(paths) >= 6, paths  # submit, the cancels, kill, drain, shares
    return paths


def test_openapi_and_docs_are_served(http: TestClient) -> None:
    schema = http.get("/openapi.json").json()
    assert "/v1/requests" in schema["paths"] and "/v1/jobs/{job}/kill" in schema["paths"]
    docs = http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_every_post_path_refuses_a_call_without_a_valid_token(http: TestClient, api_store: Store) -> None:
    forged = "pft_0123456789ab_" + "x" * 43
    for path in _post_paths(http):
        for headers in ({}, bearer(forged), bearer("not-a-token"), {"Authorization": "Basic YTpi"}):
            answer = http.post(path, json={"workflow": HELLO, "policy": None}, headers=headers)
            assert answer.status_code == 401, (path, headers, answer.text)
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert set(answer.json()) == {"error", "kind"} and answer.json()["kind"] == "Unauthenticated"
    assert api_store.requests() == {}  # nothing was stored


def test_a_users_token_gets_403_on_every_operator_path(http: TestClient, tokens: Tokens_) -> None:
    alice = tokens()["alice"]
    for path in ("/v1/pilots/p1/drain", "/v1/shares"):
        answer = http.post(path, json={"policy": None}, headers=bearer(alice))
        assert answer.status_code == 403 and "operators only" in answer.json()["error"], answer.text
    assert http.get("/v1/audit", headers=bearer(alice)).status_code == 403


def test_expired_revoked_and_forged_tokens_are_refused_and_the_job_untouched(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    made = tokens()
    request = _submit(http, made["alice"]).json()
    job = request["ids"]["a"]
    past = Tokens(api_store.client, api_store.keys, clock=lambda: time.time() - 7200)
    expired = past.create("alice", ["prod"], "user", 3600)[1]
    revoked_record, revoked = api_store.tokens.create("alice", ["prod"], "user", 3600)
    api_store.tokens.revoke(revoked_record.id)
    forged = made["alice"][:-4] + ("AAAA" if not made["alice"].endswith("AAAA") else "BBBB")
    for token, why in ((expired, "is expired"), (revoked, "is revoked"), (forged, "wrong secret")):
        answer = http.post(f"/v1/jobs/{job}/cancel", json={}, headers=bearer(token))
        assert answer.status_code == 401 and why in answer.json()["error"], answer.text
        assert http.get(f"/v1/jobs/{job}", headers=bearer(token)).status_code == 401
    assert api_store.job(job).state.value == "waiting"


def test_alice_cannot_submit_as_bob_nor_into_a_group_she_is_not_in(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    alice = tokens()["alice"]
    answer = _submit(http, alice, owner="bob")
    assert answer.status_code == 403 and "alice may not submit as bob" in answer.json()["error"]
    answer = http.post("/v1/requests", json={"workflow": {**HELLO, "owner": "bob"}}, headers=bearer(alice))
    assert answer.status_code == 403
    answer = _submit(http, alice, group="dev")
    assert answer.status_code == 403 and "alice is not in group dev" in answer.json()["error"]
    assert api_store.requests() == {}
    done = _submit(http, alice)
    assert done.status_code == 201, done.text
    record = api_store.request(done.json()["request"])
    assert (record["owner"], record["group"]) == ("alice", "prod")  # the caller and her group


def test_alices_cancel_of_bobs_job_is_refused_an_operators_succeeds(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    made = tokens()
    bobs = _submit(http, made["bob"], group="dev").json()
    job = bobs["ids"]["a"]
    paths = (f"/v1/jobs/{job}/cancel", f"/v1/jobs/{job}/kill", f"/v1/requests/{bobs['request']}/cancel")
    for path in (*paths, f"/v1/cancel/{job}", f"/v1/cancel/{bobs['request']}"):
        answer = http.post(path, json={}, headers=bearer(made["alice"]))
        assert answer.status_code == 403 and "belongs to bob" in answer.json()["error"], answer.text
    carol = http.post(f"/v1/jobs/{job}/cancel", json={}, headers=bearer(made["carol"]))  # admin of prod, not dev
    assert carol.status_code == 403
    assert api_store.job(job).state.value == "waiting"
    answer = http.post(f"/v1/requests/{bobs['request']}/cancel", json={}, headers=bearer(made["root"]))
    assert answer.status_code == 200 and answer.json()["result"].startswith(f"request {bobs['request']}:")
    assert api_store.job(job).state.value == "cancelled"
    again = _submit(http, made["bob"], group="dev").json()["ids"]["a"]
    dave = http.post(f"/v1/jobs/{again}/kill", json={"reason": "dev admin"}, headers=bearer(made["dave"]))
    assert dave.status_code == 200, dave.text  # the admin of bob's group dev
    assert api_store.job(again).state.value == "cancelled"


def test_users_see_only_their_own_unless_the_deployment_says_otherwise(
    make_api: Callable[..., TestClient], tokens: Tokens_
) -> None:
    made = tokens()
    private = make_api()
    alices = _submit(private, made["alice"]).json()
    bobs = _submit(private, made["bob"]).json()

    def owners(http: TestClient, who: str) -> set[str]:
        rows = http.get("/v1/jobs", params={"state": "all"}, headers=bearer(made[who])).json()["jobs"]
        return {row["owner"] for row in rows}

    assert owners(private, "alice") == {"alice"}
    assert owners(private, "carol") == {"alice", "bob"}  # group admin of prod: both submitted there
    assert owners(private, "root") == {"alice", "bob"}
    seen = private.get("/v1/requests", headers=bearer(made["alice"])).json()
    assert [r["id"] for r in seen["requests"]] == [alices["request"]]
    assert seen["task_queues"] and all(q["id"].split(".")[1:3] == ["prod", "alice"] for q in seen["task_queues"])
    answer = private.get(f"/v1/requests/{bobs['request']}", headers=bearer(made["alice"]))
    assert answer.status_code == 403
    job = bobs["ids"]["a"]
    for path in (f"/v1/jobs/{job}", f"/v1/jobs/{job}/logs", f"/v1/jobs/{job}/explain"):
        assert private.get(path, headers=bearer(made["alice"])).status_code == 403, path
    public = make_api(api_users_see_all=True)
    assert owners(public, "alice") == {"alice", "bob"}
    assert public.get(f"/v1/jobs/{job}/explain", headers=bearer(made["alice"])).status_code == 200
    # ... but seeing is not acting
    assert public.post(f"/v1/jobs/{job}/cancel", json={}, headers=bearer(made["alice"])).status_code == 403


def test_a_private_listing_pages_past_other_users_jobs(http: TestClient, tokens: Tokens_) -> None:
    made = tokens()
    for _ in range(3):
        _submit(http, made["bob"])
    _submit(http, made["alice"])
    answer = http.get("/v1/jobs", params={"state": "all", "limit": 1}, headers=bearer(made["alice"])).json()
    assert [r["owner"] for r in answer["jobs"]] == ["alice"] and answer["more"] is True


def test_rate_limit_answers_429_with_retry_after(make_api: Callable[..., TestClient], tokens: Tokens_) -> None:
    http = make_api(api_rate=0.5, api_rate_burst=3)
    made = tokens()
    codes = [http.get("/v1/whoami", headers=bearer(made["alice"])).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    answer = http.get("/v1/whoami", headers=bearer(made["alice"]))
    assert answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1
    assert "too many calls" in answer.json()["error"]
    assert http.get("/v1/whoami", headers=bearer(made["bob"])).status_code == 200  # per identity
    guesses = [http.get("/v1/whoami", headers=bearer(f"pft_0123456789ab_{i}")).status_code for i in range(4)]
    assert guesses == [401, 401, 401, 429]  # refused credentials count against their address


def test_a_body_over_the_limit_is_refused_with_413_and_nothing_stored(
    make_api: Callable[..., TestClient], tokens: Tokens_, api_store: Store
) -> None:
    http = make_api(api_max_body=2000)
    big = {"name": "big", "jobs": [{"name": f"j{i}", "command": "true"} for i in range(200)]}
    answer = http.post("/v1/requests", json={"workflow": big}, headers=bearer(tokens()["alice"]))
    assert answer.status_code == 413 and "api_max_body" in answer.json()["error"]
    assert api_store.requests() == {}


def test_errors_are_one_json_line_naming_what_is_wrong(http: TestClient, tokens: Tokens_) -> None:
    alice = tokens()["alice"]
    bad = {"workflow": {"name": "w", "jobs": [{"name": "x"}]}, "source": "w.toml"}
    answer = http.post("/v1/requests", json=bad, headers=bearer(alice))
    assert answer.status_code == 400 and answer.json()["error"].startswith("w.toml: job 'x'"), answer.text
    answer = http.post("/v1/requests", json={"nothing": 1}, headers=bearer(alice))
    assert answer.status_code == 400 and "workflow" in answer.json()["error"]
    answer = http.get("/v1/nowhere", headers=bearer(alice))
    assert answer.status_code == 404 and answer.json() == {"error": "GET /v1/nowhere: Not Found", "kind": "HTTPError"}
    answer = http.get("/v1/jobs/999", headers=bearer(alice))
    assert answer.status_code == 404 and answer.json() == {"error": "no job '999'", "kind": "NotFound"}


def test_every_change_and_refusal_is_audited_in_the_file_and_the_store(
    http: TestClient, tokens: Tokens_, api_store: Store, api_settings: Any
) -> None:
    made = tokens()
    request = _submit(http, made["alice"]).json()
    http.post(f"/v1/jobs/{request['ids']['a']}/cancel", json={}, headers=bearer(made["bob"]))
    http.post(f"/v1/jobs/{request['ids']['a']}/cancel", json={}, headers=bearer(made["alice"]))
    http.post("/v1/shares", json={"policy": None})
    path = Path(api_settings.state_dir) / "logs" / "audit.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["who"], e["action"], e["outcome"][:3]) for e in lines] == [
        ("alice", "submit", "ok"),
        ("bob", f"POST /v1/jobs/{request['ids']['a']}/cancel", "403"),
        ("alice", "cancel", "ok"),
        ("-", "POST /v1/shares", "401"),
    ]
    assert lines[0]["target"] == request["request"] and lines[0]["from"] == "testclient"
    assert api_store.audit.read(10) == lines
    assert http.get("/v1/audit", headers=bearer(made["root"])).json()["entries"] == lines
