"""The Grid Engine backend against the real Grid Engine that ``scripts/sge.sh up`` starts, and its helpers."""

from __future__ import annotations

import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pilot.backends import (
    Backend,
    BackendOptionError,
    PilotRequest,
    PilotState,
    SgeBackend,
    SgeSettings,
    parse_sge_options,
)
from pilot.backends.sge import sge_job_name
from taskqueues.errors import BackendError
from taskqueues.shapes import Shape
from tests.support.backends import SMALL, BackendContract, Harness, all_final, system_env, wait_states


@pytest.fixture
def sge_env() -> dict[str, str]:
    return system_env("sge")


def sge_run(env: dict[str, str], *argv: str) -> str:
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", **env}
    ).stdout


@pytest.fixture(autouse=True)
def _outputs_stay_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch jobs submitted without a log directory write their output to the submit directory: make it the
    test's, never the repository (the helper below gives every backend a log directory besides)."""
    monkeypatch.chdir(tmp_path)


def make_sge(env: dict[str, str], **settings: object) -> SgeBackend:
    return SgeBackend(
        SgeSettings.from_options(
            {
                "root": env["SGE_ROOT"],
                "cell": env["SGE_CELL"],
                "bin_dir": env["PILOTFISH_SGE_BIN"],
                "log_dir": str(Path.cwd() / "logs"),
                **settings,
            }
        )
    )


def qstat_priorities(env: dict[str, str]) -> dict[str, int]:
    """JB_priority of every live job, from ``qstat -pri -xml``."""
    root = ET.fromstring(sge_run(env, "qstat", "-pri", "-xml", "-u", "*"))
    return {job.findtext("JB_job_number", ""): int(job.findtext("JB_priority", "0")) for job in root.iter("job_list")}


def qstat_j(env: dict[str, str], batch_id: str) -> str:
    return sge_run(env, "qstat", "-j", batch_id)


def recorded_requests(env: dict[str, str], batch_id: str) -> dict[str, float]:
    """The value Grid Engine recorded for each hard ``-l`` request of a job (``qstat -j -xml``: CE_doubleval,
    what it schedules and enforces with, in bytes for a MEMORY complex)."""
    root = ET.fromstring(sge_run(env, "qstat", "-j", batch_id, "-xml"))
    hard = root.find(".//JB_hard_resource_list")
    assert hard is not None, f"job {batch_id} has no hard resource list"
    return {r.findtext("CE_name", ""): float(r.findtext("CE_doubleval", "nan")) for r in hard}


@pytest.mark.sge
class TestSgeContract(BackendContract):
    @pytest.fixture
    def harness(self, sge_env: dict[str, str]) -> Harness:
        def kill(backend: Backend, batch_id: str) -> None:
            # An operator's qdel, outside the backend: not a cancel the director asked for.
            sge_run(sge_env, "qdel", batch_id)

        def polls(backend: Backend) -> int:
            assert isinstance(backend, SgeBackend)
            return backend.polls

        return Harness(
            "sge",
            lambda interval: make_sge(sge_env, poll_interval=interval, repo_key="pf:"),
            kill,
            int(sge_env["PILOTFISH_SGE_SLOTS"]),
            polls,
        )


@pytest.mark.sge
def test_priority_from_start_by_options_and_default(sge_env: dict[str, str]) -> None:
    """Pilots that cannot start (more slots than the host has) stay in qstat so their priority can be read."""
    stuck = Shape("stuck", cpu=int(sge_env["PILOTFISH_SGE_SLOTS"]) + 1, mem=900)
    backend = make_sge(sge_env, default_prio=-7, prio_seconds=60)
    ids: dict[str, str] = {}
    try:
        now = time.time()
        ids["soon"] = backend.submit(PilotRequest("soon", ["true"], stuck, 60, start_by=now + 600))
        ids["due"] = backend.submit(PilotRequest("due", ["true"], stuck, 60, start_by=now - 600))
        ids["far"] = backend.submit(PilotRequest("far", ["true"], stuck, 60, start_by=now + 10 * 86400))
        ids["given"] = backend.submit(PilotRequest("given", ["true"], stuck, 60, start_by=now, options="-p -200"))
        ids["default"] = backend.submit(PilotRequest("default", ["true"], stuck, 60))
        priorities = qstat_priorities(sge_env)
        got = {name: priorities[batch_id] for name, batch_id in ids.items()}
        assert got["soon"] in (-10, -9)  # -(600 s / 60 s), give or take the seconds spent submitting
        assert got == {**got, "due": 0, "far": -1023, "given": -200, "default": -7}
        assert "priority:                   -200" in qstat_j(sge_env, ids["given"])
    finally:
        backend.cancel(list(ids.values()))


