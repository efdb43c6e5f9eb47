"""The pilot's parts on their own: outputs parsing, output tails, the memory watcher on real processes, one
payload run in a real sandbox, the slots, the configuration and the pilot's identity."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pilot.agent.config import Identity, PilotConfig, identity_from_environment
from pilot.agent.guardian import watch
from pilot.agent.memory import over_limit, over_limit_reason, sample_sessions
from pilot.agent.payload import OutputTail, Payload, Stop, _above_own_peak, parse_outputs, parse_value
from pilot.agent.slots import Slots
from pilot.mjf.payload import PayloadArea
from pilot.mjf.source import FeatureReader
from taskqueues.errors import ConfigError
from taskqueues.store.records import Job, JobState
from tests.support.pilots import write_features
from tests.support.polling import wait_until

# -- outputs and tails ---------------------------------------------------------------------------


def test_parse_outputs() -> None:
    text = "A=1\nB = 2.5\n\n# a comment\nC=hello world\nD=1e3\nE=nan\nA=7\nno equals sign\n=novalue\nF=\n"
    assert parse_outputs(text) == {"A": 7, "B": 2.5, "C": "hello world", "D": 1000.0, "E": "nan", "F": ""}


@pytest.mark.parametrize(("text", "value"), [("-3", -3), ("+4", 4), ("0.5", 0.5), ("inf", "inf"), ("x1", "x1")])
def test_parse_value(text: str, value: object) -> None:
    assert parse_value(text) == value
    assert type(parse_value(text)) is type(value)


def test_output_tail_keeps_the_last_bytes() -> None:
    tail = OutputTail(10)
    for i in range(100):
        tail.feed(f"{i:03d}".encode())
    assert tail.data == b"".join(f"{i:03d}".encode() for i in range(100))[-10:]
    assert tail.total == 300 and tail.dropped == 290
    assert OutputTail(0).data == b""


# -- memory watcher --------------------------------------------------------------------------------


def test_over_limit_and_reason() -> None:
    assert not over_limit(549_000_000, 500, 0.10)
    assert over_limit(551_000_000, 500, 0.10)
    assert not over_limit(10**12, 0, 0.10), "a job without a memory requirement is never killed for memory"
    assert over_limit_reason(612_000_000, 500, 0.10) == "memory 612 MB over the limit 500 MB (+10%)"


def test_sample_sums_the_whole_session(tmp_path: Path) -> None:
    """Two python processes of 100 MB each, one in the background, in one new session."""
    hold = (
        f'{sys.executable} -c \'b = bytearray(100 * 10**6); b[::4096] = b"x" * len(b[::4096]); '
        f'open("{tmp_path}/r" + str(__import__("os").getpid()), "w").close(); __import__("time").sleep(30)\''
    )
    proc = subprocess.Popen(["/bin/sh", "-c", f"{hold} & {hold}; wait"], start_new_session=True)
    try:
        wait_until(lambda: len(list(tmp_path.glob("r*"))) == 2, timeout=10, what="both processes to hold their memory")
        samples = sample_sessions({proc.pid})
        sample = samples[proc.pid]
        assert sample.processes == 3
        assert sample.rss > 200 * 10**6
        assert sample_sessions({proc.pid + 10**7}) == {}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- one payload -------------------------------------------------------------------------------------


def _job(command: str, *, cpu: int = 1, mem: int = 0, attempt: int = 1) -> Job:
    return Job(
        id="17",
        state=JobState.MATCHED,
        attempt=attempt,
        tq_id="tq",
        command=command,
        requirements={"cpu": cpu, "mem": mem},
        score=0.0,
        ete=0.0,
        submitted=time.time(),
    )


def _area(tmp_path: Path) -> PayloadArea:
    mf = write_features(tmp_path / "mf", hs06=10.0)
    jf = write_features(tmp_path / "jf", allocated_CPU=4, mem_limit_MB=8000)
    features = FeatureReader(str(mf), str(jf), env={}, workdir=tmp_path).load()
    return PayloadArea(tmp_path / "area", features)


def _run(payload: Payload, timeout: float = 20) -> None:
    """Drive one payload the way the loop does: read its pipes until its pidfd says it exited."""
    import selectors

    with selectors.DefaultSelector() as selector:
        assert payload.pidfd is not None, "this kernel has pidfds (Linux >= 5.3)"
        selector.register(payload.pidfd, selectors.EVENT_READ, "exit")
        for fd in payload.open_pipes:
            selector.register(fd, selectors.EVENT_READ, "out")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for key, _ in selector.select(0.5):
                if key.data == "exit":
                    for fd in payload.open_pipes:
                        selector.unregister(fd)
                    selector.unregister(key.fd)
                    payload.reap()
                    return
                if key.fd in payload.open_pipes:
                    payload.read(key.fd, selector.unregister)
        raise AssertionError("payload did not end")


def test_payload_environment_exit_and_logs(tmp_path: Path) -> None:
    area = _area(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    sandbox = area.payload("17.1", cores=2, mem_MB=300)
    command = (
        'echo "$PILOTFISH_JOB_ID $PILOTFISH_ATTEMPT $PILOTFISH_CPU $PILOTFISH_MEM $(pwd)"; '
        'echo oops >&2; echo X=1 > "$PILOTFISH_OUTPUTS"; exit 3'
    )
    payload = Payload(_job(command, cpu=2, mem=300), sandbox, log_dir=logs, output_cap=1024)
    payload.spawn(sandbox.env())
    _run(payload)
    result = payload.result()
    assert result.exit_code == 3
    assert result.reason == f"exit code 3 (stderr: {logs / '17.1.err'})"
    assert result.outputs == {}, "outputs are only read after a success"
    job_id, attempt, cpu, mem, cwd = (logs / "17.1.out").read_text().split()
    assert (job_id, attempt, cpu, mem) == ("17", "1", "2", "300")
    assert cwd == str(sandbox.root / "work")
    assert (logs / "17.1.err").read_text() == "oops\n"
    payload.close()
    sandbox.cleanup()
    assert not sandbox.outputs.exists() and list(sandbox.workdir.iterdir()) == []
    area.close()
    assert not sandbox.root.exists()


def test_payload_output_is_capped(tmp_path: Path) -> None:
    area = _area(tmp_path)
    sandbox = area.payload("17.1", cores=1)
    command = f"{sys.executable} -c 'import sys; [sys.stdout.write(f\"{{i:09d}}\\n\") for i in range(20000)]'"
    payload = Payload(_job(command), sandbox, log_dir=tmp_path, output_cap=1000)
    payload.spawn(sandbox.env())
    _run(payload)
    assert payload.result().exit_code == 0
    text = (tmp_path / "17.1.out").read_text()
    header, rest = text.split("\n", 1)
    assert header == "[pilotfish: 199000 earlier bytes dropped]"
    assert rest == "".join(f"{i:09d}\n" for i in range(19900, 20000))
    sandbox.cleanup()


def test_terminated_payload_and_leftover_processes(tmp_path: Path) -> None:
    """A payload stopped by the pilot reports the pilot's reason; background processes die with it."""
    area = _area(tmp_path)
    sandbox = area.payload("17.1", cores=1)
    pidfile = tmp_path / "bg"
    payload = Payload(_job(f"sleep 60 & echo $! > {pidfile}; sleep 60"), sandbox, log_dir=tmp_path, output_cap=0)
    payload.spawn(sandbox.env())
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=10, what="the background pid")
    background = int(pidfile.read_text())
    payload.terminate(Stop("killed by operator", "fail"), grace=5)
    _run(payload)
    result = payload.result()
    assert result.exit_code is None and result.reason == "killed by operator"

    def gone() -> bool:
        try:
            return psutil.Process(background).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(gone, timeout=5, what="the background process to die")
    sandbox.cleanup()


