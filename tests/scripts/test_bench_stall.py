"""Smoke test of scripts/bench_stall.py: its stall measure on made-up runs, and a tiny real run (real
redis-server, director and pilot processes) so the benchmark cannot rot. The run's figures are not checked
against the bound (this machine may be busy with other tests); that it measured every job is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.scripts import script

bench = script("bench_stall")


def test_the_stall_is_the_longest_stretch_with_a_job_waiting_free_room_and_no_start() -> None:
    runs = [
        (0.0, 1.0, 2.0),  # 1 s to the first start (room 2, two waiting)
        (0.0, 1.5, 2.5),
        (0.0, 2.5, 3.0),  # room frees at 2.0, the next start at 2.5: 0.5 s
        (0.0, 9.0, 10.0),  # a slot is free from 2.5 (one job runs), nothing starts until 9.0: 6.5 s
    ]
    stall = bench.longest_stall(runs, 2)
    assert (stall.seconds, stall.at) == (6.5, 2.5)


def test_no_stall_while_the_room_is_full_or_nothing_waits() -> None:
    full = [(0.0, 0.0, 5.0), (0.0, 5.0, 6.0)]  # one slot, busy until the next start
    assert bench.longest_stall(full, 1).seconds == 0.0
    assert bench.longest_stall([(0.0, 0.0, 1.0), (5.0, 5.0, 6.0)], 1).seconds == 0.0  # nothing waited at 1-5


@pytest.mark.timeout(600)
def test_bench_stall_measures_a_small_run() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/bench_stall.py", "--jobs", "12", "--pilots", "2", "--idle-timeout", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = json.loads(done.stdout.splitlines()[-1])
    assert set(last) == {"ok", "stall", "bound", "load"}, done.stdout + done.stderr
    assert "run: 12 of 12 jobs done" in done.stdout, done.stdout + done.stderr
    assert "longest stall (jobs waiting, free room, no start):" in done.stdout
