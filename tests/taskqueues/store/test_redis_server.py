"""The private server (taskqueues.store.redis_server): a port another server holds is never taken for ours."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.store import redis_server
from taskqueues.store.redis_server import PortTaken, RedisServer


@pytest.fixture
def other(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "other").start()
    try:
        yield server
    finally:
        server.stop()


def test_a_port_another_server_holds_is_refused(other: RedisServer, tmp_path: Path) -> None:
    redis.Redis.from_url(other.url).set("mark", "theirs")
    with pytest.raises(PortTaken, match=f"port {other.port} is another server's"):
        RedisServer(tmp_path / "mine", port=other.port).start()
    assert redis.Redis.from_url(other.url).get("mark") == b"theirs", "the other server was touched"


def test_a_free_port_taken_before_the_bind_is_replaced(
    other: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """free_port() and the bind race with every other process of the host: here the first port it offers is
    the other server's, as if that server had bound it in between."""
    offered = [other.port]
    real = redis_server.free_port
    monkeypatch.setattr(redis_server, "free_port", lambda: offered.pop() if offered else real())
    mine = RedisServer(tmp_path / "mine").start()
    try:
        assert mine.port != other.port
        assert mine.answering_pid() == mine.pid() != other.pid()
    finally:
        mine.stop()
    assert other.ping()


def test_a_stopped_servers_directory_can_be_removed_at_once(tmp_path: Path) -> None:
    """stop() returned once the pid file was gone, and the server logged two more lines: a directory removed
    then was made again by the log file (a benchmark's TemporaryDirectory failed with "Directory not empty")."""
    for n in range(20):
        directory = tmp_path / f"s{n}"
        server = RedisServer(directory).start()
        server.stop()
        shutil.rmtree(directory)
        assert not directory.exists()


def test_stop_returns_only_after_the_servers_last_log_line(tmp_path: Path) -> None:
    """The line stop() waits for: the last one a shutting-down server logs, not an earlier run's."""
    server = RedisServer(tmp_path / "s")
    server.directory.mkdir(parents=True, exist_ok=True)
    assert server._said_goodbye(), "no log at all: nothing to wait for"
    log = server.directory / "redis.log"
    log.write_text("1:M * User requested shutdown...\n1:M * Removing the pid file.\n")
    assert not server._said_goodbye(), "the pid file is gone, two more lines are coming"
    log.write_text(log.read_text() + "1:M * Module lua unloaded\n1:M # Valkey is now ready to exit, bye bye...\n")
    assert server._said_goodbye()
    log.write_text(log.read_text() + "2:M * Server initialized\n2:M * Ready to accept connections tcp\n")
    assert not server._said_goodbye(), "a restart's lines after the old goodbye"