@pytest.mark.sge
def test_shape_maps_to_pe_per_slot_memory_wall_and_pass_through(sge_env: dict[str, str], tmp_path: Path) -> None:
    backend = make_sge(sge_env, repo_key="repo:")
    stuck_cpu = int(sge_env["PILOTFISH_SGE_SLOTS"]) + 1
    request = PilotRequest(
        "a/b@c",
        ["true"],
        Shape("s", cpu=stuck_cpu, mem=stuck_cpu * 100),
        wall=3600,
        resources={"arch": "lx-amd64", "soft": "-l hostname=localhost"},
        workdir=str(tmp_path),
    )
    batch_id = backend.submit(request)
    try:
        details = qstat_j(sge_env, batch_id)
        assert "job_name:                   repo;a|b&c" in details
        assert f"parallel environment:  smp range: {stuck_cpu}" in details
        hard = next(line for line in details.splitlines() if line.startswith("hard resource_list:"))
        assert "h_vmem=100m" in hard and "h_rt=3600" in hard and "arch=lx-amd64" in hard
        soft = next(line for line in details.splitlines() if line.startswith("soft resource_list:"))
        assert "hostname=localhost" in soft
        assert str(tmp_path) in details
    finally:
        backend.cancel([batch_id])


@pytest.mark.sge
def test_resource_names_and_cell_cluster_settings_reach_grid_engine(sge_env: dict[str, str], tmp_path: Path) -> None:
    """cpu_resource replaces the PE (one slot, so memory is not divided), mem_resource and tmp_resource name
    the -l complexes; root/cell/cluster are in the environment of every Grid Engine command the backend runs
    (seen through wrappers that record it and run the real command)."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    seen = tmp_path / "seen"
    for name in ("qsub", "qstat", "qdel", "qacct"):
        real = Path(sge_env["PILOTFISH_SGE_BIN"]) / name
        wrapper = wrappers / name
        wrapper.write_text(
            f'#!/bin/sh\necho {name} $SGE_ROOT $SGE_CELL $SGE_CLUSTER_NAME $SGE_CLUSTER >> {seen}\nexec {real} "$@"\n'
        )
        wrapper.chmod(0o755)
    backend = make_sge(
        sge_env,
        bin_dir=str(wrappers),
        cluster="pf-cluster",
        cpu_resource="m_core",
        mem_resource="h_data",
        tmp_resource="h_fsize",
        log_dir=str(tmp_path / "logs"),
        poll_interval=0.2,
    )
    request = PilotRequest("res", ["true"], Shape("s", cpu=2, mem=400, tmp=300), wall=600, workdir=str(tmp_path))
    batch_id = backend.submit(request)
    try:
        details = qstat_j(sge_env, batch_id)
        hard = next(line for line in details.splitlines() if line.startswith("hard resource_list:"))
        assert "m_core=2" in hard and "h_data=400m" in hard and "h_fsize=300m" in hard, hard
        assert "h_vmem" not in hard and "parallel environment" not in details, details
        assert wait_states(backend, [batch_id], all_final, timeout=60)[batch_id].state is PilotState.DONE
    finally:
        backend.cancel([batch_id])
    calls = seen.read_text().splitlines()
    assert {c.split()[0] for c in calls} >= {"qsub", "qstat"}, calls
    assert all(
        c.split()[1:] == [sge_env["SGE_ROOT"], sge_env["SGE_CELL"], "pf-cluster", "pf-cluster"] for c in calls
    ), calls


@pytest.mark.sge
def test_memory_and_scratch_are_recorded_as_the_shape_s_mb(sge_env: dict[str, str], tmp_path: Path) -> None:
    """Shapes count MB of 10^6 bytes (1 G = 1000 M). A MEMORY complex (h_vmem, h_fsize) must record that many
    bytes, not MiB; a complex counting MB (the seed's mem_r/tmp_r; here the INT complexes m_thread and
    m_socket stand for them, since the shared Grid Engine must not be reconfigured) gets the plain number the
    seed writes (`-l mem_r=10`). Both pilots can never start (more slots or threads than the host has)."""
    slots = int(sge_env["PILOTFISH_SGE_SLOTS"])
    shape = Shape("s", cpu=slots + 1, mem=(slots + 1) * 1000, tmp=300)
    memory = make_sge(sge_env, tmp_resource="h_fsize")
    counted = make_sge(sge_env, cpu_resource="m_core", mem_resource="m_thread", tmp_resource="m_socket")
    ids = [
        memory.submit(PilotRequest("bytes", ["true"], shape, 60, workdir=str(tmp_path))),
        counted.submit(PilotRequest("mb", ["true"], Shape("s", cpu=1, mem=4000, tmp=300), 60, workdir=str(tmp_path))),
    ]
    try:
        in_bytes, in_mb = (recorded_requests(sge_env, batch_id) for batch_id in ids)
        assert in_bytes["h_vmem"] == 1000 * 10**6  # per slot: (slots + 1) x 1000 MB over slots + 1 slots
        assert in_bytes["h_fsize"] == 300 * 10**6
        assert (in_mb["m_thread"], in_mb["m_socket"]) == (4000, 300)
        assert "m_thread=4000" in qstat_j(sge_env, ids[1])
    finally:
        memory.cancel(ids[:1])
        counted.cancel(ids[1:])


@pytest.mark.sge
def test_repo_key_defaults_to_the_repository_base_name(sge_env: dict[str, str], tmp_path: Path) -> None:
    """The seed: the base name of the repo (the directory the director runs in) followed by ':', which
    Grid Engine names spell ';'."""
    backend = make_sge(sge_env)
    stuck = Shape("stuck", cpu=int(sge_env["PILOTFISH_SGE_SLOTS"]) + 1, mem=900)
    batch_id = backend.submit(PilotRequest("named", ["true"], stuck, 60))
    try:
        assert f"job_name:                   {tmp_path.name};named" in qstat_j(sge_env, batch_id)
    finally:
        backend.cancel([batch_id])


def test_memory_units_without_qconf(tmp_path: Path) -> None:
    """Without `qconf -sc` the backend knows Grid Engine's own memory complexes and takes any other name as
    counting MB, as the seed's mem_r does."""
    empty = tmp_path / "bin"
    empty.mkdir()
    backend = SgeBackend(SgeSettings(bin_dir=str(empty)))
    assert backend.megabytes("h_vmem", 100) == "100m" and backend.megabytes("h_fsize", 7) == "7m"
    assert backend.megabytes("mem_r", 10) == "10" and backend.megabytes("tmp_r", 100) == "100"


