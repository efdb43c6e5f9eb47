"""``pilotfish run`` interrupted stops everything it started (issue 32, part 2).

A real run (embedded server in the test's state directory, the local catalog, real pilots, guardians and
payloads) gets a real signal: at 15 s, with payloads running, or the moment its first pilot process appears
(the director launching). Every process of the run is watched with psutil from its start (the run's
descendants, and the embedded server); 10 s after the signal none may be left. The run says so in one line,
exits with 128 + the signal's number, and ``pilotfish status`` shows the request cancelled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(300)

WORKFLOW = """
name = "long"
[rules.sleep]
command = "sleep 60"
requirements = { cpu = 1, mem = "50M", wall = "5m" }
ete = "60s"
""" + "".join(f'[[jobs]]\nname = "j{n}"\nrule = "sleep"\n' for n in range(6))


class Watched:
    """Every process the run started, seen so far: its descendants, and the embedded server it daemonised."""

    def __init__(self, root: psutil.Process, state: Path) -> None:
        self.root = root
        self.state = str(state)
        self.seen: dict[int, psutil.Process] = {root.pid: root}

    def sample(self) -> list[psutil.Process]:
        with_children: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            with_children = self.root.children(recursive=True)
        for process in with_children:
            self.seen.setdefault(process.pid, process)
        for process in psutil.process_iter(["cmdline"]):
            if any(self.state in part for part in process.info["cmdline"] or ()):
                self.seen.setdefault(process.pid, process)
        return with_children

    def alive(self) -> list[str]:
        left = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
            except psutil.Error:
                continue
        return left


def _pilots(children: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for process in children:
        try:
            if "pilot" in process.cmdline()[3:4]:  # python -m matcher.cli pilot ...
                out.append(process)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize(
    ("name", "when"),
    [("SIGINT", "15s"), ("SIGTERM", "3s"), ("SIGHUP", "3s"), ("SIGINT", "launch")],
)
def test_an_interrupted_run_leaves_no_process_after_10_s(tmp_path: Path, name: str, when: str) -> None:
    sig = signal.Signals[name]
    state = tmp_path / "state"
    workflow = tmp_path / "long.toml"
    workflow.write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")}
    env.update(PILOTFISH_STATE_DIR=str(state), PILOTFISH_PILOT_EVENTS="false", TMPDIR=str(tmp_path))
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "matcher.cli", "run", str(workflow)],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    watched = Watched(psutil.Process(run.pid), state)
    try:
        started = time.monotonic()
        while True:
            children = watched.sample()
            assert run.poll() is None, err.read_text()
            if when == "launch" and _pilots(children):
                break
            if when != "launch" and time.monotonic() - started >= float(when.removesuffix("s")):
                assert len(_pilots(children)) >= 1, (out.read_text(), err.read_text())
                break
            assert time.monotonic() - started < 120, f"no pilot launched: {out.read_text()} {err.read_text()}"
            time.sleep(0.05)
        run.send_signal(sig)
        signalled = time.monotonic()
        while time.monotonic() - signalled < 10 and run.poll() is None:
            watched.sample()
            time.sleep(0.1)
        code = run.wait(max(0.1, 10 - (time.monotonic() - signalled)))
        time.sleep(max(0.0, 10 - (time.monotonic() - signalled)))
        assert watched.alive() == [], (out.read_text(), err.read_text())
        assert code == 128 + sig.value, err.read_text()
        lines = [line for line in err.read_text().splitlines() if "interrupted by" in line]
        assert len(lines) == 1 and sig.name in lines[0] and "cancelled" in lines[0], err.read_text()
        assert list(tmp_path.glob("pilotfish-pilot-*")) == []
        request = out.read_text().split()[1]
        # The run stopped the embedded server it had started: start it again (its data kept) to ask.
        _python(env, "-c", f"from taskqueues import embedded; embedded.ensure({str(state)!r})")
        status = _python(env, "-m", "matcher.cli", "status", request)
        assert "cancelled" in status.stdout, status.stdout + status.stderr
    finally:
        for process in watched.seen.values():
            try:
                process.kill()
            except psutil.Error:
                continue
        _python(env, "-m", "matcher.cli", "down")


def _python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
