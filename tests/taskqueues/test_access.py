"""Least privilege: payloads hold no credentials; pilots are their community's ACL user; the embedded
server is private (loopback, password, owner-only state directory).

Real servers throughout: the embedded valkey-server in a temporary state directory, the test's server
with an ACL user made here, and real pilots of every backend (Slurm and Grid Engine when they are up).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues import embedded
from taskqueues.store import access
from taskqueues.store.redis_server import RedisServer
from tests.support.directors import KINDS, Rig
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(600)  # runs of a whole workflow (each bounded at 180 s)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "state"
    yield directory
    embedded.stop(directory)


def acl_log(client: redis.Redis) -> list[dict[bytes, object]]:
    entries = client.execute_command("ACL", "LOG", "100")
    return [dict(zip(e[::2], e[1::2], strict=True)) if isinstance(e, list) else e for e in entries]


def test_the_embedded_server_is_private(state: Path) -> None:
    server = embedded.ensure(state)
    control = redis.Redis.from_url(embedded.control_url(server))
    assert control.ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=server.port).get("x")
    assert control.config_get("bind")["bind"] == "127.0.0.1"
    for path in (state, state / "redis"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (state / "redis" / "credentials.json", state / "redis" / "users.acl"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert server.password not in (state / "redis" / "users.acl").read_text(), "only its hash is kept there"


def test_a_pilot_user_may_run_the_pilot_and_nothing_else(state: Path) -> None:
    server = embedded.ensure(state)
    control = redis.Redis.from_url(embedded.control_url(server))
    pilot = redis.Redis.from_url(
        embedded.pilot_url(state, control, embedded.control_url(server), prefix="pf", vo="lhcb")
    )
    control.hset("pf:{atlas}:jobs", "1", "theirs")
    control.hset("pf:{lhcb}:jobs", "1", "ours")
    assert pilot.hget("pf:{lhcb}:jobs", "1") == b"ours"
    refused = [
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("CONFIG", "GET", "*"),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("DEL", "pf:{lhcb}:jobs"),
        ("HGET", "pf:{atlas}:jobs", "1"),
        ("HSET", "pf:{atlas}:jobs", "1", "x"),
        ("ACL", "LIST"),
        ("SHUTDOWN",),
        ("CLIENT", "KILL", "ID", "1"),
        ("SCRIPT", "FLUSH"),
    ]
    for command in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.execute_command(*command)
    # No Lua of its own: neither EVAL nor a script loaded for EVALSHA.
    for command in (
        ("EVAL", "return 1", "0"),
        ("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
        ("SCRIPT", "LOAD", "return 1"),
        ("FUNCTION", "LOAD", "#!lua name=mine\nredis.register_function('mine', function() return 1 end)"),
        ("FUNCTION", "DELETE", "pilotfish"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.execute_command(*command)
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.publish("pf:{atlas}:wake:site/ce/q:0", "1")
    assert control.hget("pf:{atlas}:jobs", "1") == b"theirs"
    assert pilot.publish("pf:{lhcb}:wake:site/ce/q:0", "1") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):  # its wake channels only, not any name after wake
        pilot.publish("pf:{lhcb}:wakeful", "1")
    # Celery's broadcast channel: a pilot listens there, and only the control plane publishes.
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.publish("/0.celery.pidbox", "shutdown")
    listener = pilot.pubsub()
    listener.psubscribe("/0.celery.pidbox")
    assert listener.get_message(timeout=5)["type"] == "psubscribe"  # type: ignore[index]
    listener.close()
    # What Celery's remote control needs of the broker (a reply), and only on the broker's keys it names.
    assert pilot.lpush("abc.reply.celery.pidbox", "x") == 1
    assert pilot.smembers("_kombu.binding.reply.celery.pidbox") == set()
    for command in (
        ("LPUSH", "pf:{lhcb}:whatever", "x"),  # the broker's commands on the broker's keys only
        ("SADD", "_kombu.binding.reply.celery.pidbox", "x"),  # read only
        ("SADD", "_kombu.binding.celery.pidbox", "x" * 1000),  # no binding table to fill
        ("SADD", "_kombu.binding.anything", "x"),
        ("LPUSH", "other.celery.pidbox", "x"),  # a pilot's own queue is never written
        ("DEL", "abc.reply.celery.pidbox"),
        ("SET", "unacked_mutex", "x"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.execute_command(*command)


def test_a_run_on_the_embedded_server_needs_nothing_the_pilot_user_lacks(state: Path) -> None:
    server = embedded.ensure(state)  # started here, so the run leaves it running and its ACL log can be read
    env = {**os.environ, "PILOTFISH_STATE_DIR": str(state), "PILOTFISH_REDIS_URL": "", "PILOTFISH_PILOT_EVENTS": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "run", "examples/small-dag.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    control = redis.Redis.from_url(embedded.control_url(server))
    users = {entry.decode().split()[1] for entry in control.execute_command("ACL", "LIST")}
    assert access.pilot_user("default") in users
    assert acl_log(control) == [], f"a pilot (or the control plane) was refused something: {acl_log(control)}"
    clients = control.client_list()
    assert all(c["user"] in (access.CONTROL_USER, access.pilot_user("default")) for c in clients), clients


def test_run_stops_the_embedded_server_it_started_and_only_that_one(state: Path) -> None:
    env = {**os.environ, "PILOTFISH_STATE_DIR": str(state), "PILOTFISH_REDIS_URL": ""}
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "run", "examples/small-dag.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert embedded.running(state) is None
    embedded.ensure(state)
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "run", "examples/small-dag.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert embedded.running(state) is not None, "a server it did not start keeps running"


@pytest.mark.parametrize("kind", KINDS)
def test_payloads_never_see_the_store_credentials(
    kind: str, redis_url: str, real_redis: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every backend's pilot command: the pilot connects as its ACL user, whose URL it takes from a one-use
    file; its payloads get neither that URL nor any other secret of the pilot's environment; and the pilot gets
    none of the director's (Slurm exports the submitting environment to the job)."""
    monkeypatch.setenv("DIRECTOR_DB_PASSWORD", "director-only")
    password = "pw-" + secrets.token_hex(8)
    user = access.pilot_user("default")
    access.apply(real_redis, user, password, access.pilot_rules("pf", "default"), broker=True)
    real_redis.execute_command("ACL", "LOG", "RESET")
    rig: Rig | None = None
    try:
        rig = Rig(
            kind,
            redis_url,
            tmp_path,
            pilot_redis_url=access.with_credentials(redis_url, user, password),
            pilot_env={"SITE_API_TOKEN": "tok-" + password, "BENIGN": "kept"},
        )
        dump, pilot_dump = tmp_path / "payload-env", tmp_path / "pilot-env"
        command = f"env > {dump}; tr '\\0' '\\n' < /proc/$PPID/environ > {pilot_dump}"
        sub = rig.submit([dataclasses.replace(rig.job("dump", seconds=0.1), command=command)])
        rig.drive(lambda: all(j.state.final for j in rig.jobs(list(sub.ids.values()))), 120, "the payload's end")
        assert [j.state.value for j in rig.jobs(list(sub.ids.values()))] == ["done"]
        seen = dump.read_text()
        assert "BENIGN=kept" in seen
        assert "PILOTFISH_REDIS_URL" not in seen and password not in seen and "SITE_API_TOKEN" not in seen
        # The pilot's own environment: no password either (its URL came in a one-use file, gone once read),
        # and none of the director's credentials.
        pilot_seen = pilot_dump.read_text()
        assert "DIRECTOR_DB_PASSWORD" not in pilot_seen and password not in pilot_seen, pilot_seen
        handed = [line.split("=", 1)[1] for line in pilot_seen.splitlines() if line.startswith("PILOTFISH_CREDENTIALS")]
        assert handed and not Path(handed[0]).exists(), pilot_seen
        # Denials of a command, key or channel (an 'auth' entry is a pilot of an earlier test, whose user went).
        denied = [e for e in acl_log(real_redis) if e.get(b"reason") != b"auth"]
        assert denied == [], f"the pilot user lacked a right the pilot needs: {denied}"
    finally:
        if rig is not None:
            rig.director.stop_all()  # before its user goes: an idle pilot would be refused at reconnection
        real_redis.execute_command("ACL", "DELUSER", user)