QCONF_SC = """#name               shortcut   type      relop requestable consumable default  urgency
#------------------------------------------------------------------------------------------
h_vmem              h_vmem     MEMORY    <=    YES         NO         0        0
mem_job             mj         MEMORY    <=    YES         JOB        0        0
mem_slot            ms         MEMORY    <=    YES         YES        0        0
mem_r               mem_r      INT       <=    YES         NO         0        0
"""


@pytest.mark.parametrize(
    ("resource", "written"),
    [("h_vmem", "h_vmem=1000m"), ("mem_slot", "mem_slot=1000m"), ("mem_job", "mem_job=4000m"), ("mem_r", "mem_r=4000")],
)
def test_memory_per_slot_follows_the_complexs_consumable_column(tmp_path: Path, resource: str, written: str) -> None:
    """Issue 29 part 6: a 4-slot pilot of 4000 MB asks the whole amount, as the seed writes it, of a consumable
    counted per job (JOB) or a plain limit of the site's (mem_r), and a quarter of a complex Grid Engine counts
    per slot (consumable YES, or its own h_vmem limit, which the shepherd multiplies by the slots). The
    ``qconf`` here is a script printing a `qconf -sc` table: the shared Grid Engine's complexes must not be
    reconfigured for a test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("qconf", f"cat <<'EOF'\n{QCONF_SC}EOF\n"), ("qsub", "exit 1\n")):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    backend = SgeBackend(SgeSettings(bin_dir=str(bin_dir), mem_resource=resource))
    args = backend.submit_args(PilotRequest("p", ["true"], Shape("s", cpu=4, mem=4000), 60))
    assert args[args.index("-pe") + 1 : args.index("-pe") + 3] == ["smp", "4"]
    assert written in args[args.index("-l") + 1].split(","), args
    forced = SgeBackend(SgeSettings(bin_dir=str(bin_dir), mem_resource=resource, mem_per_slot=True))
    args = forced.submit_args(PilotRequest("p", ["true"], Shape("s", cpu=4, mem=4000), 60))
    assert f"{resource}=1000" in args[args.index("-l") + 1], "mem_per_slot = true overrides the column"


@pytest.mark.sge
def test_finished_jobs_without_status_file_are_judged_by_qacct(sge_env: dict[str, str]) -> None:
    """No log_dir, so no status file: the accounting record (written at once by our sge.sh) decides."""
    backend = make_sge(sge_env, poll_interval=0.2, log_dir=None)
    ok = backend.submit(PilotRequest("ok", ["true"], SMALL, 60))
    three = backend.submit(PilotRequest("three", ["/bin/sh", "-c", "exit 3"], SMALL, 60))
    victim = backend.submit(PilotRequest("victim", ["sleep", "300"], SMALL, 60))
    wait_states(backend, [victim], lambda s: s[victim].state is PilotState.RUNNING)
    sge_run(sge_env, "qdel", victim)
    states = wait_states(backend, [ok, three, victim], all_final)
    assert (states[ok].state, states[ok].detail) == (PilotState.DONE, "exit 0 (qacct)")
    assert (states[three].state, states[three].exit_code, states[three].detail) == (
        PilotState.FAILED,
        3,
        "exit 3 (qacct)",
    )
    assert states[victim].state is PilotState.LOST and "qacct failed 100" in states[victim].detail


@pytest.mark.sge
def test_job_that_left_no_trace_is_unknown_then_lost(sge_env: dict[str, str]) -> None:
    backend = make_sge(sge_env, poll_interval=0.0, accounting_grace=0.5)
    first = backend.states(["99999999"])["99999999"]
    assert first.state is PilotState.UNKNOWN
    time.sleep(0.6)
    assert backend.states(["99999999"])["99999999"].state is PilotState.LOST


@pytest.mark.sge
def test_refusal_names_the_pilot_and_the_reason(sge_env: dict[str, str]) -> None:
    backend = make_sge(sge_env)
    with pytest.raises(BackendError, match=r"pilot 'nowhere' not submitted: .*no_such_resource"):
        backend.submit(PilotRequest("nowhere", ["true"], SMALL, 60, resources={"no_such_resource": "1"}))


def test_job_names_lose_the_characters_grid_engine_refuses() -> None:
    assert sge_job_name("repo:job/1@host\\x*?y z") == "repo;job|1&host|x+!y_z"


def test_priority_mapping_without_a_cluster() -> None:
    backend = SgeBackend(SgeSettings(prio_seconds=10, max_prio=5, default_prio=3, options="-p 2"))
    now = 1_000_000.0
    request = PilotRequest("p", ["true"], SMALL, 60)
    assert backend.priority_for(request, now) == 2  # the configured -p beats default_prio
    assert backend.priority_for(PilotRequest("p", ["true"], SMALL, 60, start_by=now + 100), now) == -10
    assert backend.priority_for(PilotRequest("p", ["true"], SMALL, 60, start_by=now - 1000), now) == 5
    assert backend.priority_for(PilotRequest("p", ["true"], SMALL, 60, start_by=now + 1e9), now) == -1023
    assert backend.priority_for(PilotRequest("p", ["true"], SMALL, 60, start_by=now, options="-p 7"), now) == 7


def test_sge_option_strings() -> None:
    assert parse_sge_options("-p -100") == {"priority": "-100"}
    assert parse_sge_options("-p12") == {"priority": "12"}
    assert parse_sge_options("") == {}
    with pytest.raises(BackendOptionError, match="outside Grid Engine's range"):
        parse_sge_options("-p 2000")
    with pytest.raises(BackendOptionError, match="unknown option '-l'"):
        parse_sge_options("-l h_vmem=1G")
    with pytest.raises(BackendOptionError, match="integer priority"):
        parse_sge_options("-p high")
    with pytest.raises(BackendError, match="unknown setting"):
        SgeSettings.from_options({"prio": 3})
    with pytest.raises(BackendError, match=r"outside -1023\.\.1024"):
        SgeSettings.from_options({"default_prio": 5000})
