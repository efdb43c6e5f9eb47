"""A pilot's Celery events go to the broker: ``--broker-url`` (``$PILOTFISH_BROKER_URL``), else its store,
which cannot be a Redis Cluster (Celery's Redis transport cannot use one)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from pilot.agent.command import make_observer
from pilot.agent.config import PilotConfig
from pilot.agent.observer import NullObserver
from tests.support.pilots import QUEUE

CLUSTER = "redis+cluster://127.0.0.1:1,127.0.0.1:2"


def test_a_cluster_store_needs_a_broker_for_the_events(tmp_path: Path) -> None:
    config = PilotConfig(queue=QUEUE, redis_url=CLUSTER, workdir=tmp_path)
    assert isinstance(make_observer(False, config), NullObserver)
    with pytest.raises(click.ClickException, match=r"--events needs a Celery broker apart .* --broker-url"):
        make_observer(True, config)
    observer = make_observer(True, config, "redis://127.0.0.1:1/0")
    assert type(observer).__name__ == "CeleryObserver"
