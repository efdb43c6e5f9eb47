"""A real Flower for tests, and the small pieces the Celery-events and Flower tests share.

:class:`FlowerServer` starts ``celery --broker <redis_url> flower`` on a free loopback port (API open through
``FLOWER_UNAUTHENTICATED_API``), waits until it answers, and stops it afterwards. ``EventLog`` captures
Celery events with Celery's own ``EventReceiver``, the way Flower does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from celery import Celery

from pilot.agent.observer import PilotInfo
from taskqueues.store.records import Job, JobState
from taskqueues.store.redis_server import free_port
from tests.support.polling import wait_until


class FlowerServer:
    def __init__(self, broker_url: str, workdir: Path) -> None:
        self.broker_url = broker_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "flower.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> FlowerServer:
        env = dict(os.environ, FLOWER_UNAUTHENTICATED_API="true")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "--broker",
                    self.broker_url,
                    "flower",
                    f"--port={self.port}",
                    "--address=127.0.0.1",
                    "--inspect_timeout=1000",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        wait_until(
            self._answers, timeout=timeout, interval=0.1, what=lambda: f"flower to answer on {self.url}: {self.log()}"
        )
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"flower exited with {self.proc.returncode}: {self.log()}")
        try:
            self.get("/healthcheck", raw=True)
        except (urllib.error.URLError, ConnectionError, OSError):
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def errors(self) -> list[str]:
        """Flower's error lines and tracebacks (tornado logs errors as ``[E ...]``)."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [line for line in lines if line.startswith("[E ") or line.startswith("Traceback")]

    def get(self, path: str, raw: bool = False) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            body = response.read().decode()
        return body if raw else json.loads(body)

    def post(self, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read().decode() or "null")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class EventLog:
    """Celery events as a Celery ``EventReceiver`` (the class Flower uses) sees them, in a thread."""

    def __init__(self, broker_url: str) -> None:
        self.app = Celery("pilotfish-test-receiver", broker=broker_url, set_as_current=False)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.app.connection() as conn:
            self._receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def start(self) -> EventLog:
        """Start capturing and return once a probe event went through (fanout is pub/sub: no backlog)."""
        self._thread.start()
        probe = Celery("pilotfish-test-probe", broker=self.app.conf.broker_url, set_as_current=False)
        with probe.connection() as conn:
            dispatcher = probe.events.Dispatcher(conn, hostname="probe@test")

            def seen() -> bool:
                dispatcher.send("probe-ping")
                return bool(self.of("probe-ping"))

            wait_until(seen, timeout=10, what="the event receiver to see a probe event")
            dispatcher.close()
        return self

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(5)

    def of(self, type_: str, **match: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["type"] == type_ and all(e.get(k) == v for k, v in match.items())]

    def wait(self, type_: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        found: list[dict[str, Any]] = wait_until(
            lambda: self.of(type_, **match), timeout=timeout, what=f"a {type_} event with {match}"
        )
        return found[0]


def pilot_info(name: str = "local-4242@testnode", **overrides: Any) -> PilotInfo:
    fields: dict[str, Any] = dict(
        name=name,
        queue="site-a/ce-1/short",
        vo="alice",
        cores=2,
        mem=2000,
        tmp=1000,
        started=time.time(),
        batch="local",
        batch_id="4242",
        node="testnode",
    )
    fields.update(overrides)
    return PilotInfo(**fields)


def make_job(job_id: str, command: str, attempt: int = 1, name: str = "", **overrides: Any) -> Job:
    fields: dict[str, Any] = dict(
        id=job_id,
        state=JobState.RUNNING,
        attempt=attempt,
        tq_id="tq-1",
        command=command,
        requirements={"cpu": 1, "mem": 100},
        score=0.0,
        ete=1.0,
        submitted=time.time() - 1,
        name=name,
        matched=time.time() - 0.1,
    )
    fields.update(overrides)
    return Job(**fields)
