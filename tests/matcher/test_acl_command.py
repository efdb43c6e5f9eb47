"""`pilotfish acl`: the two users an operator creates on a Redis of their own (the chart's externalRedis).

The printed commands are fed to a real server through redis-cli, as the command's help says, and the users
they make are compared with those :func:`taskqueues.store.access.apply` makes, as the server describes them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.store import access
from taskqueues.store.redis_server import RedisServer
from tests.support.paths import ROOT


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server whose default user is the administrator that runs the printed commands."""
    started = RedisServer(tmp_path / "redis").start()
    yield started
    started.stop()


def acl(*args: str, redis_url: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PILOTFISH_REDIS_URL": redis_url}
    env.pop("PILOTFISH_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", "acl", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def described(client: redis.Redis) -> dict[str, str]:
    """ACL LIST as user name -> the server's description of its rules and password hash."""
    lines = (raw.decode() for raw in client.execute_command("ACL", "LIST"))
    return {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in lines}


def test_acl_prints_the_two_users_of_taskqueues_access_for_redis_cli(server: RedisServer) -> None:
    done = acl("--vo", "lhcb", "--prefix", "site1", "--db", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["ACL", "SETUSER", "pf-control"],
        ["ACL", "SETUSER", "pf-pilot-lhcb"],
    ]
    admin = redis.Redis(port=server.port)
    if shutil.which("redis-cli") or shutil.which("valkey-cli"):
        cli = shutil.which("valkey-cli") or shutil.which("redis-cli")
        fed = subprocess.run(
            [str(cli), "-p", str(server.port)], input=done.stdout, capture_output=True, text=True, timeout=60
        )
        assert fed.stdout.split() == ["OK", "OK"], fed.stdout + fed.stderr
    else:
        for line in lines:
            admin.execute_command(*shlex.split(line))
    passwords = [re.search(r" >(\S+)", line).group(1) for line in lines]  # type: ignore[union-attr]
    access.apply(admin, "control-by-access", passwords[0], access.control_rules())
    access.apply(admin, "pilot-by-access", passwords[1], access.pilot_rules("site1", "lhcb", 3), broker=True, db=3)
    users = described(admin)
    assert users["pf-control"] == users["control-by-access"]
    assert users["pf-pilot-lhcb"] == users["pilot-by-access"]

    # The URLs it prints on stderr, with this server's address, connect as the two users.
    urls = re.findall(r"redis://\S+", done.stderr)
    control, pilot = (redis.Redis.from_url(u.replace("HOST:PORT", f"127.0.0.1:{server.port}")) for u in urls)
    assert control.config_get("appendonly")
    assert pilot.hset("site1:{lhcb}:jobs", "1", "x") == 1
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.hget("site1:{atlas}:jobs", "1")


def test_acl_takes_the_database_from_redis_url_and_refuses_glob_characters() -> None:
    done = acl("--vo", "lhcb", redis_url="redis://redis.example.org:6379/5")
    assert done.returncode == 0, done.stderr
    assert "&/5.celeryev/* -@all" in done.stdout and '"(&/5.celery.pidbox +subscribe' in done.stdout
    for option in (["--vo", "a*"], ["--prefix", "p?"], ["--vo", "x[y]"]):
        refused = acl(*option)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "glob characters (* ? [ ] \\)" in refused.stderr
    assert "without braces, colons, blanks" in acl("--vo", "a:b").stderr
