"""Operator status views and the ``status`` command, against a real redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from matcher.cli.operator_commands import status
from matcher.status import find_request, request_status, requests_status, task_queues
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.errors import NotFound
from taskqueues.store import Store
from taskqueues.store.fairshare import default_owner
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.catalogs import QA, QB, TWO_SITES
from tests.support.polling import wait_until

CATALOG = TWO_SITES
NOW = 1_000_000.0


@pytest.fixture
def submitter(store: Store) -> Submitter:
    return Submitter(store, Catalog.loads(CATALOG), clock=store.clock, capacity=lambda: 1e6)


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    return {"PILOTFISH_REDIS_URL": redis_url, "PILOTFISH_CATALOG": str(catalog)}


def chain_request(submitter: Submitter) -> tuple[str, dict[str, str]]:
    sub = submitter.submit(
        [
            JobSpec("a", "true", {"Platform": "EL9"}, ete=100),
            JobSpec("b", "true", {"Platform": "EL9"}, deps=("a",), ete=50),
            JobSpec("c", "true", {"Platform": "EL8", "mem": "2G"}, ete=30),
        ],
        name="demo",
        priority=5,
    )
    return sub.request, sub.ids


def test_request_status_counts_states_and_the_critical_path_left(submitter: Submitter, store: Store) -> None:
    request, _ = chain_request(submitter)
    s = request_status(store, request)
    assert (s.name, s.priority, s.submitted, s.eta, s.jobs) == ("demo", 5, NOW, NOW + 150, 3)
    assert s.states == {"blocked": 1, "waiting": 2} and s.critical_path == 150 and not s.final
    (a,) = store.match(PilotOffer("p", QA, 4, 8000))
    store.start(a.id, a.attempt, "p")
    assert request_status(store, request).states == {"blocked": 1, "waiting": 1, "running": 1}
    store.complete(a.id, a.attempt, "p", RunResult(wall=90))
    s = request_status(store, request)
    assert s.states == {"waiting": 2, "done": 1} and s.critical_path == 50
    for queue in (QA, QB):
        (job,) = store.match(PilotOffer("p", queue, 4, 8000))
        store.complete(job.id, job.attempt, "p")
    s = request_status(store, request)
    assert s.final and s.critical_path == 0 and s.states == {"done": 3}
    assert s.to_json()["final"] is True


def test_all_requests_and_lookup_by_name(submitter: Submitter, store: Store) -> None:
    first, _ = chain_request(submitter)
    second = submitter.submit([JobSpec("x", "true", ete=10)], name="other").request
    assert [s.id for s in requests_status(store)] == [first, second]
    assert find_request(store, "other") == second and find_request(store, first) == first
    submitter.submit([JobSpec("y", "true")], name="other")
    with pytest.raises(NotFound, match="2 requests are named 'other'"):
        find_request(store, "other")
    with pytest.raises(NotFound, match="no request with id or name 'nope'"):
        find_request(store, "nope")


def test_task_queues_show_waiting_head_requirements_and_queues(submitter: Submitter, store: Store) -> None:
    chain_request(submitter)
    queues = {q.requirements.get("Platform"): q for q in task_queues(store)}
    el9, el8 = queues["EL9"], queues["EL8"]
    assert (el9.waiting, el9.head_score, el9.queues) == (1, NOW - 5, [QA])  # a: ETA - 150 - priority 5
    assert (el8.waiting, el8.head_score, el8.queues) == (1, NOW + 115, [QB])
    assert el8.requirements == {"Platform": "EL8", "cpu": 1, "mem": 2048, "tmp": 0}  # canonical: bucketed
    store.match(PilotOffer("p", QA, 4, 8000))
    assert {q.requirements.get("Platform"): q.waiting for q in task_queues(store)} == {"EL9": 0, "EL8": 1}
    assert task_queues(store)[-1].head_score is None  # empty task queues come last


def test_status_command_text_and_json(submitter: Submitter, env: dict[str, str]) -> None:
    request, _ = chain_request(submitter)
    runner = CliRunner()
    result = runner.invoke(status, [], env=env)
    assert result.exit_code == 0, result.output
    who = f"owner {default_owner()} group default"
    assert f"request {request} 'demo' {who} priority 5: 3 jobs (1 blocked, 2 waiting)" in result.output
    assert "critical path left 2m30s" in result.output and "eligible queues: A/ce/q" in result.output
    result = runner.invoke(status, ["demo", "--json"], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["id"] == request and doc["states"] == {"blocked": 1, "waiting": 2} and doc["final"] is False
    result = runner.invoke(status, ["missing"], env=env)
    assert isinstance(result.exception, NotFound)


def test_status_watch_follows_the_request_until_it_ends(
    submitter: Submitter, store: Store, env: dict[str, str], tmp_path: Path
) -> None:
    request, ids = chain_request(submitter)
    shown = tmp_path / "out"  # a file, as a log would be: no terminal
    with open(shown, "w") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from matcher.cli.operator_commands import status; status()", request, "--watch"],
            env={**os.environ, **env},
            stdout=stdout,
            text=True,
        )
    try:
        wait_until(lambda: "-- " in shown.read_text(), what="its first view")
        assert proc.poll() is None, "it must keep watching while jobs are unfinished"
        for queue in (QA, QB, QA):
            (job,) = store.match(PilotOffer("p", queue, 4, 8000))
            store.complete(job.id, job.attempt, "p")
        proc.wait(timeout=20)
        out = shown.read_text()
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "\x1b" not in out, "no terminal control codes when stdout is no terminal"
    assert out.count("-- ") >= 2 and out.rstrip().endswith("finished")
    assert f"request {request} 'demo' owner {default_owner()} group default priority 5: 3 jobs (3 done)" in out
    assert all(store.job(i).state is JobState.DONE for i in ids.values())


def test_status_of_one_request_names_its_first_jobs_per_state(submitter: Submitter, env: dict[str, str]) -> None:
    """Issue 20: the tour's next commands (``explain 12``, ``kill 12``) need job ids, which status never showed."""
    sub = submitter.submit(
        [JobSpec(f"w{i}", "true", {"Platform": "EL9"}, ete=10) for i in range(7)]
        + [JobSpec("late", "true", {"Platform": "EL9"}, deps=("w0",), ete=10)],
        name="many",
    )
    ids = sub.ids
    result = CliRunner().invoke(status, ["many"], env=env)
    assert result.exit_code == 0, result.output
    waiting = ", ".join(f"{ids[f'w{i}']} w{i}" for i in range(5))
    assert f"  waiting: {waiting} (+2 more)" in result.output.splitlines()
    assert f"  blocked: {ids['late']} late" in result.output.splitlines()
    doc = json.loads(CliRunner().invoke(status, ["many", "--json"], env=env).output)
    assert doc["examples"]["blocked"] == [{"id": ids["late"], "name": "late"}]
    assert [j["name"] for j in doc["examples"]["waiting"]] == [f"w{i}" for i in range(5)]
    everything = CliRunner().invoke(status, [], env=env).output
    assert "  waiting: " not in everything, "the view of every request stays one block per request"


