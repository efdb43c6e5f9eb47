"""CeleryObserver against real Celery: its events as Celery's EventReceiver and State see them, and Celery's
own control client (app.control) reaching the pilot's remote control. Real redis-server, real payload processes.
"""

from __future__ import annotations

import itertools
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.events.state import State

from pilot.agent.observer import Command, PilotLoad
from pilot.celery_events import CeleryObserver, task_uuid
from taskqueues.store.records import RunResult
from taskqueues.store.redis_server import RedisServer
from tests.support.flower import EventLog, make_job, pilot_info
from tests.support.polling import wait_until


def run_payload(command: str) -> RunResult:
    """Run a real payload the way a pilot does (sh -c), and report it as a pilot would."""
    start = time.monotonic()
    done = subprocess.run(["sh", "-c", command], check=False)
    wall = time.monotonic() - start
    reason = "" if done.returncode == 0 else f"exit code {done.returncode}"
    return RunResult(exit_code=done.returncode, wall=wall, reason=reason)


@pytest.fixture
def events(redis_url: str) -> Iterator[EventLog]:
    log = EventLog(redis_url).start()
    yield log
    log.stop()


@pytest.fixture
def client(redis_url: str) -> Celery:
    return Celery("pilotfish-test-client", broker=redis_url, set_as_current=False)


def started_observer(redis_url: str, name: str, freq: float = 0.5) -> CeleryObserver:
    observer = CeleryObserver(redis_url, freq=freq)
    observer.pilot_started(pilot_info(name))
    assert observer._control is not None
    assert observer._control.wait_ready(10), "the remote-control consumer never subscribed"
    return observer


def test_task_uuid_is_a_stable_uuid5_per_attempt() -> None:
    first = task_uuid("alice", "17", 1)
    assert first == task_uuid("alice", "17", 1)
    assert uuid.UUID(first).version == 5
    assert len({first, task_uuid("alice", "17", 2), task_uuid("bob", "17", 1), task_uuid("alice", "18", 1)}) == 4


def test_worker_and_task_events_as_celery_sees_them(redis_url: str, events: EventLog) -> None:
    info = pilot_info("local-1001@testnode")
    observer = CeleryObserver(redis_url, freq=0.4, control=False)
    state = State()
    observer.pilot_started(info)
    online = events.wait("worker-online", hostname=info.name)
    assert online["sw_ident"] == "pilotfish" and online["sw_sys"] and online["sw_ver"]
    assert online["freq"] == 0.4 and online["active"] == 0 and online["processed"] == 0
    assert len(online["loadavg"]) == 3

    ok_job = make_job("101", "sleep 1", name="montage.tile-3", tq_id="0123abcd.astro.carol")
    bad_job = make_job("102", "exit 3", attempt=2)
    observer.payload_started(info, ok_job)
    observer.heartbeat(
        info, PilotLoad(used_cpu=1, used_mem=100, running=("101",), processed=0, time_left=3600.0, draining=False)
    )
    ok_result = run_payload(ok_job.command)
    # A heartbeat sent while the payload ran says one task is active, with the pilot's load.
    beat = events.wait("worker-heartbeat", hostname=info.name, active=1)
    assert beat["used_cpu"] == 1 and beat["time_left"] == 3600.0
    observer.payload_ended(info, ok_job, ok_result, "done")
    observer.payload_started(info, bad_job)
    observer.payload_ended(info, bad_job, run_payload(bad_job.command), "failed")

    ok_id, bad_id = task_uuid("alice", "101", 1), task_uuid("alice", "102", 2)
    received = events.wait("task-received", uuid=ok_id)
    assert received["hostname"] == info.name
    assert received["name"] == "montage.tile-3"
    assert received["args"] == "['sleep 1']"
    assert received["kwargs"] == (
        "{'job': '101', 'attempt': 1, 'requirements': {'cpu': 1, 'mem': 100}, 'owner': 'carol', 'group': 'astro'}"
    )
    assert received["retries"] == 0 and received["root_id"] == ok_id
    assert events.wait("task-received", uuid=bad_id)["name"] == "job102"
    events.wait("task-started", uuid=ok_id)
    succeeded = events.wait("task-succeeded", uuid=ok_id)
    assert 1.0 <= succeeded["runtime"] < 5 and "'exit_code': 0" in succeeded["result"]
    failed = events.wait("task-failed", uuid=bad_id)
    assert failed["exception"] == "exit code 3"
    events.wait("worker-heartbeat", hostname=info.name, active=0, processed=2)

    observer.pilot_stopped(info, "time is up")
    offline = events.wait("worker-offline", hostname=info.name)
    assert offline["reason"] == "time is up"
    observer.close()

    # Celery's own state machine (what Flower runs) makes the pilot a worker and the payloads tasks.
    for event in sorted(events.events, key=lambda e: e.get("clock") or 0):
        if event["type"] != "probe-ping":
            state.event(dict(event, local_received=event["timestamp"]))
    assert state.tasks[ok_id].state == "SUCCESS" and state.tasks[ok_id].worker.hostname == info.name
    assert state.tasks[bad_id].state == "FAILURE" and state.tasks[bad_id].exception == "exit code 3"
    assert not state.workers[info.name].alive


