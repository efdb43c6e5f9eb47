"""A request for the page tests: three rules in three layers and a job without a rule, in a request named like a
script (job names are letters, digits, '_' and '-' only: the renderer's own test gives a job that name)."""

from __future__ import annotations

from typing import Any

import httpx

from taskqueues.store import Store
from taskqueues.store.records import PilotOffer, RunResult

SCRIPT = "<script>alert(1)</script>"

GRAPH: dict[str, Any] = {
    "name": SCRIPT,
    "rules": {
        "fetch": {"command": "echo {i}", "ete": "1s"},
        "fit": {"command": "echo fit", "ete": "1s"},
        "add": {"command": "echo add", "ete": "1s"},
    },
    "jobs": [
        {"name": "f1", "rule": "fetch", "params": {"i": 1}},
        {"name": "f2", "rule": "fetch", "params": {"i": 2}},
        {"name": "f3", "rule": "fetch", "params": {"i": 3}},
        {"name": "fit", "rule": "fit", "deps": ["f1", "f2", "f3"]},
        {"name": "add", "rule": "add", "deps": ["fit"]},
        {"name": "lonely", "command": "echo lonely"},
    ],
}


def submit_graph(http: httpx.Client, token: str, store: Store) -> dict[str, Any]:
    """Submit :data:`GRAPH` as the token's user; two fetch jobs then end (one done, one failed)."""
    answer = http.post("/v1/requests", json={"workflow": GRAPH}, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    ids = made["ids"]
    leased = {j.id: j for j in store.match(PilotOffer("p1", "local/localhost/local", cpu=8, mem=8000), 10)}
    assert set(leased) == {ids["f1"], ids["f2"], ids["f3"], ids["lonely"]}, leased
    f1, f2 = leased[ids["f1"]], leased[ids["f2"]]
    store.complete(f1.id, f1.attempt, "p1", RunResult(exit_code=0, wall=1))
    store.fail(f2.id, f2.attempt, "p1", RunResult(exit_code=3, wall=1, reason=f"exit code 3 {SCRIPT}"))
    return made
