"""One contract every backend must keep, run against local processes, the real Slurm and the real Grid Engine.

The huey idea: the same test code, one harness per backend. A harness knows how to build its backend,
how many CPUs its node has (to fill it so that a pilot stays queued) and how to kill a pilot the way the
batch system would (``kill -9``, ``scancel``, ``qdel`` from outside the backend). Each test file
subclasses :class:`BackendContract` and provides the ``harness`` fixture; a harness for a batch system
that is not up skips with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pilot.backends import Backend, PilotRequest, PilotState, PilotStatus
from taskqueues.shapes import Shape
from tests.support.paths import ROOT
from tests.support.polling import wait_until

SMALL = Shape("small", cpu=1, mem=256)


@dataclass
class Harness:
    """How the contract drives one backend kind."""

    kind: str
    make: Callable[[float], Backend]  # poll_interval -> backend
    kill: Callable[[Backend, str], None]  # kill a running pilot from outside the backend
    node_cpus: int
    polls: Callable[[Backend], int] | None  # batch-system state queries made so far; None: no batch system


def wait_states(
    backend: Backend,
    ids: Sequence[str],
    done: Callable[[dict[str, PilotStatus]], bool],
    timeout: float = 60.0,
) -> dict[str, PilotStatus]:
    """Ask ``states`` until ``done`` holds; fail with the last answer after ``timeout`` seconds."""
    last: dict[str, PilotStatus] = {}

    def settled() -> dict[str, PilotStatus] | None:
        last.update(backend.states(ids))
        return dict(last) if done(last) else None

    settled_states: dict[str, PilotStatus] = wait_until(
        settled, timeout=timeout, interval=0.2, what=lambda: f"states to settle: {last}"
    )
    return settled_states


def all_final(states: dict[str, PilotStatus]) -> bool:
    return all(s.state.final for s in states.values())


class BackendContract:
    """The behaviour shared by every backend. Subclasses provide the ``harness`` fixture."""

    @pytest.fixture
    def backend(self, harness: Harness) -> Iterator[Backend]:
        backend = harness.make(0.2)
        submitted: list[str] = []
        original = backend.submit

        def tracking_submit(request: PilotRequest) -> str:
            batch_id = original(request)
            submitted.append(batch_id)
            return batch_id

        backend.submit = tracking_submit  # type: ignore[method-assign]
        yield backend
        backend.cancel(submitted)  # leave nothing running on the shared batch system
        backend.close()

    def request(
        self,
        tmp_path: Path,
        name: str,
        command: list[str],
        *,
        shape: Shape = SMALL,
        env: dict[str, str] | None = None,
    ) -> PilotRequest:
        return PilotRequest(
            name=name, command=command, shape=shape, wall=600, env=env or {}, log_dir=str(tmp_path / "logs")
        )

    def test_done_runs_the_command_with_its_environment(self, backend: Backend, tmp_path: Path) -> None:
        out = tmp_path / "out.txt"
        value = "commas, spaces and 'quotes' = $NOT_EXPANDED"
        script = f'printf "%s|%s" "$PF_VALUE" "$PF_OTHER" > {out}; echo to-stdout'
        batch_id = backend.submit(
            self.request(tmp_path, "done", ["/bin/sh", "-c", script], env={"PF_VALUE": value, "PF_OTHER": "2"})
        )
        status = wait_states(backend, [batch_id], all_final)[batch_id]
        assert status.state is PilotState.DONE, status
        assert status.exit_code == 0
        assert out.read_text() == f"{value}|2"
        logs = list((tmp_path / "logs").glob("*.out"))
        assert any("to-stdout" in log.read_text() for log in logs), logs

    def test_exit_code_3_is_failed_with_the_code(self, backend: Backend, tmp_path: Path) -> None:
        batch_id = backend.submit(self.request(tmp_path, "three", ["/bin/sh", "-c", "exit 3"]))
        status = wait_states(backend, [batch_id], all_final)[batch_id]
        assert status.state is PilotState.FAILED, status
        assert status.exit_code == 3

    def test_cancel_a_queued_pilot(self, backend: Backend, harness: Harness, tmp_path: Path) -> None:
        full = Shape("full", cpu=harness.node_cpus, mem=512)
        blocker = backend.submit(self.request(tmp_path, "blocker", ["sleep", "300"], shape=full))
        wait_states(backend, [blocker], lambda s: s[blocker].state is PilotState.RUNNING)
        marker = tmp_path / "ran"
        queued = backend.submit(self.request(tmp_path, "queued", ["/bin/sh", "-c", f"touch {marker}"]))
        time.sleep(1.5)  # give the batch system every chance to start it if it wrongly could
        assert backend.states([queued])[queued].state is PilotState.QUEUED
        backend.cancel([queued])
        status = wait_states(backend, [queued], all_final)[queued]
        assert status.state is PilotState.CANCELLED, status
        assert not marker.exists(), "a cancelled queued pilot ran"
        backend.cancel([blocker])
        assert wait_states(backend, [blocker], all_final)[blocker].state is PilotState.CANCELLED

    def test_kill_from_the_batch_system_is_lost_not_failed(
        self, backend: Backend, harness: Harness, tmp_path: Path
    ) -> None:
        batch_id = backend.submit(self.request(tmp_path, "victim", ["sleep", "300"]))
        wait_states(backend, [batch_id], lambda s: s[batch_id].state is PilotState.RUNNING)
        harness.kill(backend, batch_id)
        status = wait_states(backend, [batch_id], all_final)[batch_id]
        assert status.state is PilotState.LOST, status
        assert status.exit_code is None

    def test_states_of_many_ids_in_one_query(self, backend: Backend, harness: Harness, tmp_path: Path) -> None:
        ids = [backend.submit(self.request(tmp_path, f"many{i}", ["/bin/sh", "-c", f"exit {i}"])) for i in range(5)]
        answer = wait_states(backend, ids, all_final)
        assert [answer[i].exit_code for i in ids] == [0, 1, 2, 3, 4]
        assert [answer[i].state for i in ids] == [PilotState.DONE] + [PilotState.FAILED] * 4
        if harness.polls is not None:
            fresh = harness.make(0.0)
            before = harness.polls(fresh)
            again = fresh.states(ids)
            assert harness.polls(fresh) == before + 1, "one states() call must be one batch-system query"
            assert {i: s.state for i, s in again.items()} == {i: s.state for i, s in answer.items()}

    def test_states_poll_no_faster_than_poll_interval(self, harness: Harness, tmp_path: Path) -> None:
        if harness.polls is None:
            pytest.skip(f"{harness.kind} answers from its own memory: there is no batch system to spare")
        backend = harness.make(1.5)
        batch_id = backend.submit(self.request(tmp_path, "cached", ["sleep", "300"]))
        try:
            first = backend.states([batch_id])
            assert harness.polls(backend) == 1
            for _ in range(5):
                assert backend.states([batch_id]) == first
            assert harness.polls(backend) == 1, "states() polled inside poll_interval"
            time.sleep(1.6)
            backend.states([batch_id])
            assert harness.polls(backend) == 2
        finally:
            backend.cancel([batch_id])

    def test_unknown_and_cancelled_ids_are_harmless(self, backend: Backend, tmp_path: Path) -> None:
        batch_id = backend.submit(self.request(tmp_path, "quick", ["true"]))
        wait_states(backend, [batch_id], all_final)
        backend.cancel([batch_id])  # already finished: not an error
        assert backend.states([batch_id])[batch_id].state is PilotState.DONE


def system_env(kind: str) -> dict[str, str]:
    """The environment ``scripts/<kind>.sh up`` exported, or skip the test saying how to bring it up.

    Both the env file and ``scripts/<kind>.sh status`` must agree that the system is up: a stale env
    file left by a machine restart must skip, not fail every test with a timeout.
    """
    import os
    import subprocess

    default = {"slurm": "/var/tmp/pilotfish-slurm", "sge": "/var/tmp/pilotfish-sge"}[kind]
    directory = Path(os.environ.get(f"PILOTFISH_{kind.upper()}_DIR", default))
    env_file = directory / "env"
    if not env_file.is_file():
        pytest.skip(f"{kind} is not up ({env_file} missing): run `bash scripts/{kind}.sh up` as root")
    script = ROOT / "scripts" / f"{kind}.sh"
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, timeout=60, check=False)
    if status.returncode != 0:
        pytest.skip(f"{kind} is not usable: {(status.stdout + status.stderr).strip()}")
    values: dict[str, str] = {}
    for line in env_file.read_text().splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values
