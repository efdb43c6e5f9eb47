"""Kill and stop requests reach a real pilot at once, through its own channel, and never lose work.

The pilots run with a heartbeat far longer than any wait of these tests (half an hour), so whatever they
do within the test's polling window they did because they were nudged, not because a heartbeat came.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from pilot.agent.config import identity_from_environment
from taskqueues.errors import ValidationError
from taskqueues.store import StopRequest, Store
from taskqueues.store.keys import Keys
from taskqueues.store.records import JobState
from tests.support.pilots import finish, pilot_env, pilot_log, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job

pytestmark = pytest.mark.store(lease_seconds=3600, clock=time.time)  # the pilots run on the real clock

#: A heartbeat that never comes during a test: lease 1 h, heartbeat every 30 min.
SLOW = ("--lease", "3600", "--heartbeat", "1800", "--kill-grace", "1")
#: Polling windows: far shorter than the heartbeat, long enough for a loaded 2-core machine.
WINDOW = 60.0


def named_env(tmp_path: Path, batch_id: str, cores: int = 1) -> tuple[str, dict[str, str]]:
    env = pilot_env(tmp_path, cores=cores)
    env["PILOTFISH_BATCH_ID"] = batch_id
    return identity_from_environment({"PILOTFISH_BATCH_ID": batch_id}).name, env


def seen(store: Store, name: str) -> bool:
    return name in store.pilot_records()


def test_a_kill_reaches_the_payload_before_the_next_heartbeat(store: Store, redis_url: str, tmp_path: Path) -> None:
    [victim] = store.submit([job(command="sleep 300")])
    _, env = named_env(tmp_path, "kill-1")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", *SLOW, env=env) as proc:
        wait_until(lambda: store.job(victim).state == JobState.RUNNING, timeout=WINDOW, what="the job to run")
        assert store.kill(victim) == "requested"
        wait_until(
            lambda: store.job(victim).state.final, timeout=WINDOW, what="the killed payload to end (no heartbeat comes)"
        )
        log = finish(proc, tmp_path, WINDOW)
    record = store.job(victim)
    assert record.state == JobState.FAILED and record.reason == "killed by operator", log


def test_a_release_stops_an_idle_pilot_at_once(store: Store, redis_url: str, tmp_path: Path) -> None:
    name, env = named_env(tmp_path, "release-idle")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "3000", *SLOW, env=env) as proc:
        wait_until(lambda: seen(store, name), timeout=WINDOW, what="the pilot's first heartbeat")
        assert store.pilots.request_stop(name, "release", "no demand left for c1")
        log = finish(proc, tmp_path, WINDOW)
    assert f"pilot {name} stopped: no demand left for c1" in log
    assert store.pilots.stop_request(name) is None, "the request it acted on is gone"


def test_a_busy_pilot_finishes_its_payload_before_it_releases_itself(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "finished"
    [busy] = store.submit([job(command=f"sleep 2; touch {marker}")])
    name, env = named_env(tmp_path, "release-busy")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "3000", *SLOW, env=env) as proc:
        wait_until(lambda: store.job(busy).state == JobState.RUNNING, timeout=WINDOW, what="the job to run")
        store.pilots.request_stop(name, "release", "released by the director")
        log = finish(proc, tmp_path, WINDOW)
    assert marker.exists() and store.job(busy).state == JobState.DONE, log
    assert f"pilot {name} stopped: released by the director" in log


def test_a_drain_lets_payloads_finish_and_takes_nothing_new(store: Store, redis_url: str, tmp_path: Path) -> None:
    [running] = store.submit([job(command="sleep 2", score=0)])
    name, env = named_env(tmp_path, "drain-1")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "3000", *SLOW, env=env) as proc:
        wait_until(lambda: store.job(running).state == JobState.RUNNING, timeout=WINDOW, what="the job to run")
        store.pilots.request_stop(name, "drain", "drained by operator")
        [later] = store.submit([job(command="true", score=1)])
        log = finish(proc, tmp_path, WINDOW)
    assert store.job(running).state == JobState.DONE, log
    assert store.job(later).state == JobState.WAITING, "a draining pilot takes no new job"
    assert f"pilot {name} stopped: drained by operator" in log


def test_a_shutdown_gives_the_running_payload_back(store: Store, redis_url: str, tmp_path: Path) -> None:
    [long] = store.submit([job(command="sleep 300")])
    name, env = named_env(tmp_path, "shutdown-1")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "3000", *SLOW, env=env) as proc:
        wait_until(lambda: store.job(long).state == JobState.RUNNING, timeout=WINDOW, what="the job to run")
        store.pilots.request_stop(name, "shutdown", "shut down by operator")
        log = finish(proc, tmp_path, WINDOW)
    record = store.job(long)
    assert record.state == JobState.WAITING and record.reason == "pilot shut down by operator", log


def test_an_operator_request_is_never_replaced_by_a_release(any_redis: redis.Redis) -> None:
    keys = Keys()
    assert Store(any_redis, keys).pilots.request_stop("p1", "drain", "operator", now=1.0)
    assert not Store(any_redis, keys).pilots.request_stop("p1", "release", "director", now=2.0)
    assert not Store(any_redis, keys).pilots.withdraw_release("p1")
    assert Store(any_redis, keys).pilots.stop_request("p1") == StopRequest("drain", "operator", 1.0)
    assert Store(any_redis, keys).pilots.request_stop("p1", "shutdown", "operator", now=3.0)
    assert Store(any_redis, keys).pilots.request_stop("p2", "release", "director", now=4.0)
    assert Store(any_redis, keys).pilots.withdraw_release("p2")
    assert set(Store(any_redis, keys).pilots.stop_requests()) == {"p1"}
    with pytest.raises(ValidationError, match="stop mode must be one of release, drain, shutdown"):
        Store(any_redis, keys).pilots.request_stop("p1", "pause", "?")


def test_a_draining_pilot_can_still_be_shut_down(store: Store, redis_url: str, tmp_path: Path) -> None:
    [long] = store.submit([job(command="sleep 300")])
    name, env = named_env(tmp_path, "drain-then-shutdown")
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "3000", *SLOW, env=env) as proc:
        wait_until(lambda: store.job(long).state == JobState.RUNNING, timeout=WINDOW, what="the job to run")
        store.pilots.request_stop(name, "drain", "drained by operator")
        wait_until(
            lambda: "takes no more jobs" in pilot_log(tmp_path), timeout=WINDOW, what="the pilot to say it drains"
        )
        store.pilots.request_stop(name, "shutdown", "shut down by operator")
        log = finish(proc, tmp_path, WINDOW)
    assert store.job(long).state == JobState.WAITING, log