def test_signal_reason(tmp_path: Path) -> None:
    area = _area(tmp_path)
    sandbox = area.payload("17.1", cores=1)
    payload = Payload(_job("kill -9 $$"), sandbox, log_dir=tmp_path, output_cap=64)
    payload.spawn(sandbox.env())
    _run(payload)
    assert payload.result().reason == "killed by signal 9 (SIGKILL)"
    sandbox.cleanup()


# -- slots -----------------------------------------------------------------------------------------------


def test_slots_offer_only_what_is_neither_used_nor_reserved(tmp_path: Path) -> None:
    slots = Slots()
    slots.size(4, 8000, 0)
    sandbox = _area(tmp_path).payload("17.1", cores=3, mem_MB=5000)
    slots.running["17"] = Payload(_job("true", cpu=3, mem=5000), sandbox, log_dir=tmp_path, output_cap=0)
    assert (slots.used(), slots.free()) == ((3, 5000, 0), (1, 3000, 0))
    slots.reserve((1, 3000, 0))  # an offer on its way: its reply may bring jobs for all of it
    assert slots.free() == (0, 0, 0) and not slots.fits(_job("true", cpu=1, mem=1))
    slots.unreserve((1, 3000, 0))
    assert slots.fits(_job("true", cpu=1, mem=3000)) and not slots.fits(_job("true", cpu=1, mem=3001))
    assert not slots.fits(_job("true", cpu=2, mem=0)), "never overcommit"


