"""The embedded default: a private, persistent redis-server in the state directory.

When no ``redis_url`` is configured, commands share one private server whose data (append-only file)
lives in ``<state_dir>/redis``; it survives ``pilotfish down`` / ``up`` and restarts. Its port is kept
in ``<state_dir>/redis/port`` so every command finds the running one.
"""

from __future__ import annotations

from pathlib import Path

from taskqueues.redis_server import RedisServer


def _server(state_dir: str | Path) -> RedisServer:
    directory = Path(state_dir) / "redis"
    port_file = directory / "port"
    port = int(port_file.read_text()) if port_file.exists() else 0
    return RedisServer(directory, port=port, persistent=True)


def running(state_dir: str | Path) -> RedisServer | None:
    """The embedded server if it answers."""
    server = _server(state_dir)
    return server if server.port and server.ping() else None


def ensure(state_dir: str | Path) -> RedisServer:
    """The embedded server, started (on its old port if it is free, else a new one) when it is not running."""
    server = running(state_dir)
    if server is not None:
        return server
    server = _server(state_dir)
    try:
        server.start()
    except Exception:
        server.port = 0
        server.start()
    (server.directory / "port").write_text(str(server.port))
    return server


def stop(state_dir: str | Path) -> bool:
    server = running(state_dir)
    if server is None:
        return False
    server.stop()
    return True
