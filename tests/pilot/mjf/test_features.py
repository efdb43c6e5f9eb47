"""Reading MJF from local directories: every key, units, malformed values, refresh, trust order."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pilot.mjf.features import JOB_KEYS, MACHINE_KEYS, MalformedValue, parse_value
from pilot.mjf.source import FeatureReader, FeatureSourceError, open_source, read_features
from taskqueues.errors import ConfigError

MACHINE = {
    "hs06": "123.5",
    "shutdowntime": "2000000000",
    "jobslots": "16",
    "phys_cores": "8",
    "log_cores": "16",
    "shutdown_command": "/usr/local/bin/halt-vm\n",
}
JOB = {
    "cpufactor_lrms": "2.5",
    "cpu_limit_secs_lrms": "720000",
    "cpu_limit_secs": "288000",
    "wall_limit_secs_lrms": "90000",
    "wall_limit_secs": "36000",
    "disk_limit_GB": "20.5",
    "jobstart_secs": "1700000000",
    "mem_limit_MB": "16000",
    "allocated_CPU": "8",
    "shutdowntime_job": "1700030000",
}


def write_dir(path: Path, values: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        (path / key).write_text(value)
    return path


@pytest.fixture
def mjf_dirs(tmp_path: Path) -> tuple[Path, Path]:
    return write_dir(tmp_path / "machine", MACHINE), write_dir(tmp_path / "job", JOB)


def reader(machine: Path | str | None, job: Path | str | None, tmp_path: Path, **kwargs: object) -> FeatureReader:
    # An explicit, empty batch environment: the host may itself run inside Slurm or SGE.
    return FeatureReader(
        None if machine is None else str(machine), None if job is None else str(job), env={}, workdir=tmp_path, **kwargs
    )  # type: ignore[arg-type]


def test_every_key_is_read_with_its_type_and_labelled(mjf_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = mjf_dirs
    features = reader(machine, job, tmp_path).load()
    assert features.machine.hs06 == 123.5
    assert features.machine.shutdowntime == 2000000000
    assert features.machine.jobslots == 16
    assert features.machine.phys_cores == 8
    assert features.machine.log_cores == 16
    assert features.machine.shutdown_command == "/usr/local/bin/halt-vm"
    assert features.job.cpufactor_lrms == 2.5
    assert features.job.cpu_limit_secs_lrms == 720000
    assert features.job.cpu_limit_secs == 288000
    assert features.job.wall_limit_secs_lrms == 90000
    assert features.job.wall_limit_secs == 36000
    assert features.job.disk_limit_GB == 20.5
    assert features.job.jobstart_secs == 1700000000
    assert features.job.mem_limit_MB == 16000
    assert features.job.allocated_CPU == 8
    assert features.job.shutdowntime_job == 1700030000
    for key in MACHINE_KEYS:
        assert features.source(key) == f"machinefeatures:{machine}"
    for key in JOB_KEYS:
        assert features.source(key) == f"jobfeatures:{job}"
    assert features.warnings == ()
    assert features.machinefeatures == str(machine) and features.jobfeatures == str(job)


def test_read_features_uses_the_environment_variables(mjf_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = mjf_dirs
    features = read_features({"MACHINEFEATURES": str(machine), "JOBFEATURES": str(job)}, workdir=tmp_path)
    assert features.job.allocated_CPU == 8 and features.machine.jobslots == 16


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("hs06", "fast"),
        ("jobslots", "2.5"),
        ("mem_limit_MB", "-1"),
        ("allocated_CPU", "0"),
        ("disk_limit_GB", "nan"),
        ("shutdowntime", ""),
        ("wall_limit_secs", "inf"),
        ("shutdown_command", "  \n"),
    ],
)
def test_malformed_values_are_rejected(key: str, text: str) -> None:
    with pytest.raises(MalformedValue):
        parse_value(key, text)


def test_lenient_but_exact_parsing() -> None:
    assert parse_value("jobslots", "16\n") == 16
    assert parse_value("wall_limit_secs", "3600.0") == 3600
    assert parse_value("shutdowntime", "1700000000.75") == 1700000000
    assert parse_value("log_cores", "0") == 0  # hyper-threading off, says the spec
    assert parse_value("disk_limit_GB", "1.5") == 1.5


def test_malformed_file_warns_naming_source_and_key_and_is_absent(
    mjf_dirs: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    machine, job = mjf_dirs
    (machine / "hs06").write_text("very fast")
    (job / "mem_limit_MB").write_text("4GB")
    with caplog.at_level(logging.WARNING, logger="pilot.mjf"):
        features = reader(machine, job, tmp_path).load()
    assert features.machine.hs06 is None and features.source("hs06") is None
    # mem_limit_MB falls through to the host rather than crashing the pilot.
    assert features.source("mem_limit_MB") == "host"
    assert any(f"machinefeatures:{machine}/hs06" in w and "malformed" in w for w in features.warnings)
    assert any(f"jobfeatures:{job}/mem_limit_MB" in w for w in features.warnings)
    assert f"{machine}/hs06" in caplog.text


def test_missing_file_is_absent_and_missing_directory_warns(tmp_path: Path) -> None:
    machine = write_dir(tmp_path / "m", {"jobslots": "4"})
    features = reader(machine, tmp_path / "nowhere", tmp_path).load()
    assert features.machine.jobslots == 4
    assert features.machine.shutdowntime is None and features.source("shutdowntime") is None
    assert any("nowhere" in w and "does not exist" in w for w in features.warnings)


def test_a_location_that_is_neither_absolute_nor_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FeatureSourceError, match="relative/dir"):
        open_source("relative/dir")
    with pytest.raises(FeatureSourceError):
        open_source("file:///etc")
    features = reader("relative/dir", None, tmp_path).load()
    assert any("$MACHINEFEATURES" in w and "relative/dir" in w for w in features.warnings)


def test_unknown_default_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="wall_limit"):
        reader(None, None, tmp_path, defaults={"wall_limit": 5})


def test_trust_order_mjf_then_batch_then_host_then_default(tmp_path: Path) -> None:
    job = write_dir(tmp_path / "job", {"allocated_CPU": "3"})
    env = {"SLURM_JOB_ID": "77", "SLURM_CPUS_ON_NODE": "6", "SLURM_MEM_PER_NODE": "1000"}
    features = FeatureReader(
        None, str(job), env=env, workdir=tmp_path, defaults={"wall_limit_secs": 7200, "mem_limit_MB": 1}
    ).load()
    assert (features.job.allocated_CPU, features.source("allocated_CPU")) == (3, f"jobfeatures:{job}")
    assert (features.job.mem_limit_MB, features.source("mem_limit_MB")) == (1048, "slurm")
    assert features.source("log_cores") == "host"
    assert (features.job.wall_limit_secs, features.source("wall_limit_secs")) == (7200, "default")
    assert (features.job.cpufactor_lrms, features.source("cpufactor_lrms")) == (1.0, "default")
    assert features.source("wall_limit_secs_lrms") == "derived:wall_limit_secs*cpufactor_lrms"


def test_real_limits_derived_from_normalised_ones_divide_by_cpufactor(tmp_path: Path) -> None:
    job = write_dir(
        tmp_path / "job",
        {
            "cpufactor_lrms": "2",
            "wall_limit_secs_lrms": "7200",
            "cpu_limit_secs_lrms": "28800",
            "jobstart_secs": "1000",
        },
    )
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_START_TIME": "1000", "SLURM_JOB_END_TIME": "99999"}
    features = FeatureReader(None, str(job), env=env, workdir=tmp_path).load()
    # The site's own normalised limit beats the batch system's: 7200 / 2 real seconds.
    assert features.job.wall_limit_secs == 3600
    assert features.source("wall_limit_secs") == "derived:wall_limit_secs_lrms/cpufactor_lrms"
    assert features.job.cpu_limit_secs == 14400
    assert features.time_left(now=1600) == 3000
    assert features.time_left_normalised(now=1600) == 6000  # a node twice the reference: 2 x real


def test_time_left_follows_shutdowntime_moving_closer(tmp_path: Path) -> None:
    machine = write_dir(tmp_path / "m", {"hs06": "100"})
    job = write_dir(tmp_path / "j", {"jobstart_secs": "10000", "wall_limit_secs": "86400", "cpufactor_lrms": "0.5"})
    mjf = reader(machine, job, tmp_path)
    now = 20000.0
    assert mjf.load().time_left(now, stop_margin=600) == 10000 + 86400 - now - 600
    (machine / "shutdowntime").write_text("50000")
    features = mjf.refresh()
    assert features.machine.shutdowntime == 50000
    assert features.time_left(now, stop_margin=600) == 29400
    assert features.time_left_normalised(now, stop_margin=600) == 14700  # slower node: fewer reference secs
    (job / "shutdowntime_job").write_text("30000")
    assert mjf.refresh().time_left(now, stop_margin=600) == 9400
    (machine / "shutdowntime").write_text("25000")
    assert mjf.refresh().time_left(now) == 5000
    assert mjf.refresh().time_left(now=26000) == 0  # never negative
    (machine / "shutdowntime").unlink()  # the site removes it once reached
    (job / "shutdowntime_job").unlink()
    assert mjf.refresh().time_left(now) == 76400


def test_refresh_rereads_only_dynamic_keys(tmp_path: Path) -> None:
    machine = write_dir(tmp_path / "m", {"hs06": "100", "jobslots": "4"})
    mjf = reader(machine, None, tmp_path)
    mjf.load()
    (machine / "hs06").write_text("200")
    (machine / "jobslots").write_text("8")
    features = mjf.refresh()
    assert (features.machine.hs06, features.machine.jobslots) == (100, 8)
    assert mjf.load().machine.hs06 == 200


def test_as_dict_carries_value_and_source(mjf_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = mjf_dirs
    view = reader(machine, job, tmp_path).load().as_dict()
    assert view["machine"]["hs06"] == {"value": 123.5, "source": f"machinefeatures:{machine}"}
    assert view["job"]["allocated_CPU"]["value"] == 8
    assert view["warnings"] == []
