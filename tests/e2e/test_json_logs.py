"""``log_format = "json"``: every line a real pilot, worker and beat write is one JSON object with the
component, the community, and the pilot and job where they apply."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

from taskqueues import logformat
from taskqueues.store import Store
from taskqueues.store.keys import Keys
from tests.support.paths import ROOT
from tests.support.pilots import pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a log as a JSON object (the assertion names the first line that is not one)."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            doc = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}\n{text}") from None
        assert isinstance(doc, dict), line
        assert {"time", "level", "component", "logger", "message"} <= doc.keys(), line
        out.append(doc)
    return out


def test_a_pilot_logs_one_json_object_a_line_with_its_pilot_and_job(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    ok, bad = store.submit([job(command="true"), job(command="echo oops >&2; exit 3")])
    env = {**pilot_env(tmp_path), "PILOTFISH_LOG_FORMAT": "json"}
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        proc.wait(60)
    lines = json_lines((tmp_path / "pilot.err").read_text())
    assert {line["component"] for line in lines} == {"pilot"}
    assert all(line["vo"] == "default" for line in lines)
    pilot = {line.get("pilot") for line in lines} - {None}
    assert len(pilot) == 1, lines
    ended = {line["job"]: line for line in lines if line.get("job") and "attempt" in line["message"]}
    assert set(ended) == {ok, bad}, lines
    assert ended[bad]["message"].startswith(f"job {bad} attempt 1: failed")
    assert lines[-1]["message"].startswith(f"pilot {pilot.pop()} stopped")


def test_the_worker_and_beat_log_json_and_so_do_celerys_own_lines(
    redis_url: str, tmp_path: Path, real_redis: redis.Redis
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_LOG_FORMAT": "json",
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REAP_INTERVAL": "0.3",
        "PILOTFISH_BEAT_DIRECTOR": "false",
        "PILOTFISH_VO": "lhcb",
    }
    logs = {}
    procs = []
    for name, args in (("worker", ["--no-beat"]), ("beat", ["--beat-only"])):
        logs[name] = tmp_path / f"{name}.log"
        with logs[name].open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "matcher.cli", "matcher", "--concurrency", "1", *args],
                    cwd=tmp_path,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        # The beat sends reap; the worker runs it (it records the server run it saw).
        wait_until(
            lambda: real_redis.hexists(Keys(vo="lhcb").cursor, "reap:run"), timeout=60, what="a reap run by the worker"
        )
        wait_until(
            lambda: "pilotfish.reap" in logs["worker"].read_text(), timeout=30, what="the worker's line about it"
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    for name, path in logs.items():
        lines = json_lines(path.read_text())
        assert lines, f"{name} wrote nothing"
        assert {line["component"] for line in lines} == {name}
        assert all(line["vo"] == "lhcb" for line in lines)
        assert any(line["logger"].startswith("celery") for line in lines), f"no line of Celery's own in the {name}'s"


def test_the_formatter_keeps_the_traceback_and_finds_the_job() -> None:
    tags = logformat.ContextFilter("director", vo="atlas")
    tags.set(pilot="p-1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, "f", 1, "job %s: %s", ("42", "broke"), sys.exc_info()
        )
    tags.filter(record)
    doc = json.loads(logformat.JsonFormatter().format(record))
    assert doc["component"] == "director" and doc["vo"] == "atlas" and doc["pilot"] == "p-1"
    assert doc["job"] == "42" and doc["message"] == "job 42: broke" and doc["level"] == "error"
    assert "RuntimeError: boom" in doc["exception"]
