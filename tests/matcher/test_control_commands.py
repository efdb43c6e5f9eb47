"""``pilotfish kill``, ``cancel`` and ``drain`` as a user runs them: what they say, and their exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from taskqueues.store import Store
from taskqueues.store.records import PilotOffer, RunResult
from tests.support.paths import ROOT
from tests.support.store import job


def cli(redis_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_STATE_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_kill_and_cancel_of_an_ended_job_fail_and_say_so(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    [done_id, waiting_id] = store.submit([job(command="true", score=0), job(command="true", score=1)])
    (leased,) = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))
    store.complete(leased.id, leased.attempt, "p", RunResult(wall=1))
    for verb in ("kill", "cancel"):
        done = cli(redis_url, tmp_path, verb, done_id)
        assert done.returncode == 1
        assert done.stderr == f"pilotfish: error: job {done_id} has already ended (done)\n"
    both = cli(redis_url, tmp_path, "cancel", waiting_id, done_id)
    assert both.returncode == 1, "one target failed"
    assert both.stdout == f"job {waiting_id}: ended (cancelled; it was not running)\n"


def test_cancel_of_nothing_names_what_it_looked_for(redis_url: str, tmp_path: Path) -> None:
    done = cli(redis_url, tmp_path, "cancel", "nosuchrequest")
    assert (done.returncode, done.stderr) == (1, "pilotfish: error: no request or job 'nosuchrequest'\n")
    done = cli(redis_url, tmp_path, "kill", "4242")
    assert (done.returncode, done.stderr) == (1, "pilotfish: error: no job '4242'\n")


def test_drain_asks_a_live_pilot_through_the_store(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    store.heartbeat("local-7@node", {}, {"queue": "site/ce/q1", "cores": 1})
    done = cli(redis_url, tmp_path, "drain", "local-7@node")
    assert (done.returncode, done.stdout) == (0, "pilot local-7@node: draining\n")
    held = store.pilots.stop_request("local-7@node")
    assert held is not None and held.mode == "drain"
    done = cli(redis_url, tmp_path, "drain", "--shutdown", "local-7@node")
    held = store.pilots.stop_request("local-7@node")
    assert done.returncode == 0 and held is not None and held.mode == "shutdown"
    done = cli(redis_url, tmp_path, "drain", "nobody@nowhere")
    assert done.returncode == 1 and "no live pilot 'nobody@nowhere'" in done.stderr
