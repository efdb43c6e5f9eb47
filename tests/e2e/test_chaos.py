"""A small chaos run in CI: scripts/chaos.py on a few hundred jobs with a kill of every kind, against a real
deployment (embedded Valkey, Celery worker and beat, director, Flower, local pilots). Its own exit status
says whether every target held: nothing lost, nothing recorded done twice, nothing done without a run,
no second run while the first run's pilot lived, recovery within 2 x lease + director interval."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_a_small_chaos_run_meets_every_target() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "scripts/chaos.py",
            "--jobs",
            "300",
            "--kills",
            "12",
            "--timeout",
            "80",
            "--payload-seconds",
            "0.2",
            "--seed",
            "21",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    report = done.stdout + done.stderr
    assert "lost (never completed)" in done.stdout and "max recovery" in done.stdout, report
    kinds = done.stdout.splitlines()[1]
    for kind in ("pilot", "guardian", "payload", "worker", "beat", "director", "flower", "redis"):
        assert f"{kind} 0" not in kinds, f"no {kind} was killed: {kinds}"
    assert done.returncode == 0, report
