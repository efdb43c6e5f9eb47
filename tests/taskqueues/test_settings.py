"""Settings from defaults, a file and the environment: bad numbers are refused naming the setting and where;
each setting has one default, which what it configures starts from."""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path

import click
import pytest

from matcher.submission import Submitter
from pilot.agent.command import pilot
from pilot.agent.config import PilotConfig
from taskqueues.errors import ConfigError
from taskqueues.settings import DEFAULTS, Settings
from taskqueues.store import Store


@pytest.mark.parametrize("value", ["nan", "-1", "abc"])
def test_a_duration_that_is_not_a_number_of_seconds_is_refused_naming_where(value: str) -> None:
    with pytest.raises(ConfigError, match="PILOTFISH_JOB_RETENTION"):
        Settings.load(path="/dev/null", env={"PILOTFISH_JOB_RETENTION": value})


def test_the_job_retention_is_thirty_days_and_zero_keeps_everything() -> None:
    assert Settings.load(path="/dev/null", env={}).job_retention == 30 * 86400
    assert Settings.load(path="/dev/null", env={"PILOTFISH_JOB_RETENTION": "0"}).job_retention == 0


# --- PILOTFISH_<SETTING>_FILE: a secret setting read from a file (a mounted Kubernetes Secret), real files ---


@pytest.mark.parametrize("setting", ["redis_url", "pilot_redis_url", "broker_url", "pilot_broker_url"])
def test_a_secret_setting_is_read_from_the_file_its_file_variable_names(tmp_path: Path, setting: str) -> None:
    path = tmp_path / setting
    path.write_text("redis://pf-control:s3cret@redis:6379/0\n")  # `echo url > file`: the newline is dropped
    variable = f"PILOTFISH_{setting.upper()}_FILE"
    settings = Settings.load(path="/dev/null", env={variable: str(path)})
    assert getattr(settings, setting) == "redis://pf-control:s3cret@redis:6379/0"
    assert settings.sources[setting] == f"${variable} ({path})"


def test_a_file_without_a_trailing_newline_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("redis://u:p@h:1/0")
    settings = Settings.load(path="/dev/null", env={"PILOTFISH_REDIS_URL_FILE": str(tmp_path / "url")})
    assert settings.redis_url == "redis://u:p@h:1/0"


