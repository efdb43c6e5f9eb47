"""Hold, release, resubmit, update and events through the API (a real redis-server, the real app): a user acts
on its own jobs only, a group admin on its groups', an operator on everything; the events name the caller."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from taskqueues.store import Store

from .conftest import HELLO, bearer
from .test_api import _post_paths

Tokens_ = Callable[[], dict[str, str]]

#: Every changing lifecycle call, its body naming the job ``{job}`` or the request ``{request}``.
CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/hold", {"targets": ["{job}"], "reason": "mine now"}),
    ("/v1/hold", {"targets": ["{request}"]}),
    ("/v1/release", {"targets": ["{job}"]}),
    ("/v1/resubmit", {"targets": ["{job}"]}),
    ("/v1/resubmit", {"targets": ["{request}"], "states": ["failed"]}),
    ("/v1/jobs/{job}/update", {"priority": 60}),
    ("/v1/jobs/{job}/update", {"requirements": {"cpu": 2}}),
    ("/v1/update", {"jobs": ["{job}"], "priority": 60}),
]


def _submit(http: TestClient, token: str, group: str) -> dict[str, Any]:
    answer = http.post("/v1/requests", json={"workflow": HELLO, "group": group}, headers=bearer(token))
    assert answer.status_code == 201, answer.text
    done: dict[str, Any] = answer.json()
    return done


def _fill(value: Any, job: str, request: str) -> Any:
    if isinstance(value, str):
        return value.replace("{job}", job).replace("{request}", request)
    if isinstance(value, list):
        return [_fill(v, job, request) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, job, request) for k, v in value.items()}
    return value


def _events(store: Store, job: str) -> list[tuple[str | None, str, str]]:
    return [(e.source, e.state, e.by) for e in store.lifecycle.events(job)]


def test_the_new_post_paths_are_among_those_checked_for_401_without_a_token(http: TestClient) -> None:
    paths = _post_paths(http)  # what test_every_post_path_refuses_a_call_without_a_valid_token walks
    assert {"/v1/hold", "/v1/release", "/v1/resubmit", "/v1/jobs/1/update"} <= set(paths), paths
    for path in ("/v1/hold", "/v1/jobs/1/update"):
        assert http.post(path, json={"targets": ["1"]}).status_code == 401
    assert http.get("/v1/jobs/1/events").status_code == 401


def test_alice_and_another_groups_admin_cannot_change_bobs_job_bob_and_an_operator_can(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    made = tokens()
    bobs = _submit(http, made["bob"], "dev")
    job, request = bobs["ids"]["a"], bobs["request"]
    before, record = _events(api_store, job), api_store.job(job)
    for user in ("alice", "carol"):  # carol admins prod, bob's request is in dev
        for path, body in CHANGES:
            answer = http.post(_fill(path, job, request), json=_fill(body, job, request), headers=bearer(made[user]))
            assert answer.status_code == 403, (user, path, answer.text)
            assert f"{user} may not act on " in answer.json()["error"] and "belongs to bob" in answer.json()["error"]
        seen = http.get(f"/v1/jobs/{job}/events", headers=bearer(made[user]))
        assert seen.status_code == 403 and "may not see job" in seen.json()["error"]
    after = api_store.job(job)
    assert (after.state, after.priority, after.tq_id, after.held_by) == (
        record.state,
        record.priority,
        record.tq_id,
        record.held_by,
    )
    assert _events(api_store, job) == before  # nothing was recorded for the refused calls

    held = http.post("/v1/hold", json={"targets": [job], "reason": "look"}, headers=bearer(made["bob"]))
    assert held.status_code == 200, held.text
    assert held.json()["result"] == f"job {job}: held by bob (look): it is matched by no pilot until released"
    assert api_store.job(job).state.value == "held"
    refused = http.post("/v1/release", json={"targets": [job]}, headers=bearer(made["alice"]))
    assert refused.status_code == 403 and api_store.job(job).state.value == "held"
    released = http.post("/v1/release", json={"targets": [request]}, headers=bearer(made["root"]))
    assert released.status_code == 200 and released.json()["result"] == f"request {request}: 1 released by root"
    dave = http.post(f"/v1/jobs/{job}/update", json={"priority": 60}, headers=bearer(made["dave"]))  # admin of dev
    assert dave.status_code == 200 and dave.json()["result"].startswith(f"job {job}: updated: priority 0 -> 60")
    assert api_store.job(job).priority == 60

    shown = http.get(f"/v1/jobs/{job}/events", headers=bearer(made["bob"]))
    assert shown.status_code == 200, shown.text
    events = shown.json()
    assert events["job"] == job
    assert [(e["source"], e["state"], e["by"]) for e in events["events"]][-3:] == [
        ("waiting", "held", "bob"),
        ("held", "waiting", "root"),
        ("waiting", "waiting", "dave"),
    ]
    assert [e["by"] for e in events["events"]] == [e.by for e in api_store.lifecycle.events(job)]


def test_one_job_not_the_callers_refuses_the_whole_call(http: TestClient, tokens: Tokens_, api_store: Store) -> None:
    made = tokens()
    hers = _submit(http, made["alice"], "prod")["ids"]["a"]
    his = _submit(http, made["bob"], "dev")["ids"]["a"]
    answer = http.post("/v1/hold", json={"targets": [hers, his]}, headers=bearer(made["alice"]))
    assert answer.status_code == 403 and f"job {his}: it belongs to bob" in answer.json()["error"]
    assert api_store.job(hers).state.value == "waiting" and api_store.job(his).state.value == "waiting"
    missing = http.post("/v1/hold", json={"targets": [hers, "nosuch"]}, headers=bearer(made["alice"]))
    assert missing.status_code == 404 and missing.json()["error"] == "no job 'nosuch'"
    assert api_store.job(hers).state.value == "waiting"
    update = http.post("/v1/update", json={"jobs": [hers, his], "priority": 60}, headers=bearer(made["alice"]))
    assert update.status_code == 403 and f"job {his}: it belongs to bob" in update.json()["error"]
    assert api_store.job(hers).priority is None and api_store.job(his).priority is None
    both = http.post("/v1/update", json={"jobs": [hers, his], "priority": 60}, headers=bearer(made["root"]))
    assert both.status_code == 200 and both.json()["result"].count("updated: priority 0 -> 60") == 2
    assert api_store.job(hers).priority == 60 and api_store.job(his).priority == 60
    none = http.post("/v1/update", json={"jobs": [], "priority": 60}, headers=bearer(made["root"]))
    assert none.status_code == 400 and "name one job id or more" in none.json()["error"]


def test_the_events_name_the_caller_and_only_an_operator_may_name_another(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    made = tokens()
    hers = _submit(http, made["alice"], "prod")
    job = hers["ids"]["a"]
    before = _events(api_store, job)
    posed = http.post("/v1/hold", json={"targets": [job], "by": "bob"}, headers=bearer(made["alice"]))
    assert posed.status_code == 403 and posed.json()["error"].startswith("alice may not act as bob")
    assert _events(api_store, job) == before and api_store.job(job).state.value == "waiting"
    own = http.post("/v1/hold", json={"targets": [job], "by": "alice"}, headers=bearer(made["alice"]))
    assert own.status_code == 200 and _events(api_store, job)[-1] == ("waiting", "held", "alice")
    portal = http.post("/v1/release", json={"targets": [job], "by": "portal"}, headers=bearer(made["root"]))
    assert portal.status_code == 200 and _events(api_store, job)[-1] == ("held", "waiting", "portal")
    entries = [e for e in api_store.audit.read(20) if e["action"] in ("hold", "release")]
    assert [(e["who"], e["action"], e["target"], e["by"], e["outcome"]) for e in entries] == [
        ("alice", "hold", job, "alice", "ok"),
        ("root", "release", job, "portal", "ok"),
    ]
    refused = [e for e in api_store.audit.read(20) if e["action"] == "POST /v1/hold"]
    assert len(refused) == 1 and refused[0]["who"] == "alice" and refused[0]["outcome"].startswith("403 ")
    cancelled = http.post(f"/v1/cancel/{hers['request']}", json={}, headers=bearer(made["root"]))
    assert cancelled.status_code == 200 and _events(api_store, job)[-1] == ("waiting", "cancelled", "root")


def test_resubmit_through_the_api_and_a_state_that_refuses_is_409(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    made = tokens()
    job = _submit(http, made["bob"], "dev")["ids"]["a"]
    waiting = http.post("/v1/resubmit", json={"targets": [job]}, headers=bearer(made["bob"]))
    assert waiting.status_code == 409 and waiting.json()["kind"] == "JobRefused"
    assert waiting.json()["error"].startswith(f"job {job} is waiting: only a job that is")
    assert http.post(f"/v1/jobs/{job}/cancel", json={}, headers=bearer(made["bob"])).status_code == 200
    assert _events(api_store, job)[-1] == ("waiting", "cancelled", "bob")  # the caller, as for the lifecycle calls
    hold = http.post("/v1/hold", json={"targets": [job]}, headers=bearer(made["bob"]))
    assert hold.status_code == 409 and hold.json()["kind"] == "JobRefused"
    wrong = http.post("/v1/resubmit", json={"targets": [job], "states": ["nosuch"]}, headers=bearer(made["bob"]))
    assert wrong.status_code == 400 and "--state 'nosuch' is not a job state" in wrong.json()["error"]
    again = http.post("/v1/resubmit", json={"targets": [job], "reason": "retry"}, headers=bearer(made["bob"]))
    assert again.status_code == 200 and again.json()["result"].startswith(f"job {job}: resubmitted by bob")
    assert api_store.job(job).state.value == "waiting"
    assert _events(api_store, job)[-1] == ("cancelled", "waiting", "bob")
