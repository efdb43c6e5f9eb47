"""One error boundary: every command answers a Redis outage or a bad setting with one line, never a traceback.

The store's guard (taskqueues/store/guard.py) names the server (never its password) and the operation; the CLI
prints ``pilotfish: error: ...`` and exits 1; ``-v`` shows the traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from taskqueues.errors import StoreAccessDenied, StoreUnavailable
from taskqueues.store import Store
from taskqueues.store.guard import client_url, shown_url
from tests.support.paths import ROOT

EXAMPLE = str(ROOT / "examples" / "small-dag.toml")


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "command",
    [
        ("status",),
        ("status", "abc"),
        ("explain", "12"),
        ("cancel", "12"),
        ("kill", "12"),
        ("submit", EXAMPLE),
        ("health",),
        ("health", "--redis"),
    ],
)
def test_every_command_answers_an_unreachable_redis_in_one_line(command: tuple[str, ...], tmp_path: Path) -> None:
    done = cli(
        *command,
        env={"PILOTFISH_REDIS_URL": "redis://someone:s3cret@127.0.0.1:1/0", "PILOTFISH_STATE_DIR": str(tmp_path)},
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pilotfish: error: "), lines
    assert "127.0.0.1:1" in lines[0] and "s3cret" not in lines[0], lines
    assert "Traceback" not in done.stderr


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    done = cli(
        "-v", "status", env={"PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0", "PILOTFISH_STATE_DIR": str(tmp_path)}
    )
    assert done.returncode != 0 and "Traceback" in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("PILOTFISH_PREFIX", "a:b", "$PILOTFISH_PREFIX"),
        ("PILOTFISH_VO", "a{b}", "$PILOTFISH_VO"),
        ("PILOTFISH_LEASE_SECONDS", "0", "lease_seconds"),
        ("PILOTFISH_REDIS_APPENDFSYNC", "sometimes", "$PILOTFISH_REDIS_APPENDFSYNC"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(variable: str, value: str, named: str, tmp_path: Path) -> None:
    done = cli(
        "status",
        env={variable: value, "PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0", "PILOTFISH_STATE_DIR": str(tmp_path)},
    )
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pilotfish: error: ") and named in line, line


def test_read_only_commands_never_start_a_server(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for command in (("status",), ("explain", "1"), ("cancel", "x")):
        done = cli(*command, env={"PILOTFISH_STATE_DIR": str(state), "PILOTFISH_REDIS_URL": ""})
        assert done.returncode == 1
        assert "nothing is running (pilotfish up starts it" in done.stderr, done.stderr
    assert not (state / "redis").exists(), "nothing was created either"


def test_the_store_names_the_server_without_its_password_and_the_operation() -> None:
    client = redis.Redis.from_url("redis://pilot:pa55@127.0.0.1:1/3")
    store = Store(client)
    assert store.where == "redis://pilot@127.0.0.1:1/3"
    with pytest.raises(
        StoreUnavailable,
        match=r"^cannot reach Redis at redis://pilot@127.0.0.1:1/3 "
        r"\(connection refused\) while reading a request$",
    ):
        store.request("r")
    with pytest.raises(StoreUnavailable, match="while running script cancel"):
        store.cancel("1")


def test_a_refusal_by_redis_acl_is_access_denied(real_redis: redis.Redis, redis_url: str) -> None:
    real_redis.execute_command("ACL", "SETUSER", "nobody", "reset", "on", ">pw", "~other:*", "-@all", "+ping")
    try:
        store = Store(redis.Redis.from_url(redis_url.replace("redis://", "redis://nobody:pw@")))
        with pytest.raises(StoreAccessDenied, match="refused this operation"):
            store.request("r")
    finally:
        real_redis.execute_command("ACL", "DELUSER", "nobody")


def test_urls_are_shown_without_passwords() -> None:
    assert shown_url("redis://u:p@h:1/0") == "redis://u@h:1/0"
    assert shown_url("redis://:p@h/0") == "redis://h/0"
    assert shown_url("redis://h:1/0") == "redis://h:1/0"
    assert client_url(redis.Redis(host="h", port=2, db=4, username="x", password="y")) == "redis://x@h:2/4"
