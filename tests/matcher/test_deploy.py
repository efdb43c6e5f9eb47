"""``pilotfish up`` / ``down`` on real processes: up restarts whatever died (beat alone included), never
reports a part started that exited, down stops every process of the deployment, orphans of earlier kills
included, and each part rides out a Redis outage with two log lines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis

from matcher.cli.deploy import MARKER, orphans, running_pid
from taskqueues import embedded
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store.redis_server import free_port
from tests.support.paths import ROOT
from tests.support.polling import wait_until

PARTS = ("worker", "beat", "director", "flower", "api")


class Deployment:
    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "state"
        self.env = {
            **os.environ,
            "PILOTFISH_STATE_DIR": str(self.state),
            "PILOTFISH_FLOWER_PORT": str(free_port()),
            "PILOTFISH_API_PORT": str(free_port()),
            "PILOTFISH_LEASE_SECONDS": "5",
            "PILOTFISH_REAP_INTERVAL": "1",
            "PILOTFISH_DIRECTOR_INTERVAL": "1",
            "PILOTFISH_PILOT_EVENTS": "false",
        }
        self.env.pop("PILOTFISH_REDIS_URL", None)
        self.env.pop(MARKER, None)
        self.ctx = Context(Settings.load(env=self.env))

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "matcher.cli", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def states(self, text: str) -> dict[str, str]:
        return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)

    def pid(self, part: str) -> int:
        pid = running_pid(self.ctx, part)
        assert pid is not None, part
        return pid

    def client(self) -> redis.Redis:
        server = embedded.running(self.state)
        assert server is not None
        return redis.Redis.from_url(embedded.control_url(server))


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    yield made
    made.cli("down", check=False)


def test_up_restarts_what_died_and_down_stops_every_process_orphans_included(
    deployment: Deployment, tmp_path: Path
) -> None:
    first = deployment.states(deployment.cli("up").stdout)
    assert all(first[part] == "started" for part in ("redis", *PARTS)), first
    workflow = tmp_path / "long.toml"
    workflow.write_text('name = "long"\n[[jobs]]\nname = "a"\ncommand = "sleep 60"\n')
    deployment.cli("submit", str(workflow))
    client = deployment.client()
    wait_until(
        lambda: any(b'"s":"running"' in v for v in client.hvals("pf:{default}:jobs")),
        timeout=60,
        interval=0.2,
        what="a payload running",
    )

    beat, director = deployment.pid("beat"), deployment.pid("director")
    os.kill(beat, signal.SIGKILL)
    os.kill(director, signal.SIGKILL)
    again = deployment.states(deployment.cli("up").stdout)
    assert again == {
        "redis": "running",
        "worker": "running",
        "beat": "started",
        "director": "started",
        "flower": "running",
        "api": "running",
        "Redis": again["Redis"],
        "Flower": again["Flower"],
        "API": again["API"],
    }, again
    assert deployment.pid("beat") != beat

    # Kill the new director too, and go down without an up in between: its pilot (with the guardian and the
    # payload) is an orphan that only the deployment's marker can find.
    os.kill(deployment.pid("director"), signal.SIGKILL)
    left = orphans(deployment.ctx)
    commands = [" ".join(_cmdline(p)) for p in left]
    assert any("pilot" in c for c in commands), commands
    out = deployment.cli("down").stdout
    assert "orphans:" in out and "pilot" in out, out
    assert orphans(deployment.ctx) == []
    assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert embedded.running(deployment.state) is None


def test_up_never_reports_started_a_part_that_exited(deployment: Deployment) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(deployment.env["PILOTFISH_FLOWER_PORT"])))
        taken.listen()
        done = deployment.cli("up", check=False)
    assert done.returncode == 1
    assert "flower: started" not in done.stdout
    [line] = done.stderr.strip().splitlines()
    assert "flower" in line and "flower.log" in line, line


def test_every_part_rides_out_a_redis_outage_with_two_log_lines(deployment: Deployment) -> None:
    deployment.cli("up")
    logs = deployment.state / "logs"
    pid = embedded.running(deployment.state).pid()  # type: ignore[union-attr]
    assert pid is not None
    time.sleep(2)
    os.kill(pid, signal.SIGKILL)
    time.sleep(4)
    assert deployment.states(deployment.cli("up").stdout)["redis"] == "started"
    wanted = {"worker": "worker:", "beat": "beat:", "director": "director:"}

    def settled() -> bool:
        return all(
            f"{who} the store answers again" in (logs / f"{part}.log").read_text() for part, who in wanted.items()
        )

    wait_until(
        settled,
        timeout=60,
        interval=0.2,
        what=lambda: (
            "every part said the store answers again: "
            + " | ".join(f"{part}: {(logs / f'{part}.log').read_text()[-800:]}" for part in wanted)
        ),
    )
    for part, who in wanted.items():
        text = (logs / f"{part}.log").read_text()
        assert text.count(f"{who} the store is unreachable") == 1, (part, text[-3000:])
        assert text.count(f"{who} the store answers again") == 1, (part, text[-3000:])
        assert "Traceback" not in text, (part, text[-3000:])
    for part in PARTS:
        assert running_pid(deployment.ctx, part), f"{part} died during the outage"


def _cmdline(process: psutil.Process) -> list[str]:
    """The process's command line, or nothing once it has ended (it may, between listing and reading)."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []
