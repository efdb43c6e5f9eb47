"""taskqueues.credentials: one-use pilot files, the deployment's secrets file, non-dumpable processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskqueues import credentials
from taskqueues.errors import ConfigError
from taskqueues.settings import Settings
from tests.support.paths import ROOT

URL = "redis://pf-pilot-atlas:pw@127.0.0.1:6379/0"


def test_a_pilot_file_is_private_taken_once_and_forgotten_from_the_environment(tmp_path: Path) -> None:
    path = credentials.write_pilot_file(tmp_path / "creds", {"PILOTFISH_REDIS_URL": URL})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    env = {credentials.PILOT_FILE_VARIABLE: str(path), "OTHER": "x"}
    assert credentials.take_pilot_file(env) == {"PILOTFISH_REDIS_URL": URL}
    assert not path.exists() and env == {"OTHER": "x"}
    assert credentials.take_pilot_file(env) == {}  # nothing named: nothing handed
    with pytest.raises(ConfigError, match=rf"{path}: cannot read the pilot's credential file"):
        credentials.take_pilot_file({credentials.PILOT_FILE_VARIABLE: str(path)})  # a second start of the job


def test_a_bad_pilot_file_is_named_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "pilot-x.json"
    for text, why in (("not json", "is not JSON"), ('{"PILOTFISH_REDIS_URL": 1}', "JSON object of strings")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"{path}: .*{why}"):
            credentials.take_pilot_file({credentials.PILOT_FILE_VARIABLE: str(path)})


def test_refused_and_stale_pilot_files_are_removed(tmp_path: Path) -> None:
    fresh = credentials.write_pilot_file(tmp_path, {"PILOTFISH_REDIS_URL": URL})
    old = credentials.write_pilot_file(tmp_path, {"PILOTFISH_REDIS_URL": URL})
    refused = credentials.write_pilot_file(tmp_path, {"PILOTFISH_REDIS_URL": URL})
    credentials.forget_pilot_file({credentials.PILOT_FILE_VARIABLE: str(refused)})
    assert not refused.exists()
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (week_ago, week_ago))
    assert credentials.sweep_pilot_files(tmp_path, 7 * 24 * 3600, time.time()) == 1
    assert fresh.exists() and not old.exists()


def test_the_secrets_file_gives_url_settings_and_names_itself_as_their_source(tmp_path: Path) -> None:
    path = tmp_path / "run" / "secrets.json"
    credentials.write_secrets(path, {"redis_url": URL, "broker_url": "", "vo": "ignored"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    env = {credentials.SECRETS_VARIABLE: str(path)}
    settings = Settings.load("/dev/null", env=env)
    assert settings.redis_url == URL and settings.broker_url == "" and settings.sources["redis_url"] == str(path)
    assert Settings.load("/dev/null", env={**env, "PILOTFISH_REDIS_URL": "redis://x:1/0"}).redis_url == "redis://x:1/0"
    path.write_text('{"catalog": "x.toml"}')
    with pytest.raises(ConfigError, match=rf"{path}: unknown setting\(s\) in the secrets file: catalog"):
        Settings.load("/dev/null", env=env)


def test_no_dump_marks_the_process_and_its_children_start_dumpable_again() -> None:
    script = (
        "import subprocess, sys\n"
        "from taskqueues.credentials import dumpable, no_dump\n"
        "before = dumpable(); no_dump()\n"
        "child = subprocess.run([sys.executable, '-c', 'from taskqueues.credentials import dumpable;"
        " print(dumpable())'], capture_output=True, text=True).stdout.strip()\n"
        "print(before, dumpable(), child)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "False", "True"], done.stdout + done.stderr
