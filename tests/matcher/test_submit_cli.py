"""``pilotfish submit`` and ``pilotfish run`` refuse a missing file or a bad request in one line of our format.

``pilotfish: error: <file>: ...`` on stderr, exit status 1, and nothing written to the store; through the
real command group (``matcher.cli.main``), in a subprocess for the missing file as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from matcher.cli import main
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from tests.support.clock import FakeClock
from tests.support.keyspace import snapshot
from tests.support.paths import ROOT

CATALOG = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce]
[sites.A.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize("target", ["missing.toml", "."])
def test_a_missing_or_unreadable_workflow_file_is_one_line(tmp_path: Path, command: str, target: str) -> None:
    # click's own check answered with four lines of usage and exit status 2.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0",
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", command, target],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    reason = "No such file or directory" if target == "missing.toml" else "Is a directory"
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"pilotfish: error: {target}: cannot read the file: {reason}\n",
    )
    assert not (tmp_path / "state").exists()  # nothing was started for a file that cannot be read


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    return {
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CATALOG": str(catalog),
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_CONFIG": "",
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            'name = "w"\n[[jobs]]\nname = "x"\ncommand = "true"\nrequirements = { mem = "-4G" }\n',
            "job 'x', field 'mem': must not be negative, got -4000",
        ),
        (
            'name = "w"\n[[jobs]]\nname = "x"\ncommand = "true"\nrequirements = { Platform = "EL7" }\n',
            "job 'x', field 'Platform': no queue of",
        ),
        ('name = "w"\n[[jobs]]\nname = "x"\ncommand = "true"\ndeps = ["x"]\n', "job 'x', field 'deps': cycle: x -> x"),
        ('name = "w"\n[[jobs]]\nname = "x"\ncommand = "true"\nmem = 1\n', "job 'x', field 'mem': unknown field"),
    ],
)
@pytest.mark.parametrize("command", ["submit", "run"])
def test_a_refused_request_names_the_file_job_and_field(
    real_redis: redis.Redis, env: dict[str, str], tmp_path: Path, text: str, problem: str, command: str
) -> None:
    store = Store(real_redis, clock=FakeClock())
    Submitter(store, Catalog.loads(CATALOG), capacity=lambda: 4.0).submit([JobSpec("earlier", "true")])
    before = snapshot(real_redis)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = CliRunner().invoke(main, [command, str(path)], env=env)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"pilotfish: error: {path}: {problem}"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    assert snapshot(real_redis) == before
