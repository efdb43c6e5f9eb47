"""scripts/model_spawn.py: every way of spawning runs its payloads to the end and is measured (real spawns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "model_spawn.py"


def test_each_way_runs_every_payload_and_prints_its_row() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "-n", "60", "--rounds", "1", "--work", "0.05"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        line.split()[0]: line.split()[1:]
        for line in done.stdout.splitlines()
        if line.split()[:1] in (["sync"], ["here"], ["placed"], ["thread"], ["process"])
    }
    assert set(rows) == {"sync", "here", "placed", "thread", "process"}, done.stdout
    for way, (rate, cpu) in rows.items():
        assert float(rate) > 0 and float(cpu) > 0, f"{way}: {done.stdout}"
