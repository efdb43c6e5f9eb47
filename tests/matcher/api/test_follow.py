"""``logs --follow`` through the API: a real pilot runs a payload, the RemoteClient streams what it prints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from matcher.api.remote import RemoteClient
from taskqueues.errors import Forbidden
from taskqueues.store import Store
from taskqueues.store.records import JobState
from tests.support.pilots import finish, pilot_env, running_pilot
from tests.support.store import job


def test_follow_streams_a_running_payload_through_the_api(
    http: TestClient, tokens: Callable[[], dict[str, str]], api_store: Store, redis_url: str, tmp_path: Path
) -> None:
    made = tokens()
    flag = tmp_path / "go-on"
    [job_id] = api_store.submit(
        [job(command=f"echo first; while [ ! -e {flag} ]; do sleep 0.05; done; printf 'second\\n'")]
    )
    root = RemoteClient("http://testserver", made["root"], transport=http._transport)
    alice = RemoteClient("http://testserver", made["alice"], transport=http._transport)
    seen: list[tuple[str, str]] = []
    with running_pilot(
        redis_url, tmp_path, "--idle-timeout", "1", "--log-interval", "0.1", env=pilot_env(tmp_path, cores=1)
    ) as proc:
        for stream, text in root.follow(job_id):
            if not seen:
                assert not api_store.job(job_id).state.final, "the first line came before the payload ended"
                flag.touch()
            seen.append((stream, text))
        assert api_store.job(job_id).state is JobState.DONE
        finish(proc, tmp_path, 60)
    assert "".join(t for s, t in seen if s == "out") == "first\nsecond\n"
    with pytest.raises(Forbidden, match="alice may not see job"):
        list(alice.follow(job_id))
