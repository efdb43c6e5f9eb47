"""``broker_url``: Celery's broker apart from the store, required when the store is a Redis Cluster."""

from __future__ import annotations

import logging

import pytest

from taskqueues.context import Context
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


def test_pilots_without_a_broker_url_of_their_own_get_the_control_planes_and_a_warning_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def pilots_broker(**env: str) -> str:
        settings = Settings.load("/dev/null", env={"PILOTFISH_REDIS_URL": "redis://a:6379/0", **env})
        return Context(settings).pilot_broker_url

    with caplog.at_level(logging.WARNING, logger="taskqueues.context"):
        assert pilots_broker(PILOTFISH_BROKER_URL="redis://pf-control:s3cret@b:6379/0").endswith("s3cret@b:6379/0")
        assert "control plane's broker credentials: set pilot_broker_url" in caplog.text
        caplog.clear()
        own = "redis://pf-pilot-default:p@b:6379/0"
        assert (
            pilots_broker(PILOTFISH_BROKER_URL="redis://pf-control:s3cret@b:6379/0", PILOTFISH_PILOT_BROKER_URL=own)
            == own
        )
        assert pilots_broker(PILOTFISH_BROKER_URL="redis://b:6379/0") == "redis://b:6379/0"  # no credentials to keep
        assert pilots_broker() == ""  # the store's Redis is the broker: pilot_redis_url covers it
        assert caplog.text == ""


@pytest.mark.parametrize(
    "url",
    [
        "redis://pf-control:s3cret@a:6379/0",
        "sentinel://pf-control:s3cret@s1:26379/0;sentinel://s2:26379",
        "redis+cluster://pf-control:s3cret@r1:6379,r2:6379",
    ],
)
def test_pilots_without_a_store_url_of_their_own_get_the_control_planes_and_a_warning_says_so(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"PILOTFISH_REDIS_URL": url, "PILOTFISH_BROKER_URL": "redis://b:6379/0"}
    with caplog.at_level(logging.WARNING, logger="taskqueues.context"):
        assert Context(Settings.load("/dev/null", env=env)).pilot_redis_url == url
        assert "pilots connect with the control plane's credentials" in caplog.text
        caplog.clear()
        open_url = url.replace("pf-control:s3cret@", "")
        assert Context(Settings.load("/dev/null", env={**env, "PILOTFISH_REDIS_URL": open_url})).pilot_redis_url
        assert caplog.text == ""  # an open server has no credentials to keep from pilots
