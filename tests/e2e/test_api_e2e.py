"""The API for real: ``pilotfish serve`` (uvicorn on loopback) in a process of its own, tokens made by
``pilotfish token create``, and the same commands run locally and through the API printing the same."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from taskqueues.store.redis_server import free_port
from tests.support.paths import ROOT
from tests.support.polling import wait_until

from .test_e2e import cli

pytestmark = pytest.mark.timeout(300)


class Served:
    """A real API server and the environments of a local user (the store) and of API users (a token each)."""

    def __init__(self, local: dict[str, str], url: str) -> None:
        self.local = local
        self.url = url
        self.tokens: dict[str, str] = {}

    def token(self, user: str, *args: str) -> str:
        if user not in self.tokens:
            self.tokens[user] = cli(["token", "create", user, *args], self.local).stdout.strip()
        return self.tokens[user]

    def remote(self, user: str) -> dict[str, str]:
        return {**self.local, "PILOTFISH_API_URL": self.url, "PILOTFISH_TOKEN": self.tokens[user]}


@pytest.fixture
def served(tmp_path: Path, redis_url: str) -> Iterator[Served]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")}
    env.update(PILOTFISH_REDIS_URL=redis_url, PILOTFISH_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below, after the server
    server = subprocess.Popen(
        [sys.executable, "-m", "matcher.cli", "serve", "--port", str(port)], env=env, stdout=log, stderr=log, cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, timeout=60, interval=0.1, what="pilotfish serve answering /healthz")
        yield Served(env, url)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_commands_print_the_same_through_the_api(served: Served, tmp_path: Path) -> None:
    alice = served.token("alice", "--group", "prod")
    assert alice.startswith("pft_")
    remote = served.remote("alice")
    submitted = cli(["submit", "examples/small-dag.toml"], remote).stdout
    assert submitted.startswith("request ") and "8 jobs submitted" in submitted
    request = submitted.split()[1].rstrip(":")
    for args in (
        ["status", "--json"],
        ["status", request, "--json"],
        ["status", "small-dag", "--json"],
        ["jobs", "--state", "all"],
        ["jobs", "--request", request, "--json", "--limit", "3"],
        ["explain", "1", "--json"],
        ["logs", "1"],
        ["shares"],
    ):
        here, there = cli(args, served.local), cli(args, remote)
        assert (there.stdout, there.stderr) == (here.stdout, here.stderr), args
        assert (there.stdout + there.stderr).strip(), args
    assert "owner alice group prod" in cli(["status", request], remote).stdout
    cancelled = cli(["cancel", "1", "--reason", "test"], remote).stdout
    assert cancelled == "job 1: ended (cancelled; it was not running)\n"
    again = cli(["cancel", "1"], remote, check=False)
    assert again.returncode == 1 and again.stderr == "pilotfish: error: job 1 has already ended (cancelled)\n"
    missing = cli(["cancel", "nosuch"], remote, check=False)
    assert missing.stderr == cli(["cancel", "nosuch"], served.local, check=False).stderr


def test_bob_through_the_api_cannot_touch_alices_jobs_and_an_operator_can(served: Served) -> None:
    served.token("alice", "--group", "prod")
    served.token("bob", "--group", "prod")
    served.token("root", "--role", "operator")
    request = cli(["submit", "examples/small-dag.toml", "--json"], served.remote("alice")).stdout
    assert '"request"' in request
    refused = cli(["kill", "1"], served.remote("bob"), check=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith("pilotfish: error: bob may not act on job 1: it belongs to alice")
    as_alice = cli(["submit", "examples/small-dag.toml", "--owner", "alice"], served.remote("bob"), check=False)
    assert as_alice.stderr == "pilotfish: error: bob may not submit as alice: a submission's owner is its submitter\n"
    assert "job 1: ended (cancelled" in cli(["cancel", "1"], served.remote("root")).stdout
    drained = cli(["drain", "nosuch"], served.remote("bob"), check=False)
    assert "bob (user) may not drain pilot nosuch: operators only" in drained.stderr
    audit = cli(["audit"], served.remote("root")).stdout
    assert "bob (user, token " in audit and "-> 403" in audit and "root (operator" in audit


def test_a_revoked_token_and_a_token_file_others_may_read_are_refused(served: Served, tmp_path: Path) -> None:
    token = served.token("alice", "--group", "prod")
    env = {**served.remote("alice")}
    del env["PILOTFISH_TOKEN"]
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o644)
    env["PILOTFISH_API_TOKEN_FILE"] = str(path)
    done = cli(["status"], env, check=False)
    assert done.returncode == 1 and f"{path}: the token file may be read by others (mode 0644)" in done.stderr
    path.chmod(0o600)
    assert cli(["status"], env).stdout.startswith("no request")
    listed = cli(["token", "list"], served.local).stdout
    ident = token[4:16]
    assert ident in listed and "alice" in listed and "active" in listed and token not in listed
    assert cli(["token", "revoke", ident], served.local).stdout == f"token {ident} of alice: revoked\n"
    done = cli(["status"], env, check=False)
    assert done.returncode == 1 and done.stderr == f"pilotfish: error: token {ident} is revoked\n"


def test_the_lifecycle_commands_print_the_same_through_the_api_as_the_caller(served: Served) -> None:
    served.token("alice", "--group", "prod")
    served.token("bob", "--group", "prod")
    served.token("root", "--role", "operator")
    alice = served.remote("alice")
    request = cli(["submit", "examples/small-dag.toml"], alice).stdout.split()[1].rstrip(":")
    for change, undo in (
        (["hold", "1", "--reason", "look at it"], ["release", "1"]),
        (["update", "1", "--priority", "30"], ["update", "1", "--priority", "0"]),
        (["hold", request], ["release", request]),
    ):
        # Locally who acts is the local user unless --by names one; through the API it is the token's user.
        here = [cli([*args, "--by", "alice"], served.local).stdout for args in (change, undo)]
        there = [cli(args, alice).stdout for args in (change, undo)]
        assert there == here, (change, here, there)
        assert change[0] == "update" or ("by alice" in here[0] and "by alice" in here[1]), here
    for refused in (["resubmit", "1"], ["hold", "nosuch"], ["update", "1"], ["resubmit", "1", "--state", "bad"]):
        here_, there_ = cli(refused, served.local, check=False), cli(refused, alice, check=False)
        assert there_.returncode == here_.returncode == 1, refused
        assert there_.stderr == here_.stderr and there_.stderr.startswith("pilotfish: error: "), refused
    assert cli(["cancel", "1"], alice).returncode == 0
    resubmitted = cli(["resubmit", "1", "--reason", "again"], alice).stdout
    assert resubmitted.startswith("job 1: resubmitted by alice ("), resubmitted
    for args in (["events", "1"], ["events", "1", "--json"]):
        assert cli(args, alice).stdout == cli(args, served.local).stdout, args
    lines = cli(["events", "1"], alice).stdout.splitlines()
    assert lines[0] == "job 1: 15 events" and " waiting -> held " in lines[4]  # the hold made through the API
    assert lines[4].endswith("by alice  look at it") and lines[9].endswith("by alice  updated: priority 30 -> 0")
    assert " cancelled -> waiting " in lines[-1] and "by alice  again" in lines[-1]

    bob = served.remote("bob")
    held = cli(["hold", "1"], bob, check=False)
    assert held.returncode == 1 and held.stderr.startswith("pilotfish: error: bob may not act on job 1: it belongs")
    posing = cli(["hold", "2", "--by", "alice"], bob, check=False)
    assert posing.stderr.startswith("pilotfish: error: bob may not act as alice")
    assert cli(["hold", "1"], served.remote("root")).stdout.startswith("job 1: held by root")
    assert cli(["events", "1"], alice).stdout.splitlines()[-1].split("by ")[1] == "root"
