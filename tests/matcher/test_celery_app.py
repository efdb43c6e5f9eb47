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
print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_of_the_worker_uses_redis_even_if_a_pool_was_locked_at_the_fork(
    tmp_path: Path, redis_url: str
) -> None:
    """The embedded beat is forked from the worker: a pool lock held by another thread at that moment made
    its first liveness write wait for ever (beat sent no task at all: the housekeeping-events flake)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CONFIG": "/dev/null",
        "PILOTFISH_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", FORK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "0", (done.stdout, done.stderr)
