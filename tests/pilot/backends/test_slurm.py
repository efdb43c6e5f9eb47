"""The Slurm backend against the real Slurm that ``scripts/slurm.sh up`` starts, and its pure helpers."""

from __future__ import annotations

import logging
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pilot.backends import (
    Backend,
    BackendOptionError,
    LocalBackend,
    PilotRequest,
    PilotState,
    SlurmBackend,
    SlurmSettings,
    make_backend,
    parse_slurm_options,
    reset_conversion_warnings,
)
from pilot.backends.slurm import (
    NICE_MAX,
    decode_wait_status,
    parse_time_origin,
    priority_params,
    resource_name,
    slurm_time,
)
from taskqueues.errors import BackendError
from taskqueues.shapes import Shape
from tests.support.backends import SMALL, BackendContract, Harness, all_final, system_env, wait_states


@pytest.fixture
def slurm_env() -> dict[str, str]:
    return system_env("slurm")


def scontrol_job(env: dict[str, str], batch_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (fields are ``Key=Value`` separated by spaces)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", batch_id],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **env},
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


@pytest.fixture(autouse=True)
def _outputs_stay_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch jobs submitted without a log directory write their output to the submit directory: make it the
    test's, never the repository (the helper below gives every backend a log directory besides)."""
    monkeypatch.chdir(tmp_path)


def make_slurm(env: dict[str, str], **settings: object) -> SlurmBackend:
    return SlurmBackend(
        SlurmSettings.from_options(
            {
                "config": env["SLURM_CONF"],
                "bin_dir": env["PILOTFISH_SLURM_BIN"],
                "log_dir": str(Path.cwd() / "logs"),
                **settings,
            }
        )
    )


@pytest.mark.slurm
class TestSlurmContract(BackendContract):
    @pytest.fixture
    def harness(self, slurm_env: dict[str, str]) -> Harness:
        def kill(backend: Backend, batch_id: str) -> None:
            # An operator's scancel, outside the backend: not a cancel the director asked for.
            subprocess.run(["scancel", batch_id], check=True, env={"PATH": "/usr/bin:/bin", **slurm_env})

        def polls(backend: Backend) -> int:
            assert isinstance(backend, SlurmBackend)
            return backend.polls

        return Harness(
            "slurm",
            lambda interval: make_slurm(slurm_env, poll_interval=interval, repo_key="pf:"),
            kill,
            int(slurm_env["PILOTFISH_SLURM_CPUS"]),
            polls,
        )


@pytest.mark.slurm
def test_nice_follows_start_by_and_is_clamped(slurm_env: dict[str, str], tmp_path: Path) -> None:
    origin = "2024-01-01 00:00 +00:00"
    backend = make_slurm(slurm_env, use_nice=True, time_origin=origin, nice_factor=0.5)
    origin_ts = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    start_by = time.time() + 3600
    ids = {
        "urgent": backend.submit(PilotRequest("urgent", ["true"], SMALL, 60, start_by=start_by)),
        "past": backend.submit(PilotRequest("past", ["true"], SMALL, 60, start_by=origin_ts - 1e6)),
    }
    huge = make_slurm(slurm_env, use_nice=True, time_origin=origin, nice_factor=1e9)
    ids["huge"] = huge.submit(PilotRequest("huge", ["true"], SMALL, 60, start_by=start_by))
    plain = make_slurm(slurm_env)
    ids["plain"] = plain.submit(PilotRequest("plain", ["true"], SMALL, 60, start_by=start_by))
    nice = {name: int(scontrol_job(slurm_env, batch_id)["Nice"]) for name, batch_id in ids.items()}
    assert nice == {"urgent": round((start_by - origin_ts) * 0.5), "past": 0, "huge": NICE_MAX, "plain": 0}
    wait_states(backend, [ids["urgent"], ids["past"]], all_final)


@pytest.mark.slurm
def test_nice_parameters_default_to_slurm_conf_priority_params(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """The seed: time_origin and nice_factor come from PriorityParams in the configuration file when the backend
    settings do not give them (Slurm spells the key PriorityParameters); settings still win."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        Path(slurm_env["SLURM_CONF"]).read_text()
        + '\nPriorityParameters="time_origin=2024-06-01 00:00 +00:00,nice_factor=0.25"\n'
    )
    origin_ts = datetime(2024, 6, 1, tzinfo=UTC).timestamp()
    start_by = time.time() + 3600
    from_conf = make_slurm(slurm_env, config=str(conf), use_nice=True)
    assert (from_conf.time_origin, from_conf.nice_factor) == ("2024-06-01 00:00 +00:00", 0.25)
    given = make_slurm(slurm_env, config=str(conf), use_nice=True, nice_factor=0.5)
    ids = {
        "conf": from_conf.submit(PilotRequest("conf", ["true"], SMALL, 60, start_by=start_by)),
        "given": given.submit(PilotRequest("given", ["true"], SMALL, 60, start_by=start_by)),
    }
    nice = {name: int(scontrol_job(slurm_env, batch_id)["Nice"]) for name, batch_id in ids.items()}
    assert nice == {"conf": round((start_by - origin_ts) * 0.25), "given": round((start_by - origin_ts) * 0.5)}
    wait_states(from_conf, list(ids.values()), all_final)
    # The running cluster's own slurm.conf says nothing: the seed's defaults, 2023-01-01 00:00 and 1.
    plain = make_slurm(slurm_env, use_nice=True)
    assert (plain.time_origin, plain.nice_factor) == ("2023-01-01 00:00", 1.0)


@pytest.mark.slurm
def test_repo_key_defaults_to_the_repository_base_name(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """The seed: "by default it is the base name of the repo followed by ':'"; the repository is the directory
    the director runs in (here the test's, made the working directory by the autouse fixture)."""
    backend = make_slurm(slurm_env)
    batch_id = backend.submit(PilotRequest("named", ["true"], SMALL, 60))
    assert scontrol_job(slurm_env, batch_id)["JobName"] == f"{tmp_path.name}:named"
    bare = make_slurm(slurm_env, repo_key="")
    other = bare.submit(PilotRequest("bare", ["true"], SMALL, 60))
    assert scontrol_job(slurm_env, other)["JobName"] == "bare"
    wait_states(backend, [batch_id, other], all_final)


@pytest.mark.slurm
def test_indexed_resource_names_are_read_as_the_seed_s_table_says(slurm_env: dict[str, str]) -> None:
    """gres0, partition0... are gres, partition... (no index = index 0), not licenses or gres named partition0."""
    backend = make_slurm(slurm_env, poll_interval=0.2)
    request = PilotRequest(
        "indexed", ["true"], SMALL, 60, resources={"partition0": "debug", "nodes0": slurm_env["PILOTFISH_SLURM_NODE"]}
    )
    assert not any(a.startswith("--gres") for a in backend.submit_args(request))
    batch_id = backend.submit(request)
    job = scontrol_job(slurm_env, batch_id)
    assert (job["Partition"], job["ReqNodeList"]) == ("debug", slurm_env["PILOTFISH_SLURM_NODE"])
    wait_states(backend, [batch_id], all_final)


def test_resource_names_and_priority_params_without_a_cluster(tmp_path: Path) -> None:
    assert [resource_name(k, "p") for k in ("gres0", "partition", "reserv0", "licence0", "matlab2", "gpu")] == [
        "gres",
        "partition",
        "reservation",
        "licenses",
        "matlab2",
        "gpu",
    ]
    with pytest.raises(BackendError, match=r"'gres1' is for component 1 of a heterogeneous job"):
        resource_name("gres1", "pilot 'p'")
    with pytest.raises(BackendError, match=r"resources 'gres' and 'gres0' both name 'gres'"):
        SlurmBackend(SlurmSettings(bin_dir="/usr/bin")).submit_args(
            PilotRequest("p", ["true"], SMALL, 60, resources={"gres": "gpu:1", "gres0": "gpu:2"})
        )
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "# PriorityParameters=time_origin=1999-01-01 00:00\n"
        "PriorityParameters=nice_factor=3 # a comment\n"
        'priorityparams = "time_origin=2024-01-01 00:00,nice_factor=2,other=x"\n'
    )
    assert priority_params(conf) == {"time_origin": "2024-01-01 00:00", "nice_factor": "2", "other": "x"}
    assert priority_params(tmp_path / "missing") == {}
    conf.write_text("PriorityParameters=nice_factor=fast\n")
    with pytest.raises(BackendError, match=r"PriorityParams: nice_factor must be a number, got 'fast'"):
        SlurmBackend(SlurmSettings(config=str(conf), use_nice=True))
    assert SlurmBackend(SlurmSettings(config=str(conf))).nice_factor == 1.0  # read only with use_nice


@pytest.mark.slurm
def test_shape_resources_and_options_reach_slurm(slurm_env: dict[str, str], tmp_path: Path) -> None:
    backend = make_slurm(slurm_env, repo_key="repo:", partition="debug", poll_interval=0.2)
    request = PilotRequest(
        "shaped",
        ["sleep", "300"],
        Shape("s", cpu=2, mem=300, tmp=10),
        wall=3700,
        resources={"partition": "debug"},
        options="-c 3 --mem=1G",
        workdir=str(tmp_path),
    )
    batch_id = backend.submit(request)
    try:
        job = scontrol_job(slurm_env, batch_id)
        assert job["JobName"] == "repo:shaped"
        assert job["NumCPUs"] == "3"  # the per-submission -b string overrides the shape
        assert job["MinMemoryNode"] == "1G"
        assert job["MinTmpDiskNode"] == "10M"
        assert job["TimeLimit"] == "01:02:00"  # 3700 s, rounded up to whole minutes by Slurm
        assert job["Partition"] == "debug"
        assert job["WorkDir"] == str(tmp_path)
    finally:
        backend.cancel([batch_id])


@pytest.mark.slurm
def test_refusal_names_the_pilot_and_slurms_reason(slurm_env: dict[str, str]) -> None:
    backend = make_slurm(slurm_env)
    with pytest.raises(BackendError, match=r"pilot 'nowhere' not submitted: .*(?i:invalid partition)"):
        backend.submit(PilotRequest("nowhere", ["true"], SMALL, 60, resources={"partition": "no-such-partition"}))


@pytest.mark.slurm
def test_unknown_resources_go_as_gres_when_no_license_is_declared(slurm_env: dict[str, str]) -> None:
    backend = make_slurm(slurm_env)
    args = backend.submit_args(
        PilotRequest(
            "g", ["true"], SMALL, 60, resources={"gpu": "2", "gres": "fpga:1", "constraint": "avx", "qos": "high"}
        )
    )
    assert "--gres=fpga:1,gpu:2" in args
    assert "--constraint=avx" in args and "--qos=high" in args


@pytest.mark.slurm
def test_vanished_job_falls_back_from_sacct_to_the_status_file(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """No slurmdbd here: sacct refuses, so a job slurmctld forgot is judged by its status file."""
    backend = make_slurm(slurm_env, poll_interval=0.2)
    batch_id = backend.submit(PilotRequest("gone", ["/bin/sh", "-c", "exit 7"], SMALL, 60, log_dir=str(tmp_path)))
    assert wait_states(backend, [batch_id], all_final)[batch_id].exit_code == 7
    forgotten = backend._vanished([batch_id, "99999999"])  # what a poll does once MinJobAge has passed
    assert forgotten[batch_id].state is PilotState.FAILED and forgotten[batch_id].exit_code == 7
    assert "status file" in forgotten[batch_id].detail
    assert forgotten["99999999"].state is PilotState.LOST
    assert backend._sacct_works is False
    time.sleep(0.3)  # past poll_interval
    assert backend.states(["99999999"])["99999999"].state is PilotState.LOST


def test_slurm_state_mapping() -> None:
    backend = SlurmBackend()
    backend._cancelled.add("1")
    cases = {
        ("PENDING", "0"): PilotState.QUEUED,
        ("RUNNING", "0"): PilotState.RUNNING,
        ("COMPLETING", "0"): PilotState.RUNNING,
        ("COMPLETED", "0"): PilotState.DONE,
        ("FAILED", str(3 << 8)): PilotState.FAILED,
        ("FAILED", "9"): PilotState.LOST,
        ("NODE_FAIL", "0"): PilotState.LOST,
        ("PREEMPTED", "0"): PilotState.LOST,
        ("TIMEOUT", "0"): PilotState.LOST,
        ("OUT_OF_MEMORY", "0"): PilotState.LOST,
        ("BOOT_FAIL", "0"): PilotState.LOST,
        ("DEADLINE", "0"): PilotState.LOST,
        ("CANCELLED", "15"): PilotState.LOST,  # not cancelled by us (id 2)
        ("CANCELLED by 0", "3:0"): PilotState.LOST,  # sacct's spelling
    }
    for (state, raw), expected in cases.items():
        assert backend._classify("2", state, "", None, raw).state is expected, (state, raw)
    assert backend._classify("1", "CANCELLED", "", None, "15").state is PilotState.CANCELLED
    assert backend._classify("2", "FAILED", "", None, "3:0").exit_code == 3


def test_time_helpers() -> None:
    assert parse_time_origin("2023-01-01 00:00 +00:00") == datetime(2023, 1, 1, tzinfo=UTC).timestamp()
    assert parse_time_origin("2023-01-01 02:00 +02:00") == parse_time_origin("2023-01-01 00:00 +00:00")
    assert parse_time_origin("2023-01-01 00:00:30 -01:00") == parse_time_origin("2023-01-01 01:00:30 +00:00")
    with pytest.raises(BackendError, match="time_origin must be"):
        parse_time_origin("2023-01-01T00:00")
    assert slurm_time(3700) == "0-01:01:40"
    assert slurm_time(86400 * 2 + 5) == "2-00:00:05"
    assert decode_wait_status(768) == (3, None)
    assert decode_wait_status(9) == (None, 9)


def test_slurm_option_strings() -> None:
    assert parse_slurm_options(
        "-c 4 --mem=2G --tmp 500 -C avx -x n1 --gres gpu:1 -L matlab:1 -w n2 -pdebug -q high --reservation=r1"
    ) == {
        "cpu": "4",
        "mem": "2048",
        "tmp": "500",
        "features": "avx",
        "excludes": "n1",
        "gres": "gpu:1",
        "licenses": "matlab:1",
        "nodes": "n2",
        "partition": "debug",
        "qos": "high",
        "reservation": "r1",
    }
    assert parse_slurm_options("--cpus-per-task=2 --mem 1.5G") == {"cpu": "2", "mem": "1536"}
    # Sizes are taskqueues.units' with Slurm's binary letters: Gi is G, a B alone is bytes (rounded up to 1 MiB).
    assert parse_slurm_options("--mem 1Gi --tmp 512B") == {"mem": "1024", "tmp": "1"}
    with pytest.raises(BackendOptionError, match="unknown option '--nodes'"):
        parse_slurm_options("--nodes 2")
    with pytest.raises(BackendOptionError, match="unknown option '-N'"):
        parse_slurm_options("-N 2")
    with pytest.raises(BackendOptionError, match="needs a value"):
        parse_slurm_options("-p")
    with pytest.raises(BackendOptionError, match="positive integer"):
        parse_slurm_options("-c two")
    for foreign in ("-c \u0664", "--mem \u0664G"):  # Arabic-Indic digits (issue 32): refused, never passed on
        with pytest.raises(BackendOptionError, match=r"positive integer|size like"):
            parse_slurm_options(foreign)
    with pytest.raises(BackendOptionError, match="size like"):
        parse_slurm_options("--mem lots")
    with pytest.raises(BackendOptionError, match="--cpus-per-task"):
        parse_slurm_options("--help")
    with pytest.raises(BackendError, match="unknown setting"):
        SlurmSettings.from_options({"use_nicer": True})
    with pytest.raises(BackendOptionError, match="unknown option"):
        SlurmSettings.from_options({"options": "--bogus 1"})


@pytest.mark.slurm
def test_unreachable_slurmctld_converts_to_local(
    slurm_env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real Slurm commands, but a configuration whose controller port has nobody behind it."""
    conf = Path(slurm_env["SLURM_CONF"]).read_text()
    bad = tmp_path / "slurm.conf"
    bad.write_text(conf.replace("ClusterName=pilotfish", "ClusterName=pilotfish\nSlurmctldPort=1"))
    reset_conversion_warnings()
    with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
        backend = make_backend("slurm", {"config": str(bad), "bin_dir": slurm_env["PILOTFISH_SLURM_BIN"]})
    assert isinstance(backend, LocalBackend) and backend.converted_from == "slurm"
    assert any("slurmctld does not answer" in r.getMessage() for r in caplog.records)
    reset_conversion_warnings()
    assert isinstance(make_backend("slurm", {"config": slurm_env["SLURM_CONF"]}), SlurmBackend)
