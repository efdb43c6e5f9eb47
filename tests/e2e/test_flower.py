"""The stock Flower (a real `celery flower` process) shows a pilot as a worker and its payloads as tasks, and
its revoke and shutdown buttons reach the pilot. The observer is driven directly around real payload processes
(and tests/test_flower_pilots.py does the same with real pilot processes).
"""

from __future__ import annotations

import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from pilot.agent.observer import Command, PilotInfo
from pilot.celery_events import CeleryObserver, task_uuid
from taskqueues.store.records import Job, RunResult
from tests.support.flower import FlowerServer, make_job, pilot_info
from tests.support.polling import wait_until

FREQ = 1.0


@pytest.fixture
def pilot(redis_url: str, flower: FlowerServer) -> Iterator[tuple[CeleryObserver, PilotInfo]]:
    info = pilot_info("local-7001@flowernode")
    observer = CeleryObserver(redis_url, freq=FREQ)
    observer.pilot_started(info)
    # Flower subscribes to events a little after it answers HTTP: wait until it has seen the pilot's heartbeats.
    wait_until(
        lambda: flower.get("/api/workers?status=1").get(info.name) is True,
        timeout=15,
        what="Flower to see the pilot alive",
    )
    yield observer, info
    observer.close()


def run(observer: CeleryObserver, info: PilotInfo, job: Job) -> RunResult:
    observer.payload_started(info, job)
    start = time.monotonic()
    done = subprocess.run(["sh", "-c", job.command], check=False)
    result = RunResult(
        exit_code=done.returncode,
        wall=time.monotonic() - start,
        reason="" if done.returncode == 0 else f"exit code {done.returncode}",
    )
    observer.payload_ended(info, job, result, "done" if done.returncode == 0 else "failed")
    return result


def task(flower: FlowerServer, tid: str, state: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        tasks = flower.get("/api/tasks")
        return tasks.get(tid) if tasks.get(tid, {}).get("state") == state else None

    result: dict[str, Any] = wait_until(found, timeout=10, what=f"task {tid} in state {state} in Flower")
    return result


def test_flower_lists_the_pilot_and_its_payloads(flower: FlowerServer, pilot: tuple[CeleryObserver, PilotInfo]) -> None:
    observer, info = pilot

    # /api/workers is built from the inspect replies (stats, active_queues, registered, conf).
    def inspected() -> dict[str, Any] | None:
        worker = flower.get("/api/workers?refresh=1").get(info.name)
        return worker if worker and {"stats", "conf", "active_queues", "registered"} <= set(worker) else None

    workers = wait_until(inspected, timeout=15, what="the pilot, fully inspected, in /api/workers")
    assert workers["stats"]["pool"]["max-concurrency"] == 2
    assert workers["conf"]["queue"] == info.queue
    assert workers["active_queues"][0]["name"] == info.queue

    run(observer, info, make_job("11", "sleep 0.3; echo hello", name="tile-11"))
    run(observer, info, make_job("12", "exit 4", attempt=3))

    ok = task(flower, task_uuid(info.vo, "11", 1), "SUCCESS")
    assert ok["name"] == "tile-11" and ok["worker"] == info.name
    assert ok["args"] == "['sleep 0.3; echo hello']" and "'job': '11'" in ok["kwargs"]
    assert 0.3 <= ok["runtime"] < 5
    bad = task(flower, task_uuid(info.vo, "12", 3), "FAILURE")
    assert bad["name"] == "job12" and bad["exception"] == "exit code 4" and "'attempt': 3" in bad["kwargs"]
    # Flower's search parses kwargs: a job id finds its payload.
    found = flower.get("/api/tasks?search=" + urllib.parse.quote("kwargs:job=12"))
    assert list(found) == [task_uuid(info.vo, "12", 3)]

    # Flower's HTML pages render a pilot (the worker page needs every inspect reply to be well formed).
    page = flower.get("/worker/" + urllib.parse.quote(info.name), raw=True)
    assert info.name in page and info.queue in page
    assert "tile-11" in flower.get("/task/" + task_uuid(info.vo, "11", 1), raw=True)

    observer.pilot_stopped(info, "time is up")
    wait_until(
        lambda: flower.get("/api/workers?status=1").get(info.name) is False,
        timeout=10,
        what="Flower to show the pilot offline",
    )
    assert flower.errors() == []


def test_flower_revoke_kills_the_payload_and_shutdown_stops_the_pilot(
    flower: FlowerServer, pilot: tuple[CeleryObserver, PilotInfo]
) -> None:
    observer, info = pilot
    wait_until(
        lambda: flower.get("/api/workers?refresh=1").get(info.name), timeout=15, what="the pilot in /api/workers"
    )
    job = make_job("21", "sleep 60", name="long-one")
    payload = subprocess.Popen(["sh", "-c", job.command], start_new_session=True)
    observer.payload_started(info, job)
    tid = task_uuid(info.vo, "21", 1)
    try:
        task(flower, tid, "STARTED")
        active = wait_until(
            lambda: flower.get(f"/api/workers?refresh=1&workername={info.name}")[info.name].get("active"),
            timeout=10,
            what="the payload among the pilot's active tasks",
        )
        assert [a["id"] for a in active] == [tid]

        start = time.monotonic()
        status, body = flower.post(f"/api/task/revoke/{tid}?terminate=true")
        assert status == 200, body
        # What the pilot's loop does with the command: terminate the payload, report it.
        commands = wait_until(
            observer.commands, timeout=FREQ, interval=0.01, what="the kill command within one heartbeat"
        )
        assert commands == [Command("kill", "21", "revoked from Celery/Flower (SIGTERM)")]
        print(f"\nFlower revoke -> Command('kill') in {1000 * (time.monotonic() - start):.0f} ms")
        payload.terminate()
        payload.wait(10)
        observer.payload_ended(
            info, job, RunResult(exit_code=payload.returncode, wall=1.0, reason="killed by operator"), "failed"
        )
        revoked = task(flower, tid, "REVOKED")
        assert revoked["worker"] == info.name

        start = time.monotonic()
        status, body = flower.post("/api/worker/shutdown/" + urllib.parse.quote(info.name))
        assert status == 200, body
        commands = wait_until(observer.commands, timeout=FREQ, interval=0.01, what="the shutdown command")
        assert [c.kind for c in commands] == ["shutdown"]
        print(f"Flower shutdown -> Command('shutdown') in {1000 * (time.monotonic() - start):.0f} ms")
        status, body = flower.post("/api/worker/shutdown/nobody@nowhere")
        assert status == 404
        assert flower.errors() == []
    finally:
        if payload.poll() is None:
            payload.kill()
            payload.wait()
