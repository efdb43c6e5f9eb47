"""Smoke test of scripts/pair_match.py: a tiny run comparing this tree's match.lua with itself (HEAD) on its
own real redis-server, in a fresh interpreter as the script runs. The times are not checked (this machine may
be busy with other tests); what is checked is the table's shape: a row per kind, both versions timed by the
server, and, the two versions being the same, the same jobs per call within the stock's noise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.scripts import SCRIPTS

pytestmark = pytest.mark.timeout(300)


def test_pair_match_prints_a_row_per_kind() -> None:
    args = ["--before", "HEAD", "--kinds", "one,fill+r", "--tqs", "10", "--waiting", "500", "--calls", "20"]
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "pair_match.py"), *args, "--blocks", "2"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["kind"])
    rows = [line.replace("|", " ").split() for line in lines[head + 1 : head + 3]]
    assert [row[0] for row in rows] == ["one", "fill+r"]
    for row in rows:
        before, after, _, jobs_before, jobs_after = (float(x) for x in row[1:])
        assert before > 0 and after > 0  # the server timed both functions
        assert jobs_before > 0 and jobs_after > 0
    assert lines[0].startswith("load average at start:") and lines[-1].startswith("load average at end:")
