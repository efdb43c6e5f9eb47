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


def _passes(check: str, tmp_path: Path, **settings: str) -> None:
    """``check`` run by a fresh interpreter with these ``PILOTFISH_*`` settings prints "ok"."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_CONFIG": "/dev/null",
        "PILOTFISH_STATE_DIR": str(tmp_path),
        **{f"PILOTFISH_{name.upper()}": value for name, value in settings.items()},
    }
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_importing_the_app_configures_nothing_and_dash_a_finds_it_configured(tmp_path: Path) -> None:
    _passes(CHECK, tmp_path, redis_url="redis://127.0.0.1:1/0")


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
    _passes(
        BROKER_APART,
        tmp_path,
        redis_url="redis+cluster://127.0.0.1:1,127.0.0.1:3",
        broker_url="sentinel://127.0.0.1:2",
        redis_sentinel_master="pfm",
    )


FORK = """
import os, signal, sys, threading
import matcher.app.celery_app as module
from taskqueues.context import Context
ctx = Context()
module.configure(ctx)
ctx.client.ping()
pool = ctx.client.connection_pool
held, fork_done = threading.Event(), threading.Event()


def busy():  # another thread of the worker (the releaser, its heartbeat) in the middle of a command
    with pool._lock:
        held.set()
        fork_done.wait()


threading.Thread(target=busy).start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a child that hangs dies of it
    module.context().client.ping()
    module.context().store.drop_connections()
    os._exit(0)
fork_done.set()
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
print("ok" if code == 0 else f"the child exited {code}")
"""


def test_a_forked_child_of_the_worker_uses_redis_even_if_a_pool_was_locked_at_the_fork(
    tmp_path: Path, redis_url: str
) -> None:
    """The embedded beat is forked from the worker: a pool lock held by another thread at that moment made
    its first liveness write wait for ever (beat sent no task at all: the housekeeping-events flake)."""
    _passes(FORK, tmp_path, redis_url=redis_url)
