"""The client end: where its token comes from, and what it says when the API cannot be reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from matcher.api.remote import ApiUnavailable, RemoteClient, read_token
from matcher.client import Client
from taskqueues.errors import ConfigError, Unauthenticated
from taskqueues.settings import Settings
from taskqueues.store.redis_server import free_port


def test_the_token_comes_from_the_environment_else_a_private_file(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path), api_url="http://127.0.0.1:1")
    assert read_token(settings, {"PILOTFISH_TOKEN": " pft_x \n"}) == "pft_x"
    with pytest.raises(Unauthenticated, match=f"no token: set \\$PILOTFISH_TOKEN or put it in {tmp_path}/token"):
        read_token(settings, {})
    path = tmp_path / "token"
    path.write_text("pft_y\n")
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=f"{path}: the token file may be read by others \\(mode 0640\\)"):
        read_token(settings, {})
    path.chmod(0o600)
    assert read_token(settings, {}) == "pft_y"


def test_from_settings_goes_through_the_api_when_api_url_is_set(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    settings = Settings(state_dir=str(tmp_path), api_url=f"http://127.0.0.1:{port}")
    (tmp_path / "token").write_text("pft_z\n")
    (tmp_path / "token").chmod(0o600)
    client = Client.from_settings(settings)
    assert isinstance(client, RemoteClient)
    with pytest.raises(ApiUnavailable, match=f"cannot reach the API at http://127.0.0.1:{port}"):
        client.overview()