def test_a_bare_status_shows_active_requests_and_counts_the_rest(
    submitter: Submitter, store: Store, env: dict[str, str]
) -> None:
    """Issue 28: a bare ``status`` listed every request of the last 30 days and every empty task queue."""
    done = submitter.submit([JobSpec("x", "true", {"Platform": "EL8"}, ete=10)], name="old", owner="bob").request
    (job,) = store.match(PilotOffer("p", QB, 4, 8000))
    store.complete(job.id, job.attempt, "p")
    active, _ = chain_request(submitter)
    runner = CliRunner()
    out = runner.invoke(status, [], env=env).output
    assert f"request {active} 'demo'" in out and f"request {done}" not in out
    assert "1 ended requests not shown (1 done): pilotfish status --all lists them" in out
    assert "1 empty task queues not shown (--all)" in out  # the one "old" ran in
    everything = runner.invoke(status, ["--all"], env=env).output
    assert f"request {done} 'old' owner bob" in everything and "no task queue" not in everything
    doc = json.loads(runner.invoke(status, ["--json"], env=env).output)
    assert [r["id"] for r in doc["requests"]] == [active]
    assert (doc["ended_requests"], doc["empty_task_queues"], len(doc["task_queues"])) == (1, 1, 2)
    bobs = runner.invoke(status, ["--all", "--owner", "bob", "--format", "id,owner,ended,done,waiting"], env=env)
    assert bobs.output.splitlines() == ["REQUEST       OWNER  ENDED  DONE  WAITING", f"{done}  bob    yes    1     0"]
    assert runner.invoke(status, ["--group", "nobody"], env=env).output.strip() == "no request"
    bad = runner.invoke(status, ["--format", "id,colour"], env=env)
    assert "no field named 'colour'" in str(bad.exception)
