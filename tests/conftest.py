"""Shared fixtures: a real ``redis-server`` on a free loopback port, and fakeredis with Lua.

``any_redis`` runs the same test code against both (the huey idea: one contract suite, two backends).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.store.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(Path(tmp_path_factory.mktemp("redis"))).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the real server, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def real_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def fake_redis() -> Iterator[redis.Redis]:
    import fakeredis

    client = fakeredis.FakeRedis()
    yield client
    client.close()


@pytest.fixture(params=["real", "fake"])
def any_redis(request: pytest.FixtureRequest) -> redis.Redis:
    """The same test against a real redis-server and against fakeredis (with Lua)."""
    fixture = "real_redis" if request.param == "real" else "fake_redis"
    client: redis.Redis = request.getfixturevalue(fixture)
    return client
