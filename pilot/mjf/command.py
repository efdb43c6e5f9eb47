"""``pilotfish mjf``: every Machine/Job Features value the pilot sees, where it came from, and $JOBSTATUS.

Run inside a batch job (or anywhere: the host fallback always answers) to see what a pilot started there
would believe: each key with its source, the time left (real and normalised), and the spec's
remaining_time, draining_waste and kill_waste: computed from the $JOBSTATUS directory once a pilot has
published there, and otherwise shown as formulas with the values that are known. Exit status 1 when it
prints an error (a $JOBSTATUS that is not a directory, or whose files cannot be read).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from pilot.mjf import formulas
from pilot.mjf.features import Features
from pilot.mjf.jobstatus import JobStatus, JobStatusError, read_jobstatus
from pilot.mjf.source import FeatureReader


def _jobstatus_view(directory: str, features: Features, now: float, lock_timeout: float) -> dict[str, Any]:
    view: dict[str, Any] = {"directory": directory, "values": None}
    try:
        status: JobStatus | None = read_jobstatus(directory, timeout=lock_timeout)
    except JobStatusError as exc:
        view["error"] = str(exc)
        return view
    if status is None:
        view["note"] = f"{directory} has no used_CPU: nothing published yet"
        return view
    expected, enforced = formulas.remaining_times(
        last_exp_job_end=status.last_exp_job_end, last_max_job_end=status.last_max_job_end, now=now
    )
    allocated = features.job.allocated_CPU
    view["values"] = {
        "used_CPU": status.used_CPU,
        "last_job_start": status.last_job_start,
        "first_exp_job_end": status.first_exp_job_end,
        "last_exp_job_end": status.last_exp_job_end,
        "last_max_job_end": status.last_max_job_end,
        "add_uncom_time": status.add_uncom_time,
        "add_final_exp_waste": status.add_final_exp_waste,
        "can_postpone_last_job": status.can_postpone_last_job,
        "priority_factor": status.priority_factor,
    }
    view["remaining_time"] = {"expected": expected, "enforced": enforced}
    view["draining_waste"] = (
        None
        if allocated is None
        else formulas.draining_waste(
            allocated_CPU=allocated,
            used_CPU=status.used_CPU,
            first_exp_job_end=status.first_exp_job_end,
            add_final_exp_waste=status.add_final_exp_waste,
            now=now,
        )
    )
    view["kill_waste"] = formulas.kill_waste(
        add_uncom_time=status.add_uncom_time, used_CPU=status.used_CPU, last_job_start=status.last_job_start, now=now
    )
    return view


#: The spec's waste formulas (use cases 9-11), with the names of the values they need.
FORMULAS = {
    "remaining_time": (
        "last_exp_job_end - now (expected), last_max_job_end - now (enforced)",
        ("last_exp_job_end", "last_max_job_end", "now"),
    ),
    "draining_waste": (
        "(allocated_CPU - used_CPU) * (first_exp_job_end - now) + add_final_exp_waste",
        ("allocated_CPU", "used_CPU", "first_exp_job_end", "add_final_exp_waste", "now"),
    ),
    "kill_waste": (
        "add_uncom_time + used_CPU * (now - last_job_start)",
        ("add_uncom_time", "used_CPU", "last_job_start", "now"),
    ),
}


def formulas_view(features: Features, values: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """Each waste formula with the values known for it (None: unknown, as nothing is published)."""
    known: dict[str, Any] = {"now": now, "allocated_CPU": features.job.allocated_CPU, **(values or {})}
    return {
        name: {"formula": text, "values": {v: known.get(v) for v in needs}} for name, (text, needs) in FORMULAS.items()
    }


def collect(
    *, workdir: str, stop_margin: float, jobstatus: str | None, lock_timeout: float, now: float | None = None
) -> dict[str, Any]:
    """Everything ``pilotfish mjf`` shows, as one JSON-ready dictionary."""
    now = time.time() if now is None else now
    features = FeatureReader.from_environment(workdir=workdir).load()
    report: dict[str, Any] = {"now": now, "features": features.as_dict()}
    report["time_left"] = {
        "end": features.end_time(),
        "stop_margin": stop_margin,
        "cpufactor": features.cpufactor,
        "real": features.time_left(now, stop_margin),
        "normalised": features.time_left_normalised(now, stop_margin),
    }
    if not jobstatus:
        report["jobstatus"] = None
    elif os.path.isdir(jobstatus):
        report["jobstatus"] = _jobstatus_view(jobstatus, features, now, lock_timeout)
    else:
        report["jobstatus"] = {"directory": jobstatus, "values": None, "error": f"{jobstatus} is not a directory"}
    values = report["jobstatus"]["values"] if report["jobstatus"] else None
    report["formulas"] = formulas_view(features, values, now)
    return report


def failed(report: dict[str, Any]) -> bool:
    """The report carries an error (the command then exits 1)."""
    return bool(report["jobstatus"] and report["jobstatus"].get("error"))


def _number(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def _seconds(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.0f} s"


def render(report: dict[str, Any]) -> str:
    """The human-readable table of :func:`collect`'s report."""
    features = report["features"]
    lines = [
        f"MACHINEFEATURES  {features['machinefeatures'] or '(not set)'}",
        f"JOBFEATURES      {features['jobfeatures'] or '(not set)'}",
    ]
    for section in ("machine", "job"):
        lines.append(f"{section}:")
        for key, entry in features[section].items():
            value = "-" if entry["value"] is None else entry["value"]
            lines.append(f"  {key:<22} {value!s:<24} {entry['source'] or '(absent)'}")
    left = report["time_left"]
    lines.append(
        f"time left: {_seconds(left['real'])} real, {_seconds(left['normalised'])} normalised "
        f"(cpufactor {left['cpufactor']:g}, stop margin {left['stop_margin']:g} s)"
    )
    status = report["jobstatus"]
    lines.append(f"JOBSTATUS        {status['directory'] if status else '(not set)'}")
    if status is not None and status.get("error"):
        lines.append(f"  error: {status['error']}")
    if status is None or status["values"] is None:
        if status is not None and status.get("note"):
            lines.append(f"  {status['note']}")
        lines.append("  waste formulas (nothing published: unknown values shown as ?):")
        for name, entry in report["formulas"].items():
            known = ", ".join(f"{k}={'?' if v is None else _number(v)}" for k, v in entry["values"].items())
            lines.append(f"  {name:<22} {entry['formula']}")
            lines.append(f"  {'':<22} with {known}")
    else:
        for key, value in status["values"].items():
            lines.append(f"  {key:<22} {value}")
        remaining = status["remaining_time"]
        lines.append(
            f"  {'remaining_time':<22} expected {remaining['expected']:.0f} s, enforced {remaining['enforced']:.0f} s"
        )
        draining = status["draining_waste"]
        lines.append(
            f"  {'draining_waste':<22} "
            + ("unknown (no allocated_CPU)" if draining is None else f"{draining:.0f} CPU s")
        )
        lines.append(f"  {'kill_waste':<22} {status['kill_waste']:.0f} CPU s")
    if features["warnings"]:
        lines.append("warnings:")
        lines += [f"  {message}" for message in features["warnings"]]
    return "\n".join(lines)


@click.command("mjf")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option(
    "--workdir",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Work directory whose disk the host fallback measures.",
)
@click.option(
    "--stop-margin",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds the pilot keeps for itself before its end.",
)
@click.option(
    "--jobstatus",
    envvar="JOBSTATUS",
    default=None,
    type=click.Path(file_okay=False),
    help="$JOBSTATUS directory to read (default: $JOBSTATUS).",
)
@click.option(
    "--lock-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds to wait for the used_CPU lock.",
)
def mjf(as_json: bool, workdir: str, stop_margin: float, jobstatus: str | None, lock_timeout: float) -> None:
    """Show the Machine/Job Features this pilot sees, where each value comes from, and its $JOBSTATUS."""
    report = collect(workdir=workdir, stop_margin=stop_margin, jobstatus=jobstatus, lock_timeout=lock_timeout)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else render(report))
    if failed(report):
        sys.exit(1)
