"""What a pilot leaves behind (issue 32, part 7): its scratch directory, and its log during an outage.

* Without ``--workdir`` a pilot works in ``pilotfish-pilot-<pid>`` in the system temp directory: owner-only
  (0700) while it runs, removed when it ends, also when a payload left a read-only directory in it.
* Its stop request cannot be read while the store is down: one line when that starts and one when it ends,
  not one at every turn of its loop.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pilot.agent.config import PilotConfig
from pilot.agent.pilot import Pilot
from taskqueues.store import Store
from taskqueues.store.records import JobState
from taskqueues.store.redis_server import RedisServer
from tests.support.polling import wait_until
from tests.support.store import job

QUEUE = "s/c/q"


def test_the_scratch_directory_is_owner_only_while_the_pilot_runs_and_gone_after(
    redis_url: str, tmp_path: Path
) -> None:
    store = Store.from_url(redis_url)
    # The payload leaves a read-only directory in the pilot's work area, and a file in its own temp directory.
    (job_id,) = store.submit(
        [job(command="mkdir -p ../left/ro && touch ../left/ro/f && chmod 500 ../left/ro; sleep 1", queues=(QUEUE,))]
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    pilot = subprocess.Popen(
        [
            *(sys.executable, "-m", "matcher.cli", "pilot", "--queue", QUEUE, "--idle-timeout", "2"),
            *("--no-events", "--cores", "1", "--mem", "1000"),
        ],
        env={**os.environ, "PILOTFISH_REDIS_URL": redis_url, "TMPDIR": str(scratch)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        workdir = scratch / f"pilotfish-pilot-{pilot.pid}"
        wait_until(lambda: store.job(job_id).state is JobState.RUNNING, timeout=30, what="the payload to run")
        assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
        out, _ = pilot.communicate(timeout=60)
        assert pilot.returncode == 0, out
        assert store.job(job_id).state is JobState.DONE, out
        assert list(scratch.iterdir()) == [], out
    finally:
        if pilot.poll() is None:
            pilot.kill()
            pilot.wait()


def test_an_unreadable_stop_request_is_logged_once_per_outage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer(tmp_path / "redis").start()
    runner = Pilot(PilotConfig(queue=QUEUE, redis_url=server.url, workdir=tmp_path / "work"))
    control = runner.control
    try:
        control.obey_stop_request()  # the store answers: nothing asked
        server.stop()
        with caplog.at_level(logging.WARNING, logger="pilot.agent"):
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # the loop asks at every turn while a release waits
                control.obey_stop_request()
                time.sleep(0.01)
            server.start()
            wait_until(
                lambda: "answers again" in caplog.text,
                between=control.obey_stop_request,
                timeout=30,
                what="the stop request to be read again",
            )
        lines = [r.getMessage() for r in caplog.records if "stop request" in r.getMessage()]
        assert len(lines) == 2, lines
        assert "unreachable" in lines[0] and "answers again" in lines[1], lines
        control.obey_stop_request(reachable=True)  # after a heartbeat: read at once, nothing more logged
        assert len([r for r in caplog.records if "stop request" in r.getMessage()]) == 2
    finally:
        server.stop()