@pytest.mark.parametrize(
    ("state", "event", "celery_state"),
    [
        ("waiting", "task-retried", "RETRY"),
        ("cancelled", "task-revoked", "REVOKED"),
        ("lost", "task-revoked", "REVOKED"),
        ("stale", "task-failed", "FAILURE"),
        ("failed", "task-failed", "FAILURE"),
        ("done", "task-succeeded", "SUCCESS"),
    ],
)
def test_each_end_state_maps_to_a_celery_task_state(
    redis_url: str, events: EventLog, state: str, event: str, celery_state: str
) -> None:
    info = pilot_info("local-1003@testnode")
    observer = CeleryObserver(redis_url, freq=5.0, control=False)
    observer.pilot_started(info)
    job = make_job("111", "sleep 0.1")
    observer.payload_started(info, job)
    observer.payload_ended(info, job, run_payload(job.command), state)
    tid = task_uuid("alice", "111", 1)
    ended = events.wait(event, uuid=tid)
    observer.close()
    celery = State()
    for e in (events.wait("task-received", uuid=tid), events.wait("task-started", uuid=tid), ended):
        celery.event(dict(e, local_received=e["timestamp"]))
    assert celery.tasks[tid].state == celery_state


def test_heartbeats_keep_the_pilot_alive_in_celery_state(redis_url: str, events: EventLog) -> None:
    info = pilot_info("local-1002@testnode")
    observer = CeleryObserver(redis_url, freq=0.3, control=False)
    observer.pilot_started(info)
    wait_until(lambda: len(events.of("worker-heartbeat", hostname=info.name)) >= 4, timeout=5, what="4 heartbeats")
    beats = events.of("worker-heartbeat", hostname=info.name)
    assert all(e["freq"] == 0.3 for e in beats), "each heartbeat tells Flower when to expect the next"
    # Never closer than the period (a slow machine only spaces them further apart).
    gaps = [b["timestamp"] - a["timestamp"] for a, b in itertools.pairwise(beats)]
    assert all(gap > 0.15 for gap in gaps), gaps
    state = State()
    now = time.time()
    for event in events.of("worker-online") + events.of("worker-heartbeat"):
        state.event(dict(event, local_received=now))
    assert state.workers[info.name].alive
    observer.pilot_stopped(info, "done")
    observer.close()  # its sender thread has ended: nothing is sent after this
    events.wait("worker-offline", hostname=info.name)
    with events._lock:
        kinds = [e["type"] for e in events.events if e.get("hostname") == info.name]
    assert "worker-heartbeat" not in kinds[kinds.index("worker-offline") :], "heartbeats went on after offline"


def test_revoke_terminate_shutdown_and_ping_reach_the_observer(redis_url: str, client: Celery) -> None:
    name = "local-2001@testnode"
    observer = started_observer(redis_url, name, freq=3600.0)  # no heartbeat brings the revoke
    info = pilot_info(name)
    job = make_job("201", "sleep 30", name="long")
    observer.payload_started(info, job)
    tid = task_uuid("alice", "201", 1)
    try:
        assert client.control.ping(destination=[name], timeout=2) == [{name: {"ok": "pong"}}]

        # Plain revoke only flags, like Celery: a running payload goes on.
        reply = client.control.revoke(tid, destination=[name], reply=True, timeout=2)
        assert reply == [{name: {"ok": f"tasks {tid} flagged as revoked"}}]
        assert observer.commands() == []

        client.control.revoke(tid, terminate=True, destination=[name])
        commands = wait_until(observer.commands, timeout=30, interval=0.01, what="the kill command")
        assert commands == [Command("kill", "201", "revoked from Celery/Flower (SIGTERM)")]

        reply = client.control.revoke(tid, terminate=True, signal="SIGKILL", destination=[name], reply=True, timeout=2)
        assert reply == [{name: {"ok": f"terminate: {tid}"}}]
        assert observer.commands() == [Command("kill", "201", "revoked from Celery/Flower (SIGKILL)")]
        unknown = str(uuid.uuid4())
        reply = client.control.revoke(unknown, terminate=True, destination=[name], reply=True, timeout=2)
        assert reply == [{name: {"ok": "terminate: tasks unknown"}}]

        client.control.shutdown(destination=[name])
        assert wait_until(observer.commands, timeout=2, interval=0.01, what="the shutdown command") == [
            Command("shutdown", reason="Got shutdown from remote")
        ]
    finally:
        observer.close()


def test_commands_for_another_pilot_are_ignored(redis_url: str, client: Celery) -> None:
    observer = started_observer(redis_url, "local-2002@testnode")
    try:
        assert client.control.ping(destination=["local-9999@elsewhere"], timeout=0.5) == []
        client.control.shutdown(destination=["local-9999@elsewhere"])
        client.control.ping(destination=["local-2002@testnode"], timeout=2)  # ordered after the shutdown
        assert observer.commands() == []
    finally:
        observer.close()


