"""Helpers shared by the pilot tests (this module holds no test): MJF directories, pilot subprocesses,
payload timelines written by the payloads themselves."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from tests.support.paths import ROOT

QUEUE = "site/ce/q1"

# Variables that would make the pilot believe it runs in a batch job or read the test runner's MJF.
_FOREIGN = (
    "SLURM_",
    "SGE_",
    "JOB_ID",
    "NSLOTS",
    "PE_HOSTFILE",
    "MACHINEFEATURES",
    "JOBFEATURES",
    "JOBSTATUS",
    "PILOTFISH_BATCH_ID",
)


def write_features(directory: Path, **values: object) -> Path:
    """An MJF directory: one file per key (None removes the file)."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        path = directory / key
        if value is None:
            path.unlink(missing_ok=True)
        else:
            tmp = directory / f".{key}.tmp"
            tmp.write_text(f"{value}\n")
            tmp.replace(path)
    return directory


def pilot_env(
    tmp_path: Path,
    *,
    cores: int = 2,
    mem: int = 4000,
    disk_gb: float = 10,
    machine: dict[str, object] | None = None,
    job: dict[str, object] | None = None,
    sandbox: str = "none",
) -> dict[str, str]:
    """An environment with our own $MACHINEFEATURES/$JOBFEATURES/$JOBSTATUS and no batch-system variables
    (and the payload sandbox ``sandbox``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    mf = write_features(tmp_path / "mf", hs06=10.0, **(machine or {}))
    jf = write_features(tmp_path / "jf", allocated_CPU=cores, mem_limit_MB=mem, disk_limit_GB=disk_gb, **(job or {}))
    env.update(
        MACHINEFEATURES=str(mf),
        JOBFEATURES=str(jf),
        JOBSTATUS=str(tmp_path / "jobstatus"),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        # The payloads of these tests write what they did (timelines, marks) into the test's directory, which
        # a payload sandbox hides and keeps read-only: they run unconfined. The sandbox has its own tests
        # (tests/pilot/agent/test_sandbox.py, tests/e2e/test_attacks.py).
        PILOTFISH_PAYLOAD_SANDBOX=sandbox,
    )
    return env


def pilot_argv(redis_url: str, workdir: Path, *args: str) -> list[str]:
    """``python -m pilot.agent.command`` on the test queue with its work directory and ``args``."""
    command = [sys.executable, "-m", "pilot.agent.command", "--redis-url", redis_url, "--queue", QUEUE]
    return [*command, "--workdir", str(workdir), *args]


@contextmanager
def running_pilot(
    redis_url: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None, name: str = "pilot"
) -> Iterator[subprocess.Popen[str]]:
    """``python -m pilot.agent.command`` as a real subprocess; killed if still alive when the block ends.

    Its stderr goes to ``tmp_path/<name>.err`` (printed by :func:`finish` on failure).
    """
    env = env if env is not None else pilot_env(tmp_path)
    err = open(tmp_path / f"{name}.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*pilot_argv(redis_url, tmp_path / f"{name}-work"), "-v", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        err.close()


def finish(proc: subprocess.Popen[str], tmp_path: Path, timeout: float, name: str = "pilot") -> str:
    """Wait for a pilot to exit with status 0; returns its stderr (shown in the assertion if it fails)."""
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"pilot did not stop within {timeout} s:\n" + pilot_log(tmp_path, name)) from None
    log = pilot_log(tmp_path, name)
    assert code == 0, f"pilot exited with {code}:\n{log}"
    return log


def kill_with_payloads(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a pilot and its payloads' groups, as a batch system kills a whole job, and wait for the pilot."""
    payloads = psutil.Process(proc.pid).children()
    proc.send_signal(signal.SIGKILL)
    for payload in payloads:
        with contextlib.suppress(ProcessLookupError):  # it may have ended on its own meanwhile
            os.killpg(payload.pid, signal.SIGKILL)
    proc.wait()


def pilot_log(tmp_path: Path, name: str = "pilot") -> str:
    path = tmp_path / f"{name}.err"
    return path.read_text() if path.exists() else ""


def stamped(command: str, timeline: Path, cpu: int) -> str:
    """Wrap ``command`` so the payload itself appends its start and end (with its cores) to ``timeline``."""
    stamp = "date +%s.%N"
    return (
        f'echo "s $({stamp}) $PILOTFISH_JOB_ID {cpu}" >> {timeline}; {command}; '
        f'echo "e $({stamp}) $PILOTFISH_JOB_ID {cpu}" >> {timeline}'
    )


def read_timeline(path: Path) -> list[tuple[float, str, str, int]]:
    """(time, "s"/"e", job id, cores) sorted by time; an end sorts before a start at the same instant."""
    events = []
    for line in path.read_text().splitlines():
        kind, stamp, job, cpu = line.split()
        events.append((float(stamp), kind, job, int(cpu)))
    return sorted(events, key=lambda e: (e[0], e[1] != "e"))


def peak_cores(events: list[tuple[float, str, str, int]]) -> tuple[int, int]:
    """The largest number of cores, and of payloads, in use at once according to a timeline."""
    cores = payloads = best_cores = best_payloads = 0
    for _, kind, _, cpu in events:
        sign = 1 if kind == "s" else -1
        cores += sign * cpu
        payloads += sign
        best_cores, best_payloads = max(best_cores, cores), max(best_payloads, payloads)
    return best_cores, best_payloads
