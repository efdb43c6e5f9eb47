"""``pilotfish up`` on the README's Sentinel URL, Flower included: a real primary, replica and three sentinels
(tests/support/sentinel.py), every part of the deployment started by ``up``; the primary is killed with SIGKILL,
and Flower keeps answering, sees the control-plane worker through the promoted replica, and logs no traceback
(it logged one per broker poll when Celery's default app lacked the ``master_name`` transport option). And the
README's Cluster layout: the store on a real Cluster, the broker on Sentinel, a job run, no traceback."""

from __future__ import annotations

import base64
import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.matcher.test_deploy import Deployment
from tests.support.cluster import cluster_set
from tests.support.polling import wait_until
from tests.support.sentinel import MASTER, quietly, sentinel_set


def _get(port: int, path: str, state: Path) -> Any:
    """A GET of Flower's API with the deployment's login (``up`` starts Flower behind one: matcher.cli.flower)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    login = (state / "flower" / "login").read_text().strip()
    request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read().decode() or "null")


def _workers(port: int, state: Path) -> set[str]:
    """The workers Flower's API lists after asking them (a broadcast through the broker)."""
    try:
        return set(_get(port, "/api/workers?refresh=1", state))
    except (urllib.error.URLError, OSError, ValueError):
        return set()


def test_up_on_sentinel_keeps_flower_working_across_a_failover(tmp_path: Path) -> None:
    with sentinel_set(tmp_path / "redis") as servers:
        made = Deployment(tmp_path)  # pilotfish up/down in a state directory of the test's own
        port = int(made.env["PILOTFISH_FLOWER_PORT"])
        made.env.update(
            PILOTFISH_REDIS_URL=servers.url,
            PILOTFISH_REDIS_SENTINEL_MASTER=MASTER,
        )
        try:
            out = made.cli("up").stdout
            assert "flower: started" in out, out
            wait_until(
                lambda: bool(_workers(port, made.state)), timeout=60, what="Flower to list the control-plane worker"
            )
            first = servers.primary.pid()
            assert first is not None
            os.kill(first, signal.SIGKILL)
            wait_until(quietly(lambda: servers.primary_port() == servers.replica.port), what="the replica promoted")
            wait_until(
                lambda: bool(_workers(port, made.state)),
                timeout=60,
                what="Flower to list the worker through the new primary",
            )
        finally:
            made.cli("down")
        log = (made.state / "logs" / "flower.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-4000:]
        assert "master_name" not in log, log[-4000:]


def test_up_on_a_cluster_store_with_a_sentinel_broker_runs_a_job_without_a_traceback(tmp_path: Path) -> None:
    """The README's Cluster layout: the store on a real 3-primary cluster, Celery's broker on Sentinel."""
    with cluster_set(tmp_path / "cluster") as store, sentinel_set(tmp_path / "redis") as broker:
        made = Deployment(tmp_path)
        port = int(made.env["PILOTFISH_FLOWER_PORT"])
        made.env.update(
            PILOTFISH_REDIS_URL=store.url,
            PILOTFISH_BROKER_URL=broker.url,
            PILOTFISH_REDIS_SENTINEL_MASTER=MASTER,
        )
        workflow = tmp_path / "one.toml"
        workflow.write_text('name = "one"\n[[jobs]]\nname = "a"\ncommand = "true"\n')
        try:
            made.cli("up")
            made.cli("submit", str(workflow))
            wait_until(
                lambda: bool(_workers(port, made.state)), timeout=60, what="Flower to list the control-plane worker"
            )
            wait_until(
                lambda: "(1 done)" in made.cli("status", "--all").stdout, timeout=90, interval=1, what="the job done"
            )
        finally:
            made.cli("down")
        for part in ("worker", "beat", "director", "flower"):
            log = (made.state / "logs" / f"{part}.log").read_text(errors="replace")
            assert "Traceback" not in log, f"{part}.log: {log[-4000:]}"
