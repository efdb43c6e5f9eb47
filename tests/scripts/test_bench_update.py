"""Smoke test of scripts/bench_update.py on a few jobs (a real redis-server), so the benchmark cannot rot between
runs. The figures are not checked (this machine may be busy with other tests); what is checked is that each size
was measured, every job updated (the script checks each one's new shape and priority, and exits otherwise)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.paths import ROOT


def test_bench_update_measures_one_update_of_each_size() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench_update.py", "1", "30"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sizes = re.findall(
        r"^ +(\d+) jobs: server +[\d.]+ ms \( *[\d.]+ us a job\), whole update +[\d.]+ ms", done.stdout, re.M
    )
    assert sizes == ["1", "30"], done.stdout
