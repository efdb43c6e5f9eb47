"""``broker_url``: Celery's broker apart from the store, required when the store is a Redis Cluster."""

from __future__ import annotations

import pytest

from taskqueues.errors import ConfigError
from taskqueues.settings import Settings

CLUSTER = "redis+cluster://pf-control:secret@10.0.0.1:6379,10.0.0.2:6379"


def test_a_cluster_store_needs_a_broker_apart() -> None:
    with pytest.raises(ConfigError, match=r"\$PILOTFISH_REDIS_URL: names a Redis Cluster.*set broker_url") as err:
        Settings.load("/dev/null", env={"PILOTFISH_REDIS_URL": CLUSTER})
    assert "secret" not in str(err.value)
    settings = Settings.load(
        "/dev/null", env={"PILOTFISH_REDIS_URL": CLUSTER, "PILOTFISH_BROKER_URL": "redis://b:6379/0"}
    )
    assert ("broker_url", "redis://b:6379/0", "$PILOTFISH_BROKER_URL") in settings.items()


@pytest.mark.parametrize("name", ["broker_url", "pilot_broker_url"])
def test_celerys_broker_cannot_be_a_cluster(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name.upper()}: Celery's Redis transport cannot use a Redis Cluster"):
        Settings.load(
            "/dev/null", env={"PILOTFISH_BROKER_URL": "redis://b:6379/0", f"PILOTFISH_{name.upper()}": CLUSTER}
        )


def test_a_bad_cluster_url_is_refused_with_what_is_wrong() -> None:
    env = {"PILOTFISH_REDIS_URL": "redis+cluster://u:secret@10.0.0.1:6379/2", "PILOTFISH_BROKER_URL": "redis://b/0"}
    with pytest.raises(ConfigError, match=r"redis\+cluster://u@10\.0\.0\.1:6379/2': a cluster has only database 0"):
        Settings.load("/dev/null", env=env)


def test_the_default_broker_is_the_store() -> None:
    assert Settings.load("/dev/null", env={"PILOTFISH_REDIS_URL": "redis://a:6379/0"}).broker_url == ""
