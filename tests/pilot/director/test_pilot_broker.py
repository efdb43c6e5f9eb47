"""The director hands the pilots it starts their Celery broker when it is apart from their store (a Redis
Cluster store's: ``broker_url``, or ``pilot_broker_url`` for a user of their own there), and their credentials
through a one-use 0600 file, never their environment."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from pilot.director.service import Director
from taskqueues import credentials
from taskqueues.context import Context
from taskqueues.settings import Settings

CLUSTER = "redis+cluster://127.0.0.1:1,127.0.0.1:2"


def handed(director: Director) -> dict[str, str]:
    """What a pilot the director starts gets: its environment, and its credential file's variables."""
    env = director._pilot_env()
    path = Path(env[credentials.PILOT_FILE_VARIABLE])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    file: dict[str, str] = json.loads(path.read_text())
    assert not set(file) & set(env)
    return {**env, **file}


def test_the_director_hands_its_pilots_their_broker(tmp_path: Path) -> None:
    settings = Settings(
        redis_url=CLUSTER,
        pilot_redis_url=CLUSTER.replace("://", "://pf-pilot-default:p@"),
        broker_url="sentinel://pf-control:c@127.0.0.1:3/0",
        redis_sentinel_master="brokers",
        state_dir=str(tmp_path),
    )
    env = handed(Director(Context(settings)))
    assert env["PILOTFISH_REDIS_URL"] == settings.pilot_redis_url
    assert env["PILOTFISH_BROKER_URL"] == settings.broker_url and env["PILOTFISH_REDIS_SENTINEL_MASTER"] == "brokers"
    own = settings.with_(pilot_broker_url="sentinel://pf-pilot-default:p@127.0.0.1:3/0")
    assert handed(Director(Context(own)))["PILOTFISH_BROKER_URL"] == own.pilot_broker_url
    plain = handed(Director(Context(Settings(redis_url="redis://127.0.0.1:1/0", state_dir=str(tmp_path)))))
    assert "PILOTFISH_BROKER_URL" not in plain


def test_no_password_reaches_a_pilots_environment_and_each_pilot_has_its_own_file(tmp_path: Path) -> None:
    settings = Settings(
        redis_url="redis://pf-control:c0ntrol@127.0.0.1:1/0",
        pilot_redis_url="redis://pf-pilot-default:p1lot@127.0.0.1:1/0",
        broker_url="redis://pf-control:c0ntrol@127.0.0.1:2/0",
        pilot_broker_url="redis://pf-pilot-default:p1lot@127.0.0.1:2/0",
        state_dir=str(tmp_path),
    )
    director = Director(Context(settings))
    first, second = director._pilot_env(), director._pilot_env()
    for env in (first, second):
        assert not any("c0ntrol" in v or "p1lot" in v for v in env.values()), env
    path = Path(first[credentials.PILOT_FILE_VARIABLE])
    assert path != Path(second[credentials.PILOT_FILE_VARIABLE])
    taken = credentials.take_pilot_file(first)  # what the pilot does at start: read, remove, forget the name
    assert taken == {"PILOTFISH_REDIS_URL": settings.pilot_redis_url, "PILOTFISH_BROKER_URL": settings.pilot_broker_url}
    assert credentials.PILOT_FILE_VARIABLE not in first and not path.exists()
    assert Path(second[credentials.PILOT_FILE_VARIABLE]).exists()  # the other pilot's is still there
