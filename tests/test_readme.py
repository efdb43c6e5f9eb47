"""The README stays true: its settings and catalog examples load, and the operator commands it shows run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from matcher.settings import Settings
from taskqueues.catalog import Catalog

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TOML_BLOCKS = re.findall(r"```toml\n(.*?)```", README, re.S)


def test_the_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    first = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["bash scripts/run.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_settings_example_is_valid(tmp_path: Path) -> None:
    settings_block = next(b for b in TOML_BLOCKS if "redis_url" in b)
    path = tmp_path / "pilotfish.toml"
    path.write_text(settings_block)
    loaded = Settings.load(path, env={})
    assert loaded.vo == "lhcb" and loaded.sources["vo"] == str(path)


def test_the_catalog_example_is_valid() -> None:
    catalog_block = next(b for b in TOML_BLOCKS if "[sites." in b)
    queues = Catalog.loads(catalog_block, "README.md").queues("lhcb")
    assert [q.id for q in queues] == ["LCG.CERN.ch/ce503.cern.ch/long"]
    assert queues[0].params["MaxMemory"] == 4000


def test_cancel_and_kill_as_shown(tmp_path: Path, redis_url: str) -> None:
    env = {**os.environ, "PILOTFISH_STATE_DIR": str(tmp_path), "PILOTFISH_REDIS_URL": redis_url}

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    request = cli("submit", "examples/small-dag.toml").split()[1].rstrip(":")
    first_job = cli("status", request)
    assert "8 jobs" in first_job
    assert "job 1: ended" in cli("kill", "1")
    assert "jobs cancelled" in cli("cancel", request)
    assert "cancelled" in cli("status", request)


@pytest.mark.parametrize("example", ["small-dag", "mixed-batch", "montage"])
def test_the_examples_named_in_the_readme_exist(example: str) -> None:
    assert f"examples/{example}.toml" in README
    assert (ROOT / "examples" / f"{example}.toml").exists()
