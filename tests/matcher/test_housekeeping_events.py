"""Housekeeping tasks send no Celery task events unless asked for; a remote submission keeps all of its.

A real ``pilotfish matcher`` (worker with embedded beat) on a real redis-server, watched by Celery's own
event receiver (what Flower runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from matcher.app.housekeeping import HOUSEKEEPING
from taskqueues.store.keys import Keys
from tests.support.flower import EventLog
from tests.support.paths import ROOT
from tests.support.polling import wait_until


@pytest.fixture
def events(redis_url: str) -> Iterator[EventLog]:
    log = EventLog(redis_url).start()
    yield log
    log.stop()


def environment(tmp_path: Path, redis_url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REAP_INTERVAL": "0.3",
        "PILOTFISH_BEAT_DIRECTOR": "false",
        "PILOTFISH_PILOT_EVENTS": "false",
        **extra,
    }


@contextmanager
def matcher(tmp_path: Path, env: dict[str, str]) -> Iterator[None]:
    log = (tmp_path / "matcher.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "matcher.cli", "matcher", "--concurrency", "1"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def submit_remote(tmp_path: Path, env: dict[str, str]) -> None:
    workflow = tmp_path / "w.toml"
    workflow.write_text('name = "seen"\n[[jobs]]\nname = "a"\ncommand = "true"\n')
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "submit", "--remote", str(workflow)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def reaps_seen(client: redis.Redis) -> bool:
    """The reap task ran (it records the server run it saw in the cursor hash)."""
    return bool(client.hexists(Keys().cursor, "reap:run"))


def task_names(events: EventLog) -> dict[str, str]:
    """uuid -> task name, from the events that carry one (task-sent, task-received)."""
    return {e["uuid"]: e["name"] for kind in ("task-sent", "task-received") for e in events.of(kind)}


def test_housekeeping_tasks_send_no_events_while_a_submission_sends_all(
    tmp_path: Path, redis_url: str, events: EventLog, real_redis: redis.Redis
) -> None:
    env = environment(tmp_path, redis_url)
    with matcher(tmp_path, env):
        wait_until(lambda: reaps_seen(real_redis), timeout=60, what="a reap")
        real_redis.hdel(Keys().cursor, "reap:run")
        wait_until(lambda: reaps_seen(real_redis), timeout=30, what="another reap")
        submit_remote(tmp_path, env)  # its events come after those of the reaps that ran before it
        names = task_names(events)
        [submission] = [u for u, n in names.items() if n == "pilotfish.submit_workflow"]
        events.wait("task-succeeded", uuid=submission)
        for kind in ("task-sent", "task-received", "task-started"):
            assert events.of(kind, uuid=submission), f"the submission sent no {kind}"
    every = {e["uuid"] for e in events.events if e["type"].startswith("task-")}
    assert every == {submission}, f"tasks other than the submission sent events: {task_names(events)}"


def test_a_setting_brings_the_housekeeping_events_back(
    tmp_path: Path, redis_url: str, events: EventLog, real_redis: redis.Redis
) -> None:
    env = environment(tmp_path, redis_url, PILOTFISH_HOUSEKEEPING_EVENTS="true")
    with matcher(tmp_path, env):
        wait_until(
            lambda: {"pilotfish.reap", "pilotfish.release_sweep"} <= set(task_names(events).values()),
            timeout=60,
            what="the housekeeping tasks' events",
        )
        reap = next(u for u, n in task_names(events).items() if n == "pilotfish.reap")
        events.wait("task-succeeded", uuid=reap, timeout=30)
        assert events.of("task-sent", uuid=reap) and events.of("task-received", uuid=reap)
    assert set(task_names(events).values()) <= HOUSEKEEPING
