"""Deriving MJF from Slurm and Grid Engine job environments and from the host.

scontrol and qstat do not run on this machine; their parsers are tested on sample outputs written in
the formats Slurm 22.05 and Grid Engine 8.1 print, and the from_* functions on the environment path.
A real Slurm/SGE test belongs to the batch-system suites.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from pilot.mjf import derive
from tests.support.paths import ROOT

SCONTROL_SAMPLE = """JobId=4242 JobName=pilot
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   RunTime=00:01:40 TimeLimit=1-02:00:00 TimeMin=N/A
   SubmitTime=2024-05-01T09:59:58 EligibleTime=2024-05-01T09:59:58
   StartTime=2024-05-01T10:00:00 EndTime=2024-05-02T12:00:00 Deadline=N/A
   Partition=debug AllocNode:Sid=localhost:123
   NumNodes=1 NumCPUs=4 NumTasks=1 CPUs/Task=4 ReqB:S:C:T=0:0:*:*
   TRES=cpu=4,mem=4G,node=1,billing=4
   Command=/tmp/pilot.sh
"""

QSTAT_SAMPLE = """==============================================================
job_number:                 17
exec_file:                  job_scripts/17
submission_time:            Wed May  1 09:59:58 2024
owner:                      root
sge_o_workdir:              /root
account:                    sge
hard resource_list:         h_rt=7200,h_vmem=2G,s_rt=7000
mail_list:                  root@localhost
job_name:                   pilot
parallel environment:       smp range: 4
start_time            1:    05/01/2024 10:00:00.123
scheduling info:            (Collecting of scheduler job information is turned off)
"""


def no_command(argv: Sequence[str]) -> str | None:
    return None


def test_slurm_environment() -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_ON_NODE": "4",
        "SLURM_MEM_PER_NODE": "4096",
        "SLURM_JOB_START_TIME": "1714550400",
        "SLURM_JOB_END_TIME": "1714554000",
    }
    derived = derive.from_slurm(env)  # the real runner: scontrol answers nothing for this job here
    assert derived.values["allocated_CPU"] == 4
    assert derived.values["mem_limit_MB"] == 4294  # 4096 MiB = 4294.97 MB, floored
    assert derived.values["jobstart_secs"] == 1714550400
    assert derived.values["wall_limit_secs"] == 3600
    assert set(derived.sources.values()) == {"slurm"}


def test_slurm_memory_per_cpu_and_cpu_lists() -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_CPUS_PER_NODE": "4(x2),2", "SLURM_NODEID": "2", "SLURM_MEM_PER_CPU": "1000"}
    derived = derive.from_slurm(env, no_command)
    assert derived.values["allocated_CPU"] == 2
    assert derived.values["mem_limit_MB"] == 2097  # 2 x 1000 MiB
    derived = derive.from_slurm(
        {"SLURM_JOB_ID": "1", "SLURM_CPUS_PER_TASK": "3", "SLURM_NTASKS": "2", "SLURM_MEM_PER_NODE": "2G"}, no_command
    )
    assert derived.values["allocated_CPU"] == 6
    assert derived.values["mem_limit_MB"] == 2147
    assert "wall_limit_secs" not in derived.values


def test_not_in_slurm_or_sge_gives_nothing() -> None:
    assert derive.from_slurm({"SLURM_CPUS_ON_NODE": "4"}).values == {}
    assert derive.from_sge({"JOB_ID": "3"}).values == {}  # JOB_ID alone is too common a name


def test_bad_slurm_values_warn_instead_of_failing() -> None:
    derived = derive.from_slurm(
        {"SLURM_JOB_ID": "1", "SLURM_CPUS_ON_NODE": "four", "SLURM_MEM_PER_NODE": "lots", "SLURM_JOB_START_TIME": "x"},
        no_command,
    )
    assert derived.values == {}
    assert len(derived.warnings) == 3 and all(w.startswith("slurm") for w in derived.warnings)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("1:00:00", 3600),
        ("2-12", 216000),
        ("2-12:30", 217800),
        ("1-02:00:00", 93600),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("Partition_Limit", ValueError),
    ],
)
def test_slurm_durations(text: str, seconds: int | type[Exception] | None) -> None:
    if seconds is ValueError:
        with pytest.raises(ValueError):
            derive.parse_slurm_duration(text)
    else:
        assert derive.parse_slurm_duration(text) == seconds


def test_scontrol_output_gives_start_and_limit() -> None:
    fields = derive.parse_scontrol_job(SCONTROL_SAMPLE)
    assert fields["TimeLimit"] == "1-02:00:00" and fields["TRES"] == "cpu=4,mem=4G,node=1,billing=4"
    seen: list[list[str]] = []

    def scontrol(argv: Sequence[str]) -> str | None:  # stands in for the absent scontrol binary
        seen.append(list(argv))
        return SCONTROL_SAMPLE

    derived = derive.from_slurm({"SLURM_JOB_ID": "4242", "SLURM_JOB_START_TIME": "5"}, scontrol)
    assert seen == [["scontrol", "show", "job", "4242"]]
    assert derived.values["jobstart_secs"] == int(datetime(2024, 5, 1, 10, 0, 0).timestamp())
    assert derived.values["wall_limit_secs"] == 93600
    assert derived.sources["wall_limit_secs"] == "slurm:scontrol"
    unlimited = SCONTROL_SAMPLE.replace("TimeLimit=1-02:00:00", "TimeLimit=UNLIMITED")
    derived = derive.from_slurm({"SLURM_JOB_ID": "4242"}, lambda argv: unlimited)
    assert derived.values["wall_limit_secs"] == 93600  # EndTime - StartTime


def test_sge_spool_config_and_slots(tmp_path: Path) -> None:
    spool = tmp_path / "active_jobs" / "17.1"
    spool.mkdir(parents=True)
    (spool / "config").write_text("job_id=17\nh_rt=3600\ns_rt=3000\nh_vmem=2G\nh_cpu=INFINITY\n")
    env = {"JOB_ID": "17", "NSLOTS": "4", "SGE_ROOT": "/var/lib/gridengine", "SGE_JOB_SPOOL_DIR": str(spool)}
    derived = derive.from_sge(env, no_command)
    assert derived.values["allocated_CPU"] == 4
    assert derived.values["wall_limit_secs"] == 3000  # s_rt comes first: SIGUSR1 ends the pilot
    assert derived.values["mem_limit_MB"] == 4 * 2 * 2**30 // 10**6  # h_vmem is per slot, G = 2^30
    assert derived.sources == {"allocated_CPU": "sge", "wall_limit_secs": "sge", "mem_limit_MB": "sge"}


def test_sge_memory_is_the_jobs_whole_amount_by_the_complexs_consumable_column(tmp_path: Path) -> None:
    """Issue 29 part 6: mem_limit_MB is the job's total memory (the seed). h_vmem counts per slot unless
    `qconf -sc` shows the site made it a consumable per job (JOB): then its value is the whole amount."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "config").write_text("h_rt=3600\nh_vmem=2g\n")
    env = {"JOB_ID": "17", "NSLOTS": "4", "SGE_JOB_SPOOL_DIR": str(spool)}

    def qconf(consumable: str) -> derive.Runner:
        table = "#name shortcut type relop requestable consumable default urgency\n" + (
            f"h_vmem h_vmem MEMORY <= YES {consumable} 0 0\n"
        )
        return lambda argv: table if list(argv) == ["qconf", "-sc"] else None

    assert derive.from_sge(env, qconf("JOB")).values["mem_limit_MB"] == 2000
    assert derive.from_sge(env, qconf("YES")).values["mem_limit_MB"] == 8000
    assert derive.from_sge(env, qconf("NO")).values["mem_limit_MB"] == 8000  # the shepherd's limit x slots
    assert derive.from_sge(env, no_command).values["mem_limit_MB"] == 8000  # no qconf: h_vmem is a limit
    complexes = derive.parse_sge_complexes("h_vmem h_vmem MEMORY <= YES JOB 0 0\nmem_r mr INT <= YES NO 0 0\n")
    assert not derive.sge_per_slot("mr", complexes) and not derive.sge_per_slot("h_vmem", complexes)
    assert derive.sge_per_slot("s_vmem", complexes)  # unlisted: one of Grid Engine's own limits


