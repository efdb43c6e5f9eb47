"""``pilotfish mjf`` run as a real subprocess: values, sources, time left and $JOBSTATUS figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pilot.mjf.jobstatus import JobStatusWriter, RunningPayload
from tests.support.paths import ROOT as REPO


def run_mjf(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from pilot.mjf.command import mjf; mjf()", *args],
        env={"PATH": os.environ["PATH"], **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
    )


def site(tmp_path: Path, now: int) -> dict[str, str]:
    machine, job = tmp_path / "machine", tmp_path / "job"
    machine.mkdir()
    job.mkdir()
    (machine / "hs06").write_text("320")
    (machine / "shutdowntime").write_text(str(now + 5000))
    (machine / "jobslots").write_text("oops")
    (job / "jobstart_secs").write_text(str(now - 1000))
    (job / "wall_limit_secs").write_text("4000")
    (job / "cpufactor_lrms").write_text("2")
    (job / "allocated_CPU").write_text("8")
    return {"MACHINEFEATURES": str(machine), "JOBFEATURES": str(job)}


def test_json_report(tmp_path: Path) -> None:
    now = int(time.time())
    env = site(tmp_path, now)
    status_dir = tmp_path / "status"
    writer = JobStatusWriter(status_dir, allocated_CPU=8, pilot_start=now - 1000)
    writer.publish(
        [
            RunningPayload(cores=2, start=now - 500, expected_end=now + 1000, max_end=now + 2000),
            RunningPayload(cores=4, start=now - 100, expected_end=now + 500, max_end=now + 2500),
        ],
        now=now,
    )
    env["JOBSTATUS"] = str(status_dir)
    report: dict[str, Any] = json.loads(
        run_mjf(env, "--json", "--stop-margin", "100", "--workdir", str(tmp_path)).stdout
    )
    at = report["now"]
    job, machine = report["features"]["job"], report["features"]["machine"]
    assert machine["hs06"] == {"value": 320.0, "source": f"machinefeatures:{env['MACHINEFEATURES']}"}
    assert job["allocated_CPU"]["source"] == f"jobfeatures:{env['JOBFEATURES']}"
    assert job["wall_limit_secs_lrms"] == {"value": 8000, "source": "derived:wall_limit_secs*cpufactor_lrms"}
    assert job["mem_limit_MB"]["source"] == "host"
    assert machine["jobslots"] == {"value": None, "source": None}
    assert any("jobslots" in w and "malformed" in w for w in report["features"]["warnings"])
    left = report["time_left"]
    assert left["end"] == now + 3000  # jobstart + wall comes before the shutdown
    assert abs(left["real"] - (now + 3000 - at - 100)) < 1e-6
    assert abs(left["normalised"] - 2 * left["real"]) < 1e-6
    status = report["jobstatus"]
    assert status["values"]["used_CPU"] == 6 and status["values"]["add_uncom_time"] == 2 * 400
    assert status["values"]["add_final_exp_waste"] == 2 * 500 + 4 * 500
    assert abs(status["remaining_time"]["expected"] - (now + 1000 - at)) < 1e-6
    assert abs(status["remaining_time"]["enforced"] - (now + 2500 - at)) < 1e-6
    assert abs(status["kill_waste"] - (800 + 6 * (at - (now - 100)))) < 1e-6
    assert abs(status["draining_waste"] - (2 * (now + 500 - at) + 3000)) < 1e-6


def test_table_report_without_jobstatus(tmp_path: Path) -> None:
    now = int(time.time())
    env = site(tmp_path, now)
    out = run_mjf(env, "--workdir", str(tmp_path)).stdout
    assert f"MACHINEFEATURES  {env['MACHINEFEATURES']}" in out
    assert "hs06" in out and f"machinefeatures:{env['MACHINEFEATURES']}" in out
    assert "time left:" in out and "normalised (cpufactor 2, stop margin 0 s)" in out
    assert "warnings:" in out and "jobslots: malformed value" in out
    # No $JOBSTATUS: the waste formulas all the same, with what is known (issue 20).
    lines = out.splitlines()
    assert "JOBSTATUS        (not set)" in lines
    at = lines.index("  waste formulas (nothing published: unknown values shown as ?):")
    assert lines[at + 3].split() == [
        "draining_waste",
        "(allocated_CPU",
        "-",
        "used_CPU)",
        "*",
        "(first_exp_job_end",
        "-",
        "now)",
        "+",
        "add_final_exp_waste",
    ]
    assert lines[at + 4].strip().startswith("with allocated_CPU=8, used_CPU=?, first_exp_job_end=?")
    assert lines[at + 5].split()[0] == "kill_waste"


def test_table_report_with_unpublished_jobstatus(tmp_path: Path) -> None:
    status_dir = tmp_path / "status"
    status_dir.mkdir()
    out = run_mjf({"JOBSTATUS": str(status_dir)}, "--workdir", str(tmp_path)).stdout
    assert "MACHINEFEATURES  (not set)" in out
    assert f"JOBSTATUS        {status_dir}" in out and "nothing published yet" in out
    assert "unbounded real" in out and "error" not in out and "waste formulas" in out


def test_an_error_is_a_non_zero_exit(tmp_path: Path) -> None:
    """Issue 20: ``pilotfish mjf`` printed its errors and exited 0."""
    missing = tmp_path / "no-such-dir"
    done = run_mjf({"JOBSTATUS": str(missing)}, "--workdir", str(tmp_path), check=False)
    assert done.returncode == 1 and f"  error: {missing} is not a directory" in done.stdout.splitlines()
    status_dir = tmp_path / "status"
    status_dir.mkdir()
    (status_dir / "used_CPU").write_text("many")
    done = run_mjf({"JOBSTATUS": str(status_dir)}, "--workdir", str(tmp_path), "--json", check=False)
    assert done.returncode == 1 and json.loads(done.stdout)["jobstatus"]["error"]
