"""Shares end to end: real Redis, the CLI, a real pilot running real payloads. One group floods the queue,
another submits later; with equal shares the later group gets its half of the cores at once, although the
flood's jobs are more urgent (submitted earlier), and status and explain show who owns what."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from taskqueues.store.keys import Keys, account_of
from tests.support.paths import ROOT
from tests.support.polling import wait_until

QUEUE = "local/localhost/local"


def cli(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"pilotfish {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_PILOT_EVENTS": "false",
        "PYTHONPATH": str(ROOT),
    }


def test_a_flooding_group_leaves_the_other_its_share(env: dict[str, str], tmp_path: Path, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = Keys()
    shares = tmp_path / "shares.toml"
    shares.write_text('halflife = "1s"\n[groups.prod]\nshare = 1\n[groups.ana]\nshare = 1\n')
    assert "2 groups" in cli(["shares", str(shares)], env)
    flood, late = tmp_path / "flood.toml", tmp_path / "late.toml"
    flood.write_text(
        'name = "flood"\n' + "".join(f'[[jobs]]\nname = "f{i}"\ncommand = "sleep 0.4"\nete = 0.4\n' for i in range(300))
    )
    late.write_text(
        'name = "late"\n' + "".join(f'[[jobs]]\nname = "a{i}"\ncommand = "sleep 0.4"\nete = 0.4\n' for i in range(20))
    )
    submitted = cli(["submit", str(flood), "--owner", "pat", "--group", "prod", "--json"], env)
    flood_request = json.loads(submitted)["request"]
    pilot = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "matcher.cli",
            "pilot",
            "--queue",
            QUEUE,
            "--cores",
            "4",
            "--mem",
            "4000",
            "--idle-timeout",
            "3",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def records() -> list[dict]:
            return [{**json.loads(v), "id": k.decode()} for k, v in client.hgetall(keys.jobs).items()]

        wait_until(lambda: sum(r["s"] == "done" for r in records()) >= 8, timeout=60, what="8 flood jobs done")
        out = cli(["submit", str(late), "--owner", "ann", "--group", "ana", "--json"], env)
        late_ids = set(json.loads(out)["ids"].values())
        status = cli(["status", json.loads(out)["request"]], env)
        assert "owner ann group ana" in status
        explained = cli(["explain", sorted(late_ids, key=int)[-1]], env)
        assert "owner ann, group ana" in explained
        wait_until(
            lambda: all(r["s"] == "done" for r in records() if r["id"] in late_ids),
            timeout=120,
            what="the late jobs done",
        )
        cli(["cancel", flood_request], env)  # the rest of the flood proves nothing more
        final = ("done", "cancelled", "failed")
        wait_until(lambda: all(r["s"] in final for r in records()), timeout=60, what="every job ended")
    finally:
        pilot.terminate()
        pilot.wait(timeout=30)
    rows = records()
    start = min(r["tm"] for r in rows if r["id"] in late_ids)
    end = max(r["tm"] for r in rows if r["id"] in late_ids)
    assert any(r["s"] == "cancelled" for r in rows), "the flood still waited when the late request was done"
    window = [r for r in rows if "tm" in r and start <= r["tm"] <= end]
    ana = sum(account_of(r["t"])[0] == "ana" for r in window)
    # Served in proportion while both wait: about half each (without shares, the flood would go first: its
    # jobs are dated earlier, and every ana lease would come after the last flood lease).
    assert len(window) >= 16 and 0.35 <= ana / len(window) <= 0.65, (ana, len(window))
    assert {k.decode(): v.decode() for k, v in client.hgetall(keys.fair).items() if k.startswith(b"r:")} == {
        "r:prod": "0",
        "r:ana": "0",
        "r:prod.pat": "0",
        "r:ana.ann": "0",
    }
