"""A pilot cannot mint itself an API token: the tokens and the audit log live outside the pilots' key pattern,
so their ACL user (on the embedded server, as ``up`` makes it) can neither read nor write them."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from taskqueues import embedded
from taskqueues.store import Store
from taskqueues.store.keys import Keys


def test_a_pilot_user_can_neither_read_nor_write_the_tokens_or_the_audit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    try:
        server = embedded.ensure(state)
        url = embedded.control_url(server)
        control = redis.Redis.from_url(url)
        pilot = redis.Redis.from_url(embedded.pilot_url(state, control, url, prefix="pf", vo="lhcb"))
        store = Store(control, Keys(vo="lhcb"))
        record, _ = store.tokens.create("alice", ["prod"], "user", 3600)
        store.audit.record({"who": "alice", "action": "submit"})
        keys = Keys(vo="lhcb")
        forged = record.stored().replace('"role": "user"', '"role": "operator"')
        for attempt in (
            lambda: pilot.hget(keys.tokens, record.id),
            lambda: pilot.hset(keys.tokens, record.id, forged),
            lambda: pilot.hset(keys.tokens, "aaaaaaaaaaaa", forged),
            lambda: pilot.execute_command("XRANGE", keys.audit, "-", "+"),
            lambda: pilot.execute_command("XADD", keys.audit, "*", "e", "{}"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        pilot.hget(keys.jobs, "1")  # its own keys it may read: the refusals above are the key pattern's
        assert store.tokens.get(record.id).role == "user"
        assert [e["who"] for e in store.audit.read()] == ["alice"]
    finally:
        embedded.stop(state)
