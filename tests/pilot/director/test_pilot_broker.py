"""The director hands the pilots it starts their Celery broker when it is apart from their store (a Redis
Cluster store's: ``broker_url``, or ``pilot_broker_url`` for a user of their own there)."""

from __future__ import annotations

from pathlib import Path

from pilot.director.service import Director
from taskqueues.context import Context
from taskqueues.settings import Settings

CLUSTER = "redis+cluster://127.0.0.1:1,127.0.0.1:2"


def test_the_director_hands_its_pilots_their_broker(tmp_path: Path) -> None:
    settings = Settings(
        redis_url=CLUSTER,
        pilot_redis_url=CLUSTER.replace("://", "://pf-pilot-default:p@"),
        broker_url="sentinel://pf-control:c@127.0.0.1:3/0",
        redis_sentinel_master="brokers",
        state_dir=str(tmp_path),
    )
    env = Director(Context(settings))._pilot_env()
    assert env["PILOTFISH_REDIS_URL"] == settings.pilot_redis_url
    assert env["PILOTFISH_BROKER_URL"] == settings.broker_url and env["PILOTFISH_REDIS_SENTINEL_MASTER"] == "brokers"
    own = settings.with_(pilot_broker_url="sentinel://pf-pilot-default:p@127.0.0.1:3/0")
    assert Director(Context(own))._pilot_env()["PILOTFISH_BROKER_URL"] == own.pilot_broker_url
    plain = Director(Context(Settings(redis_url="redis://127.0.0.1:1/0", state_dir=str(tmp_path))))._pilot_env()
    assert "PILOTFISH_BROKER_URL" not in plain
