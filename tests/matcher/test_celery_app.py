"""The Celery app configures nothing at import; Celery's ``-A matcher.app`` still finds it configured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

CHECK = """
import matcher.app.celery_app as module
assert module._app is None and module._context is None, "configured at import"
from celery.app.utils import find_app
app = find_app("matcher.app")
assert app is find_app("matcher.app.celery_app") is module.get_app()
assert app.conf.broker_url == "redis://127.0.0.1:1/0", app.conf.broker_url
assert "reap" in app.conf.beat_schedule and "pilotfish.submit_workflow" in app.tasks
print("ok")
"""


def test_importing_the_app_configures_nothing_and_dash_a_finds_it_configured(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0",
        "PILOTFISH_CONFIG": "/dev/null",
        "PILOTFISH_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


BROKER_APART = """
import matcher.app.celery_app as module
from celery.app.utils import find_app
app = find_app("matcher.app")
assert app.conf.broker_url == app.conf.result_backend == "sentinel://127.0.0.1:2", app.conf.broker_url
assert app.conf.broker_transport_options == {"master_name": "pfm"}, app.conf.broker_transport_options
assert module.context().redis_url.startswith("redis+cluster://")
print("ok")
"""


def test_a_cluster_store_takes_celerys_broker_apart(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": "redis+cluster://127.0.0.1:1,127.0.0.1:3",
        "PILOTFISH_BROKER_URL": "sentinel://127.0.0.1:2",
        "PILOTFISH_REDIS_SENTINEL_MASTER": "pfm",
        "PILOTFISH_CONFIG": "/dev/null",
        "PILOTFISH_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", BROKER_APART], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
