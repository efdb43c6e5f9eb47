"""Smoke test of scripts/bench_pilots.py: a tiny run (5 pilots, 200 jobs, 1 s windows) against its own real
redis-server, in a fresh interpreter as the script runs; so the benchmark cannot rot between runs. The
figures are not checked (this machine may be busy with other tests); what is checked is the tables' shape
and that the counts agree: every job the pilots leased was completed, and the server counted as much; the
probe pilot (its own process) measured its latency, and the server side of the load window was read.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.scripts import SCRIPTS

pytestmark = pytest.mark.timeout(300)


def run_bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_pilots.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_bench_pilots_prints_a_consistent_table() -> None:
    out = run_bench("--pilots", "5,8", "--jobs", "200", "--seconds", "1", "--payload-seconds", "0.2")
    assert "scaled down from 10^6 by --jobs 200" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["pilots", "waiting"])
    rows = [line.replace("|", " ").split() for line in lines[head + 1 : head + 3]]
    assert [row[0] for row in rows] == ["5", "8"]
    for row in rows:
        assert len(row) == 17
        assert float(row[8]) > 0  # the probe's p99: a pilot of its own process exchanged in the window
        matched, completed, server_matched, server_done = (int(x.replace(",", "")) for x in row[-4:])
        assert matched == completed == server_matched == server_done
    assert int(rows[0][1]) == 200  # the first row starts with every job waiting
    # The second with what the first left, and the 10 jobs of the first's small submission (issue 31's wake).
    assert int(rows[1][1].replace(",", "")) == 200 + 10 - int(rows[0][-4])
    assert int(rows[0][-4]) + int(rows[1][-4]) > 0  # woken by the wake channel, the pilots leased jobs
    assert "5 pilots: counts consistent" in out and "8 pilots: counts consistent" in out
    assert out.count("idle: ") == 2 and out.count("load: ") == 2
    assert out.count("the load's wake (PUBLISH on each of the 16 wake shards") == 2
    assert out.count("a submission of 10 jobs for one queue woke") == 2
    side = next(i for i, line in enumerate(lines) if line.split()[:4] == ["pilots", "pay", "s", "loadavg"])
    for line, pilots in zip(lines[side + 1 : side + 3], ["5", "8"], strict=True):
        cells = line.replace("|", " ").split()
        assert cells[:2] == [pilots, "0.2"] and len(cells) == 12
        assert int(cells[8].replace(",", "")) > 0 and float(cells[10]) > 0  # the probe exchanged; its p99
        assert float(cells[5]) > 0  # the server spent time inside commands in the load window