def test_only_secret_settings_have_a_file_variable(tmp_path: Path) -> None:
    (tmp_path / "vo").write_text("atlas\n")
    assert Settings.load(path="/dev/null", env={"PILOTFISH_VO_FILE": str(tmp_path / "vo")}).vo == "default"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read the file: No such file or directory"),
        ("", "the file is empty"),
        ("\n", "the file is empty"),
        ("redis://a:b@h/0\nredis://c:d@h/0\n", "one line"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_missing_empty_or_bad_file_is_refused_naming_the_variable_and_the_path(
    tmp_path: Path, content: str | bytes | None, reason: str
) -> None:
    path = tmp_path / "broker"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as error:
        Settings.load(path="/dev/null", env={"PILOTFISH_BROKER_URL_FILE": str(path)})
    assert f"$PILOTFISH_BROKER_URL_FILE ({path})" in str(error.value)
    assert reason in str(error.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 0000")
def test_an_unreadable_file_is_refused_naming_the_variable_and_the_path(tmp_path: Path) -> None:
    path = tmp_path / "url"
    path.write_text("redis://u:p@h/0\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match=r"\$PILOTFISH_REDIS_URL_FILE .*cannot read the file: Permission denied"):
        Settings.load(path="/dev/null", env={"PILOTFISH_REDIS_URL_FILE": str(path)})


def test_a_directory_is_refused_naming_the_variable_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"\$PILOTFISH_REDIS_URL_FILE \({tmp_path}\): cannot read the file"):
        Settings.load(path="/dev/null", env={"PILOTFISH_REDIS_URL_FILE": str(tmp_path)})


def test_a_setting_given_both_in_the_environment_and_as_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("redis://u:p@h/0\n")
    env = {"PILOTFISH_REDIS_URL": "redis://other@h/0", "PILOTFISH_REDIS_URL_FILE": str(tmp_path / "url")}
    with pytest.raises(ConfigError, match=r"both \$PILOTFISH_REDIS_URL and \$PILOTFISH_REDIS_URL_FILE are set"):
        Settings.load(path="/dev/null", env=env)


def test_an_empty_file_variable_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\$PILOTFISH_PILOT_REDIS_URL_FILE is set but empty"):
        Settings.load(path="/dev/null", env={"PILOTFISH_PILOT_REDIS_URL_FILE": ""})


def test_a_bad_value_read_from_a_file_is_refused_naming_the_variable(tmp_path: Path) -> None:
    (tmp_path / "broker").write_text("redis+cluster://h1:6379\n")
    with pytest.raises(ConfigError, match=r"\$PILOTFISH_BROKER_URL_FILE .*Redis Cluster"):
        Settings.load(path="/dev/null", env={"PILOTFISH_BROKER_URL_FILE": str(tmp_path / "broker")})


# --- one default per setting ---------------------------------------------------------------------------------

#: The pilot command's options that are settings (PilotConfig's fields of the same names), and their settings.
PILOT_SETTINGS = {
    "vo": "vo",
    "prefix": "prefix",
    "lease": "lease_seconds",
    "idle_timeout": "pilot_idle_timeout",
    "payload_sandbox": "payload_sandbox",
    "payload_shared_paths": "payload_shared_paths",
}


def _options() -> dict[str, click.Option]:
    return {p.name: p for p in pilot.params if isinstance(p, click.Option) and p.name}


def test_the_pilot_starts_from_the_settings_defaults_by_construction_not_by_copy() -> None:
    """``is``, not ``==``: a float written again as a literal elsewhere is another object (small ints and short
    strings are shared by Python whatever their origin, so those are held by value only)."""
    options = _options()
    config = {f.name: f.default for f in dataclasses.fields(PilotConfig)}
    for option, setting in PILOT_SETTINGS.items():
        default = getattr(DEFAULTS, setting)
        assert options[option].default == default == config[option], option
        if isinstance(default, float):
            assert options[option].default is default and config[option] is default, option


def test_the_pilot_commands_other_defaults_are_its_configs() -> None:
    options = _options()
    shared = {
        "stop_margin": "stop_margin",
        "kill_grace": "kill_grace",
        "output_cap": "output_cap",
        "log_interval": "log_interval",
        "mem_tolerance": "mem_tolerance",
        "priority_factor": "priority_factor",
        "jobstatus_hold": "jobstatus_revert_hold",
    }
    config = {f.name: f.default for f in dataclasses.fields(PilotConfig)}
    for option, field in shared.items():
        assert options[option].default == config[field], option
        if isinstance(config[field], float):
            assert options[option].default is config[field], option


def test_a_pilot_reads_a_setting_from_the_variable_the_control_plane_reads() -> None:
    """A pilot started without the option (a chart's pod, by hand) takes the deployment's value."""
    options = _options()
    for option, setting in PILOT_SETTINGS.items():
        assert options[option].envvar == f"PILOTFISH_{setting.upper()}", option


def test_the_submitter_and_the_store_start_from_the_settings_defaults() -> None:
    submitter = inspect.signature(Submitter.__init__).parameters
    for name in ("default_ete", "ete_spread", "max_retries"):
        assert submitter[name].default is getattr(DEFAULTS, name), name
    # The store keeps a literal of its own (taskqueues/store, another change's): held by value here.
    assert inspect.signature(Store.__init__).parameters["lease_seconds"].default == DEFAULTS.lease_seconds


def test_a_negative_max_retries_is_refused_naming_where() -> None:
    with pytest.raises(ConfigError, match="PILOTFISH_MAX_RETRIES: must be >= 0, got -1"):
        Settings.load(path="/dev/null", env={"PILOTFISH_MAX_RETRIES": "-1"})
