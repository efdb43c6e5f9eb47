"""Shared fixtures: a real ``redis-server`` on a free loopback port, and fakeredis with Lua; the test's clock,
a store on it; a real Flower. (Helpers that are not fixtures are in :mod:`tests.support`.)

``any_redis`` runs the same test code against both (the huey idea: one contract suite, two backends).
The ``store`` fixture takes its options from a ``store`` mark on the test or its module, for example
``pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))``: keyword arguments of
:class:`Store` (its ``clock`` is the ``clock`` fixture unless the mark names another), and ``servers``,
the servers it runs on (the real one by default; ``("real", "fake")`` runs each test on both).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.flower import FlowerServer


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


@pytest.fixture
def store_redis(request: pytest.FixtureRequest) -> redis.Redis:
    """The server of the ``store`` fixture: the real one, or each of those its ``store`` mark names."""
    client: redis.Redis = request.getfixturevalue(f"{getattr(request, 'param', 'real')}_redis")
    return client


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test whose ``store`` mark names ``servers`` runs once on each."""
    mark = metafunc.definition.get_closest_marker("store")
    if mark is not None and "servers" in mark.kwargs and "store_redis" in metafunc.fixturenames:
        metafunc.parametrize("store_redis", mark.kwargs["servers"], indirect=True)


@pytest.fixture
def clock() -> FakeClock:
    """The test's clock: it moves only when the test sets ``clock.now``."""
    return FakeClock()


@pytest.fixture
def store(store_redis: redis.Redis, clock: FakeClock, request: pytest.FixtureRequest) -> Store:
    """A store on the test's server and clock, with the options of the test's ``store`` mark."""
    mark = request.node.get_closest_marker("store")
    options = {k: v for k, v in (mark.kwargs if mark else {}).items() if k != "servers"}
    return Store(store_redis, **{"clock": clock, **options})


@pytest.fixture
def flower(redis_url: str, tmp_path: Path) -> Iterator[FlowerServer]:
    """A real Flower on the test's server, stopped afterwards."""
    server = FlowerServer(redis_url, tmp_path).start()
    yield server
    server.stop()
