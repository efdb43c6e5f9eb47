"""Smoke test of scripts/bench_release.py on a tiny chain (real redis-server, worker and pilot processes), so
the benchmark cannot rot between runs. The figures are not checked (this machine may be busy with other
tests); what is checked is that every release of the chain was seen and measured."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(600)  # the benchmark run bounded at 300 s


def test_bench_release_measures_every_release_of_a_small_chain() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench_release.py", "-n", "4", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(re.findall(r"^round \d: 3 releases: median [\d.]+ ms", done.stdout, re.M)) == 2, done.stdout
    assert re.search(r"^all 6 releases: median [\d.]+ ms, p90 [\d.]+ ms, max [\d.]+ ms$", done.stdout, re.M), (
        done.stdout
    )
