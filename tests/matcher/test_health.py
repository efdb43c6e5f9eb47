"""``pilotfish health``, the command behind the Kubernetes liveness probes, judges only its own process.

A real redis-server, the real CLI as a subprocess, and real worker, beat, director and pilot processes: each
beats under its own name (``<component>@<host>``, a pilot under its identity), a fresh entry of another
host or another pod never makes the probe pass, and a hung process (SIGSTOP) fails its own probe while its
siblings beat on.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.control import KEEP
from taskqueues.store.keys import Keys
from tests.support.paths import ROOT
from tests.support.polling import wait_until

HOST = socket.gethostname()
KEYS = Keys(prefix="pf", vo="default")


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CONFIG": os.devnull,
        "PILOTFISH_BEAT_DIRECTOR": "false",
        "PILOTFISH_PILOT_EVENTS": "false",
    }


def health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", "health", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def passes(env: dict[str, str], component: str, *args: str) -> bool:
    return health(env, "--component", component, *args).returncode == 0


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start named `pilotfish` processes; every one still running is killed at the end."""
    started: dict[str, subprocess.Popen[bytes]] = {}
    yield started
    for process in started.values():
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(timeout=30)


def start(
    processes: dict[str, subprocess.Popen[bytes]], name: str, args: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir(exist_ok=True)
    with open(tmp_path / f"{name}.log", "wb") as log:
        processes[name] = subprocess.Popen(
            [sys.executable, "-m", "matcher.cli", *args],
            cwd=tmp_path / "state",
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


# --- the command against planted entries ---------------------------------------------------------------


def test_a_fresh_entry_of_this_host_passes(env: dict[str, str], real_redis: redis.Redis) -> None:
    Store(real_redis, KEYS).control.beat("worker")
    done = health(env, "--component", "worker")
    assert done.returncode == 0, done.stderr
    ago = re.fullmatch(rf"worker: ok \(worker@{re.escape(HOST)}, last beat (\d+) s ago\)\n", done.stdout)
    assert ago is not None and int(ago[1]) < 30, done.stdout


def test_a_stale_entry_of_this_host_fails_saying_how_old(env: dict[str, str], real_redis: redis.Redis) -> None:
    Store(real_redis, KEYS).control.beat("beat", now=time.time() - 125)
    done = health(env, "--component", "beat")
    assert done.returncode == 1
    ago = re.match(rf"beat: beat@{re.escape(HOST)} last beat (\d+) s ago \(max age 60 s\)", done.stderr)
    assert ago is not None and 125 <= int(ago[1]) < 155, done.stderr
    assert passes(env, "beat", "--max-age", "200")


def test_another_hosts_fresh_entry_does_not_count(env: dict[str, str], real_redis: redis.Redis) -> None:
    real_redis.zadd(KEYS.alive("director"), {"director@another-pod": time.time()})
    done = health(env, "--component", "director")
    assert done.returncode == 1
    assert f"director: director@{HOST} never beat (max age 60 s); 1 other director process(es) beat" in done.stderr


def test_a_pilot_is_judged_by_its_own_name_from_the_pod_environment(
    env: dict[str, str], real_redis: redis.Redis
) -> None:
    pod = {**env, "PILOTFISH_POD_NAME": "pf-pilot-a", "PILOTFISH_NODE_NAME": "node-1"}
    real_redis.zadd(KEYS.pilotseen, {"k8s-pf-pilot-b@node-1": time.time()})
    done = health(pod, "--component", "pilot")
    assert done.returncode == 1 and "pilot: k8s-pf-pilot-a@node-1 never beat" in done.stderr
    real_redis.zadd(KEYS.pilotseen, {"k8s-pf-pilot-a@node-1": time.time()})
    assert "pilot: ok (k8s-pf-pilot-a@node-1," in health(pod, "--component", "pilot").stdout


def test_old_entries_of_gone_pods_are_dropped_by_the_next_write(real_redis: redis.Redis) -> None:
    real_redis.zadd(KEYS.alive("worker"), {"worker@gone": time.time() - KEEP - 1, "worker@sibling": time.time() - 10})
    Store(real_redis, KEYS).control.beat("worker")
    assert set(real_redis.zrange(KEYS.alive("worker"), 0, -1)) == {b"worker@sibling", f"worker@{HOST}".encode()}


def test_redis_down_fails_with_one_line(env: dict[str, str]) -> None:
    from taskqueues.store.redis_server import free_port

    done = health({**env, "PILOTFISH_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, "--component", "worker")
    assert done.returncode == 1 and "Redis does not answer" in done.stderr


# --- real processes --------------------------------------------------------------------------------------


def test_each_component_process_keeps_only_its_own_probe_green(
    env: dict[str, str], tmp_path: Path, processes: dict[str, subprocess.Popen[bytes]]
) -> None:
    start(processes, "worker", ["matcher", "--no-beat", "--concurrency", "1", "--loglevel", "WARNING"], env, tmp_path)
    wait_until(lambda: passes(env, "worker"), timeout=60, interval=0.5, what="the worker's own beat")
    # The worker runs every task beat sends, but no longer vouches for beat (nor for a director).
    assert not passes(env, "beat")
    assert not passes(env, "director")

    start(processes, "beat", ["matcher", "--beat-only", "--loglevel", "WARNING"], env, tmp_path)
    start(processes, "director", ["director", "--interval", "1"], env, tmp_path)
    wait_until(lambda: passes(env, "beat"), timeout=60, interval=0.5, what="beat's own beat")
    wait_until(lambda: passes(env, "director"), timeout=60, interval=0.5, what="the director's own beat")

    # A hung worker fails its probe within a few seconds although beat and the director beat on.
    processes["worker"].send_signal(signal.SIGSTOP)
    wait_until(
        lambda: not passes(env, "worker", "--max-age", "4"), timeout=30, interval=0.5, what="the hung worker to fail"
    )
    assert passes(env, "beat", "--max-age", "30") and passes(env, "director", "--max-age", "30")
    processes["worker"].send_signal(signal.SIGCONT)
    wait_until(
        lambda: passes(env, "worker", "--max-age", "4"), timeout=30, interval=0.5, what="the worker to beat again"
    )

    # Beat stopped: its probe fails, though the worker is as busy as ever.
    processes["beat"].send_signal(signal.SIGSTOP)
    wait_until(
        lambda: not passes(env, "beat", "--max-age", "7"), timeout=30, interval=0.5, what="the hung beat to fail"
    )
    assert passes(env, "worker", "--max-age", "30")


def test_a_pilot_process_in_a_pod_keeps_its_own_probe_green(
    env: dict[str, str], tmp_path: Path, processes: dict[str, subprocess.Popen[bytes]]
) -> None:
    pod = {**env, "PILOTFISH_POD_NAME": "pf-pilot-x1", "PILOTFISH_NODE_NAME": "node-7", "PILOTFISH_VO": "astro"}
    start(
        processes,
        "pilot",
        [
            "pilot",
            "--queue",
            "local/localhost/local",
            "--cores",
            "1",
            "--idle-timeout",
            "120",
            "--heartbeat",
            "1",
            "--lease",
            "10",
        ],
        pod,
        tmp_path,
    )
    wait_until(lambda: passes(pod, "pilot"), timeout=60, interval=0.5, what="the pilot's own heartbeat")
    sibling = {**pod, "PILOTFISH_POD_NAME": "pf-pilot-x2"}
    done = health(sibling, "--component", "pilot")
    assert done.returncode == 1 and "k8s-pf-pilot-x2@node-7 never beat" in done.stderr
    assert "1 other pilot process(es)" in done.stderr
    processes["pilot"].send_signal(signal.SIGSTOP)
    wait_until(
        lambda: not passes(pod, "pilot", "--max-age", "4"), timeout=30, interval=0.5, what="the hung pilot to fail"
    )
