"""Beat's stop signal (issue 32): the schedule file is closed once, by beat's loop, never under its feet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

# A real beat service (our scheduler, its shelve file, a real broker), its signal handlers installed as
# ``celery beat`` installs them: Celery's own just before the loop starts, then whatever beat_init installs.
# At the third tick a SIGTERM arrives where Python loses the SystemExit its handler raises (in a destructor,
# say: "Exception ignored in ..."), and the tick goes on. That is how beat crashed once under load.
LOST_SIGNAL = """
import signal, sys
from celery import signals
from celery.apps.beat import Beat
from celery.beat import Service
import matcher.app.celery_app as module
from matcher.app import beat
from taskqueues.context import Context

if sys.argv[1] == "celery-alone":
    signals.beat_init.disconnect(beat._on_beat_init)
app = module.configure(Context())
service = Service(app, scheduler_cls=beat.Scheduler, schedule_filename="schedule", max_interval=1)
Beat(app=app).install_sync_handler(service)
scheduler = service.scheduler
ticks = 0
tick = scheduler.tick

def lost_signal_tick():
    global ticks
    ticks += 1
    if ticks == 3:
        try:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        except SystemExit:
            pass
    tick()
    return 0.01

scheduler.tick = lost_signal_tick
try:
    service.start()
except ValueError as exc:
    print("crashed:", exc)
    sys.exit(3)
print("stopped after", ticks, "ticks, schedule", type(scheduler._store.dict).__name__)
"""


@pytest.mark.parametrize(
    ("handlers", "status", "said"),
    [
        ("celery-alone", 3, "crashed: invalid operation on closed shelf"),  # the cause, shown once
        ("pilotfish", 0, "stopped after 3 ticks, schedule _ClosedDict"),  # stopped by its loop, closed by it
    ],
)
def test_a_stop_signal_lost_midway_lets_the_loop_stop_and_close_the_schedule(
    redis_url: str, tmp_path: Path, handlers: str, status: int, said: str
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_CONFIG": "/dev/null",
        "PILOTFISH_STATE_DIR": str(tmp_path),
        "PILOTFISH_REDIS_URL": redis_url,
    }
    done = subprocess.run(
        [sys.executable, "-c", LOST_SIGNAL, handlers],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout.strip()) == (status, said), done.stderr[-3000:]
