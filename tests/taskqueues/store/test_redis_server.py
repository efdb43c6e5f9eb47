"""The private server (taskqueues.store.redis_server): a port another server holds is never taken for ours."""

from __future__ import annotations

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
