"""A real Sentinel deployment for tests: a primary, a replica and three sentinels, all the project's server
binary (taskqueues.store.redis_server), on loopback ports of their own."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import redis

from taskqueues.store.redis_server import RedisServer, find_redis_server, free_port
from tests.support.polling import wait_until

MASTER = "pfmaster"


def quietly(condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, false while the servers refuse connections (a failover under way)."""

    def asked() -> bool:
        try:
            return bool(condition())
        except (redis.RedisError, OSError):
            return False

    return asked


@dataclass
class SentinelSet:
    directory: Path
    primary: RedisServer = field(init=False)
    replica: RedisServer = field(init=False)
    sentinel_ports: list[int] = field(default_factory=list)
    sentinel_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The Sentinel URL Celery and the store take (taskqueues.store.sentinel)."""
        return ";".join(f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports) + "/0"

    def start(self) -> SentinelSet:
        self.primary = RedisServer(self.directory / "primary").start()
        self.replica = RedisServer(
            self.directory / "replica", options=("--replicaof", "127.0.0.1", str(self.primary.port))
        ).start()
        wait_until(
            quietly(lambda: redis.Redis(port=self.replica.port).info("replication").get("master_link_status") == "up"),
            what="the replica's link",
        )
        for i in range(3):
            self._start_sentinel(i)
        for port in self.sentinel_ports:
            wait_until(
                quietly(lambda port=port: self._ready(port)), what=f"sentinel {port} to see the others and the replica"
            )
        return self

    def _start_sentinel(self, i: int) -> None:
        folder = self.directory / f"sentinel{i}"
        folder.mkdir(parents=True)
        port = free_port()
        conf = folder / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
        )
        subprocess.run(
            [
                find_redis_server(),
                str(conf),
                "--sentinel",
                "--daemonize",
                "yes",
                "--pidfile",
                str(folder / "pid"),
                "--logfile",
                str(folder / "log"),
            ],
            check=True,
        )
        wait_until(quietly(lambda: (folder / "pid").exists()), what="a sentinel's pid file")
        self.sentinel_ports.append(port)
        self.sentinel_pids.append(int((folder / "pid").read_text()))

    @staticmethod
    def _ready(port: int) -> bool:
        info = redis.Redis(port=port).sentinel_master(MASTER)
        return bool(info["num-other-sentinels"] == 2 and info["num-slaves"] == 1)

    def primary_port(self) -> int:
        """The port of the primary the sentinels name now."""
        _, port = redis.Redis(port=self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def stop(self) -> None:
        for pid in self.sentinel_pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for server in (self.primary, self.replica):
            with suppress(ProcessLookupError):
                server.stop()


@contextmanager
def sentinel_set(directory: Path) -> Iterator[SentinelSet]:
    deployment = SentinelSet(directory)
    try:
        yield deployment.start()
    finally:
        deployment.stop()