def test_is_secret_knows_credentials_by_name_and_by_value() -> None:
    assert access.is_secret("PILOTFISH_REDIS_URL", "redis://h/0")
    for name in ("PILOTFISH_REDIS_URL_FILE", "PILOTFISH_PILOT_BROKER_URL_FILE", "PILOTFISH_PILOT_BROKER_URL"):
        assert access.is_secret(name, "/run/pilotfish/credentials/x"), name  # a pilot must not inherit its file
    assert access.is_secret("MY_DB_PASSWORD", "x")
    assert access.is_secret("BROKER", "amqp://u:p@h//")
    assert not access.is_secret("PATH", "/usr/bin")
    assert not access.is_secret("HOME_URL", "https://example.org/a@b")


def test_a_server_started_without_credentials_is_not_taken_over(tmp_path: Path) -> None:
    """An older embedded server (no password) still running in the state directory: say so, do not start
    a second server on the same data."""
    state = tmp_path / "state"
    (state / "redis").mkdir(parents=True)
    old = RedisServer(state / "redis", persistent=True).start()
    (state / "redis" / "port").write_text(str(old.port))
    try:
        with pytest.raises(Exception, match=f"pid {old.pid()}"):
            embedded.ensure(state)
    finally:
        old.stop()


def test_a_pilot_user_ships_output_for_its_own_community_only(state: Path) -> None:
    """Shipping payload output (``ship_log.lua``) needs no right a pilot lacks, and reaches no other community."""
    from taskqueues.errors import StoreAccessDenied
    from taskqueues.store import Store
    from taskqueues.store.keys import Keys
    from tests.support.store import job

    server = embedded.ensure(state)
    control = redis.Redis.from_url(embedded.control_url(server))
    pilot = redis.Redis.from_url(
        embedded.pilot_url(state, control, embedded.control_url(server), prefix="pf", vo="lhcb")
    )
    [ours] = Store(control, Keys(vo="lhcb")).submit([job()])
    [theirs] = Store(control, Keys(vo="atlas")).submit([job()])
    control.execute_command("ACL", "LOG", "RESET")
    ship = {"cap": 64, "host": "node", "directory": "/logs", "live": False, "chunks": {"out": (b"hello\n", 6)}}
    assert Store(pilot, Keys(vo="lhcb")).logs.ship(ours, 0, "p", **ship) is None  # type: ignore[arg-type]
    assert acl_log(control) == []
    assert Store(control, Keys(vo="lhcb")).logs.read(ours)[0].streams["out"].data == b"hello\n"
    with pytest.raises(StoreAccessDenied):
        Store(pilot, Keys(vo="atlas")).logs.ship(theirs, 0, "p", **ship)  # type: ignore[arg-type]
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.hset(Keys(vo="atlas").log(theirs), "0:out", "x")
    assert not control.exists(Keys(vo="atlas").log(theirs))