# -- configuration and identity ----------------------------------------------------------------------


def test_config_defaults_and_errors(tmp_path: Path) -> None:
    config = PilotConfig(queue="s/c/q", workdir=tmp_path, lease=30)
    assert config.heartbeat == 10
    assert config.logs == tmp_path / "logs"
    with pytest.raises(ConfigError) as info:
        PilotConfig(queue="", cores=0, heartbeat_interval=90, lease=60, mem_tolerance=-1)
    message = str(info.value)
    for part in ("queue must name", "cores must be positive", "heartbeat_interval 90", "mem_tolerance"):
        assert part in message


def test_identity_from_environment() -> None:
    assert identity_from_environment({"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n07"}) == Identity("slurm", "77", "n07")
    assert (
        identity_from_environment({"JOB_ID": "5", "SGE_TASK_ID": "3", "NSLOTS": "2", "HOSTNAME": "w1.x"}).name
        == "sge-5.3@w1"
    )
    assert identity_from_environment({"PILOTFISH_BATCH_ID": "local-10-2"}).batch_id == "10-2"
    pod = {"PILOTFISH_POD_NAME": "pf-pilot-7c9-x2", "PILOTFISH_NODE_NAME": "node-3"}
    assert identity_from_environment(pod).name == "k8s-pf-pilot-7c9-x2@node-3"
    assert identity_from_environment({**pod, "PILOTFISH_BATCH_ID": "local-10-2"}).batch == "local"
    local = identity_from_environment({})
    assert local.batch == "local" and local.batch_id == str(os.getpid())
    assert json.dumps(local.name).count("@") == 1


def test_guardian_follows_starts_and_reaps_until_the_pilot_hangs_up() -> None:
    read, write = os.pipe()
    os.write(write, b"+101\n+102\n-101\n+10")  # a line may arrive in two pieces
    os.write(write, b"3\n-999\n")
    os.close(write)  # the pilot is gone
    assert watch(read, drain=0.01) == ({102, 103}, False)
    os.close(read)
    read, write = os.pipe()
    os.write(write, b"+7\n-7\n=\n")  # it ended normally: its scratch directory is its own to remove
    os.close(write)
    assert watch(read, drain=0.01) == (set(), True)
    os.close(read)


# A pilot (a real Python process) whose guardian was killed on its own, killed by SIGKILL as soon as the new
# guardian's process exists: `subprocess.Popen` is wrapped only to kill the pilot at that exact moment (the
# window a loaded host opened once in a whole-suite run); everything else is real.
_KILLED_AT_REVIVE = """
import os, signal, subprocess, sys
from pilot.agent.guardian import Guardian
quiet = subprocess.DEVNULL
payload = subprocess.Popen(["sleep", "30"], start_new_session=True, stdout=quiet, stderr=quiet)
print(payload.pid, flush=True)
guardian = Guardian()
guardian.started(payload.pid)
guardian.process.kill()
guardian.process.wait()
real = subprocess.Popen
def dying(*args, **kwargs):
    started = real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
    return started
subprocess.Popen = dying
guardian.revive()
"""


def test_a_pilot_killed_as_its_new_guardian_starts_still_has_its_payloads_killed() -> None:
    """The payloads a replaced guardian must watch are in its pipe before its process exists, so a pilot
    SIGKILLed right after the spawn (before it could write another line) still takes them with it."""
    pilot = subprocess.run([sys.executable, "-c", _KILLED_AT_REVIVE], capture_output=True, text=True, timeout=60)
    assert pilot.returncode == -signal.SIGKILL, pilot.stderr
    payload = int(pilot.stdout.split()[0])
    try:
        wait_until(
            lambda: not psutil.pid_exists(payload) or psutil.Process(payload).status() == psutil.STATUS_ZOMBIE,
            timeout=10,
            what="the payload killed by the new guardian",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(payload, signal.SIGKILL)


def test_a_payloads_peak_counts_only_above_the_pilots_own_whatever_the_pilot_grew_to() -> None:
    """Every payload's ru_maxrss carries the pilot's peak at its spawn; the pilot's peak is kept between reads
    and must not make a value between the kept and the real peak look like the payload's."""

    def own_peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    assert not _above_own_peak(own_peak())
    assert _above_own_peak(own_peak() + 4096)
    before = own_peak()
    grown = bytearray(64 * 1024 * 1024)  # touched: the peak grows by about that much
    grown[::4096] = b"x" * len(grown[::4096])
    assert own_peak() > before + 32 * 1024 * 1024
    assert not _above_own_peak(before + 16 * 1024 * 1024), "between the kept peak and the pilot's real one"
    assert _above_own_peak(own_peak() + 4096)
    del grown