def test_sge_pe_hostfile_gives_this_hosts_slots(tmp_path: Path) -> None:
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text(f"otherhost 8 all.q@otherhost UNDEFINED\n{socket.gethostname()} 3 all.q UNDEFINED\n")
    derived = derive.from_sge({"JOB_ID": "9", "NSLOTS": "11", "PE_HOSTFILE": str(hostfile)}, no_command)
    assert derived.values["allocated_CPU"] == 3


def test_qstat_output_gives_limits_and_start() -> None:
    parsed = derive.parse_qstat_job(QSTAT_SAMPLE)
    assert parsed["h_rt"] == "7200" and parsed["s_rt"] == "7000" and parsed["h_vmem"] == "2G"
    derived = derive.from_sge({"JOB_ID": "17", "NSLOTS": "4"}, lambda argv: QSTAT_SAMPLE)
    assert derived.values["wall_limit_secs"] == 7000
    assert derived.values["mem_limit_MB"] == 8589
    assert derived.values["jobstart_secs"] == int(datetime(2024, 5, 1, 10, 0, 0).timestamp())
    assert derived.sources["wall_limit_secs"] == "sge:qstat"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2G", 2 * 2**30),
        ("2g", 2 * 10**9),
        ("512M", 512 * 2**20),
        ("1000", 1000),
        ("INFINITY", None),
        ("4.1g", 4_100_000_000),
    ],
)  # exactly: a float gave 4099999999
def test_sge_memory_units(text: str, size: int | None) -> None:
    assert derive.parse_sge_memory(text) == size


