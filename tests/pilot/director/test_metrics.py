"""The director's part in metrics and JSON logs: its submissions and the batch systems' errors are counted
per backend, its lines are JSON with log_format = "json", and so are those of the pilots it starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from matcher.submission import Submitter
from pilot.director.service import Director
from taskqueues.context import Context
from tests.e2e.test_json_logs import json_lines
from tests.matcher.test_metrics import parse, value
from tests.pilot.director.test_local import cli_env, ctx, in_tmp, job, settings_for, wait_pilots_stopped
from tests.support.backends import system_env
from tests.support.polling import wait_until

__all__ = ["ctx", "in_tmp"]  # fixtures, imported for pytest


def test_the_director_counts_its_submissions_and_it_and_its_pilots_log_json(ctx: Context, in_tmp: Path) -> None:
    sub = Submitter.of(ctx).submit([job("once", "L")], name="once")
    env = {**cli_env(ctx), "PILOTFISH_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "-v", "director", "--once", "--log-dir", str(in_tmp / "logs")],
        cwd=in_tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = json_lines(done.stderr)
    assert lines and {line["component"] for line in lines} == {"director"}, done.stderr
    [job_id] = sub.ids.values()
    wait_until(lambda: ctx.store.jobs([job_id])[0].state.final, timeout=60, what="the job done")
    wait_pilots_stopped(ctx)
    [pilot_log] = [p for p in (in_tmp / "logs").iterdir() if p.read_text().strip()]
    pilot_lines = json_lines(pilot_log.read_text())
    assert {line["component"] for line in pilot_lines} == {"pilot"}, pilot_log.read_text()

    shown = subprocess.run(
        [sys.executable, "-m", "matcher.cli", "metrics"],
        cwd=in_tmp,
        env=cli_env(ctx),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    samples = parse(shown)
    assert value(samples, "pilotfish_director_submissions_total", backend="local") == 1
    assert value(samples, "pilotfish_jobs_ended_total", state="done") == 1


# A Slurm queue on a partition the real Slurm of this machine does not have: sbatch refuses every pilot.
NO_PARTITION = """
[sites.S.ces.ctld]
batch = "slurm"
[sites.S.ces.ctld.batch_options]
config = "/var/tmp/pilotfish-slurm/slurm.conf"
partition = "no-such-partition"
repo_key = "pfnp-"
[sites.S.ces.ctld.queues.q]
shapes = [{ name = "c1", cpu = 1, mem = "500M", wall = "10m" }]
"""


@pytest.mark.slurm
def test_a_batch_system_refusal_is_counted_under_its_backend(in_tmp: Path, redis_url: str) -> None:
    system_env("slurm")
    ctx = Context(settings_for(in_tmp, redis_url, NO_PARTITION))
    Submitter.of(ctx).submit([job("refused", "S")], name="refused")
    director = Director(ctx, log_dir=str(in_tmp / "logs"))
    try:
        report = director.cycle()
    finally:
        director.close()
    assert report.queues["S/ctld/q"].errors, report.summary()
    seen = ctx.store.views.census(10)
    assert seen.counter("errors:slurm") == len(report.queues["S/ctld/q"].errors)
    assert not seen.with_prefix("submitted:")