def test_inspect_replies_are_what_flower_reads(redis_url: str, client: Celery) -> None:
    name = "local-2003@testnode"
    observer = started_observer(redis_url, name)
    info = pilot_info(name)
    job = make_job("301", "sleep 30", name="render")
    observer.payload_started(info, job)
    tid = task_uuid("alice", "301", 1)
    inspect = client.control.inspect(destination=[name], timeout=2)
    try:
        stats = inspect.stats()[name]
        assert stats["pool"]["max-concurrency"] == 2 and stats["pool"]["running"] == 1
        assert stats["broker"]["transport"] == "redis" and "password" not in stats["broker"]
        assert stats["total"] == {} and isinstance(stats["pid"], int) and "rusage" in stats
        active = inspect.active(safe=True)[name]
        assert [(a["id"], a["name"], a["args"], a["kwargs"]["job"]) for a in active] == [
            (tid, "render", ["sleep 30"], "301")
        ]
        assert inspect.query_task(tid)[name] == {tid: ["active", active[0]]}
        assert inspect.reserved()[name] == [] and inspect.scheduled()[name] == []
        assert inspect.revoked()[name] == []
        assert inspect.conf()[name]["queue"] == "site-a/ce-1/short"
        assert inspect.active_queues()[name][0]["name"] == "site-a/ce-1/short"
        observer.payload_ended(info, job, RunResult(exit_code=0, wall=0.1), "done")
        assert inspect.registered()[name] == ["render"]
        assert inspect.stats()[name]["total"] == {"render": 1}
        assert inspect.active()[name] == []
        # Commands a pilot cannot honour get a clear error, not silence.
        reply = client.control.broadcast("pool_grow", arguments={"n": 2}, destination=[name], reply=True, timeout=2)
        assert "not supported by a Pilotfish pilot" in reply[0][name]["error"]
        reply = client.control.broadcast("no_such_command", destination=[name], reply=True, timeout=2)
        assert reply[0][name]["error"] == "a Pilotfish pilot has no remote-control command 'no_such_command'"
    finally:
        observer.close()


def test_survives_the_broker_going_away(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    port = server.port
    info = pilot_info("local-3001@testnode")
    observer = CeleryObserver(server.url, freq=0.3, max_backoff=0.5)
    client = Celery("pilotfish-test-client", broker=server.url, set_as_current=False)
    try:
        observer.pilot_started(info)
        assert observer._control is not None and observer._control.wait_ready(10)
        server.stop()
        # Nothing raises and nothing blocks while the broker is gone: the events wait in the sender's queue
        # (the pilot's thread only queues them; were it sending, it would be stuck on the broker).
        queued = observer.sender_stats["pending"]
        job = make_job("401", "true")
        observer.payload_started(info, job)
        observer.heartbeat(info, PilotLoad(1, 10, ("401",), 0, None, False))
        observer.payload_ended(info, job, RunResult(exit_code=0, wall=0.01), "done")
        assert observer.commands() == []
        assert observer.sender_stats["pending"] >= queued + 3  # received, started, succeeded
        wait_until(lambda: observer.sender_stats["failures"] > 0, timeout=5, what="a failed send")

        server = RedisServer(tmp_path / "redis", port=port).start()
        log = EventLog(server.url).start()
        try:
            # The queued task events go out after the reconnection, and heartbeats resume.
            log.wait("worker-heartbeat", timeout=15, hostname=info.name)
            wait_until(
                lambda: observer._control is not None and observer._control.wait_ready(0),
                timeout=15,
                what="the remote control to reconnect",
            )
            assert wait_until(
                lambda: client.control.ping(destination=[info.name], timeout=1), timeout=15, what="a ping answer"
            ) == [{info.name: {"ok": "pong"}}]
            assert observer.sender_stats["pending"] == 0
        finally:
            log.stop()
    finally:
        observer.close()
        server.stop()


def test_event_sending_is_cheap_for_the_pilot_loop(redis_url: str, events: EventLog) -> None:
    """N=2000 events (1000 payloads: received+started at start, succeeded at end): caller cost and delivery."""
    info = pilot_info("local-5001@testnode")
    observer = CeleryObserver(redis_url, freq=5.0, control=False)
    observer.pilot_started(info)
    events.wait("worker-online", hostname=info.name)
    jobs = [make_job(str(1000 + i), "true") for i in range(667)]
    result = RunResult(exit_code=0, wall=0.001)
    start = time.perf_counter()
    for job in jobs:
        observer.payload_started(info, job)
        observer.payload_ended(info, job, result, "done")
    caller = time.perf_counter() - start
    n_events = 3 * len(jobs)
    wait_until(lambda: len(events.of("task-succeeded")) == len(jobs), timeout=60, what="all task events delivered")
    delivered = time.perf_counter() - start
    observer.close()
    per_event_us = caller / n_events * 1e6
    print(
        f"\n{n_events} events: {per_event_us:.1f} us per event in the pilot's thread, "
        f"all delivered to an EventReceiver after {delivered:.2f} s ({n_events / delivered:.0f} events/s)"
    )
    assert observer.sender_stats["dropped"] == 0
    assert per_event_us < 200, per_event_us