def test_sge_times() -> None:
    assert derive.parse_sge_time("1:00:00") == 3600
    assert derive.parse_sge_time("90") == 90
    assert derive.parse_sge_time("INFINITY") is None
    with pytest.raises(ValueError):
        derive.parse_sge_time("1h")


def test_host_values_match_the_machine(tmp_path: Path) -> None:
    derived = derive.from_host(tmp_path, pilot_start=1234.9)
    assert derived.values["log_cores"] == psutil.cpu_count(logical=True)
    assert derived.values["allocated_CPU"] == len(os.sched_getaffinity(0))
    assert 0 < int(derived.values["mem_limit_MB"]) <= psutil.virtual_memory().total // 10**6
    free_gb = psutil.disk_usage(str(tmp_path)).free / 10**9
    assert abs(float(derived.values["disk_limit_GB"]) - free_gb) < 1
    assert derived.values["jobstart_secs"] == 1234
    assert set(derived.sources.values()) == {"host"}


def test_host_jobstart_defaults_to_this_process_start(tmp_path: Path) -> None:
    derived = derive.from_host(tmp_path)
    assert derived.values["jobstart_secs"] == int(psutil.Process().create_time())


def run_reader(env: dict[str, str], workdir: Path) -> dict[str, dict[str, object]]:
    """Read features in a real subprocess whose environment is exactly ``env`` (plus PATH)."""
    code = (
        "import json; from pilot.mjf.source import read_features; "
        f"f = read_features(workdir={str(workdir)!r}); "
        "print(json.dumps({'values': {**f.as_dict()['job'], **f.as_dict()['machine']}}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": os.environ["PATH"], **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    values: dict[str, dict[str, object]] = json.loads(done.stdout)["values"]
    return values


def test_sources_in_a_slurm_job_subprocess(tmp_path: Path) -> None:
    values = run_reader(
        {
            "SLURM_JOB_ID": "31",
            "SLURM_CPUS_ON_NODE": "2",
            "SLURM_MEM_PER_CPU": "500",
            "SLURM_JOB_START_TIME": "1714550400",
            "SLURM_JOB_END_TIME": "1714557600",
        },
        tmp_path,
    )
    assert values["allocated_CPU"] == {"value": 2, "source": "slurm"}
    assert values["mem_limit_MB"] == {"value": 1048, "source": "slurm"}
    assert values["wall_limit_secs"] == {"value": 7200, "source": "slurm"}
    assert values["disk_limit_GB"]["source"] == "host"
    assert values["cpufactor_lrms"] == {"value": 1.0, "source": "default"}


def test_sources_in_an_sge_job_subprocess(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "config").write_text("h_rt=0:30:0\nh_vmem=1000m\n")
    values = run_reader({"JOB_ID": "8", "NSLOTS": "2", "SGE_JOB_SPOOL_DIR": str(spool)}, tmp_path)
    assert values["allocated_CPU"] == {"value": 2, "source": "sge"}
    assert values["wall_limit_secs"] == {"value": 1800, "source": "sge"}
    assert values["mem_limit_MB"] == {"value": 2000, "source": "sge"}
    assert values["log_cores"]["source"] == "host"
