"""Tokens the deployment issues, in the store (real server) and through ``pilotfish token`` (click's runner)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from matcher.cli.main import main
from taskqueues.errors import NotFound, Unauthenticated, ValidationError
from taskqueues.store import Store
from taskqueues.store.tokens import USE_RESOLUTION, Tokens, digest


def test_a_token_is_kept_only_as_its_hash_and_its_use_is_noted(api_store: Store) -> None:
    now = [1000.0]
    tokens = Tokens(api_store.client, api_store.keys, clock=lambda: now[0])
    record, token = tokens.create("alice", ["prod", "prod", "ana"], "group-admin", 3600)
    assert record.groups == ("prod", "ana") and record.expires == 4600.0
    stored = b"".join(api_store.client.hvals(api_store.keys.tokens))
    secret = token.split("_", 2)[2]  # urlsafe base64: it may hold "_" itself
    assert token.encode() not in stored and secret.encode() not in stored
    assert digest(token).encode() in stored
    assert tokens.verify(token).user == "alice" and tokens.get(record.id).last_used == 1000.0
    now[0] += USE_RESOLUTION / 2
    tokens.verify(token)
    assert tokens.get(record.id).last_used == 1000.0  # not written again so soon
    now[0] = 4600.0
    with pytest.raises(Unauthenticated, match="is expired"):
        tokens.verify(token)
    first = tokens.revoke(record.id).revoked
    assert tokens.revoke(record.id).revoked == first  # revoking twice keeps the first time
    assert [t.state(now[0]) for t in tokens.list()] == ["revoked"]


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "not a Pilotfish token"),
        ("pft_short", "not a Pilotfish token"),
        ("pft_0123456789abX", "not a Pilotfish token"),
        ("pft_0123456789ab_secret", "unknown token 0123456789ab"),
    ],
)
def test_malformed_and_unknown_tokens_are_refused(api_store: Store, token: str, reason: str) -> None:
    with pytest.raises(Unauthenticated, match=reason):
        api_store.tokens.verify(token)


def test_bad_token_requests_are_refused_naming_what_is_wrong(api_store: Store) -> None:
    for args, field in ((("al ice", ["prod"]), "user"), (("alice", ["a/b"]), "group")):
        with pytest.raises(ValidationError, match=field):
            api_store.tokens.create(*args)
    with pytest.raises(ValidationError, match="role must be one of user, group-admin, operator"):
        api_store.tokens.create("alice", ["prod"], "admin")
    with pytest.raises(ValidationError, match="lifetime must be positive"):
        api_store.tokens.create("alice", ["prod"], "user", 0)
    with pytest.raises(NotFound):
        api_store.tokens.revoke("used:x")
    assert api_store.tokens.list() == []


def test_the_token_commands(api_store: Store, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PILOTFISH_REDIS_URL", redis_url)
    monkeypatch.setenv("PILOTFISH_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    refused = runner.invoke(main, ["token", "create", "alice"])
    assert refused.exit_code == 1 and "needs at least one --group" in refused.output
    path = tmp_path / "alice.token"
    path.write_text("old\n")
    path.chmod(0o644)
    tmp_path.chmod(0o755)
    made = runner.invoke(main, ["token", "create", "alice", "--group", "prod", "--expires", "2h", "--write", str(path)])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    assert path.read_text().strip() == token and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # its directory as it was (it may be /tmp)
    [listed] = json.loads(runner.invoke(main, ["token", "list", "--json"]).stdout)
    assert listed["user"] == "alice" and listed["state"] == "active" and "sha256" not in listed
    assert listed["expires"] - listed["created"] == 7200
    assert runner.invoke(main, ["token", "revoke", listed["id"]]).stdout == f"token {listed['id']} of alice: revoked\n"
    audit = (tmp_path / "state" / "logs" / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in audit] == ["token create", "token revoke"]
    assert [e["action"] for e in api_store.audit.read()] == ["token create", "token revoke"]
