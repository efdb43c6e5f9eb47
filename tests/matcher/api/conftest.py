"""The API on a real redis-server: a FastAPI TestClient of the real app (unit level), tokens issued in its store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from matcher.api.app import create_app
from taskqueues.settings import Settings
from taskqueues.store import Store

HELLO: dict[str, Any] = {
    "name": "hello",
    "jobs": [{"name": "a", "command": "echo a"}, {"name": "b", "command": "echo b", "deps": ["a"]}],
}


@pytest.fixture
def api_settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_url, state_dir=str(tmp_path / "state"), submit_replicas=0)


@pytest.fixture
def make_api(api_settings: Settings) -> Iterator[Callable[..., TestClient]]:
    """``make_api(**settings)``: a TestClient of the app with these settings changed."""
    clients: list[TestClient] = []

    def make(**changes: Any) -> TestClient:
        client = TestClient(create_app(api_settings.with_(**changes) if changes else api_settings))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def http(make_api: Callable[..., TestClient]) -> TestClient:
    return make_api()


@pytest.fixture
def api_store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


@pytest.fixture
def tokens(api_store: Store) -> Callable[..., dict[str, str]]:
    """``tokens()``: bearer headers of alice (prod), bob (prod, dev), carol (group-admin of prod), root (operator)."""

    def make() -> dict[str, str]:
        made = {
            "alice": api_store.tokens.create("alice", ["prod"], "user", 3600)[1],
            "bob": api_store.tokens.create("bob", ["prod", "dev"], "user", 3600)[1],
            "carol": api_store.tokens.create("carol", ["prod"], "group-admin", 3600)[1],
            "dave": api_store.tokens.create("dave", ["dev"], "group-admin", 3600)[1],
            "root": api_store.tokens.create("root", [], "operator", None)[1],
        }
        return made

    return make


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
