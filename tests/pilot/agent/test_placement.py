"""Where a payload starts (pilot.agent.payload.spawn_here): a one-core payload on the CPU that spawns it, then
free to run on every CPU the pilot may use; the pilot keeps its own CPUs whatever happens (real spawns)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pilot.agent.payload import Payload, spawn_here, spawn_in
from tests.pilot.agent.test_units import _area, _job

ALLOWED = os.sched_getaffinity(0)
several_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: a payload starts on it anyway")


@pytest.fixture(autouse=True)
def _own_cpus_back() -> Iterator[None]:
    yield
    os.sched_setaffinity(0, ALLOWED)


def test_only_a_one_core_payload_starts_on_the_pilots_cpu(tmp_path: Path) -> None:
    area = _area(tmp_path)
    assert Payload(_job("true"), area.payload("1", cores=1), log_dir=tmp_path, output_cap=0).starts_here
    wide = Payload(_job("true", cpu=2), area.payload("2", cores=2), log_dir=tmp_path, output_cap=0)
    assert not wide.starts_here, "a two-core payload would start on one CPU, and what it forks at once stay there"


@several_cpus
def test_a_payload_started_here_runs_on_every_cpu_and_the_pilot_keeps_its_own(tmp_path: Path) -> None:
    pids = []
    try:
        for _ in range(20):
            pid = spawn_in(
                tmp_path, "/bin/sleep", ["sleep", "30"], dict(os.environ), stdout=None, stderr=None, here=True
            )
            pids.append(pid)
            assert os.sched_getaffinity(pid) == ALLOWED
            assert os.sched_getaffinity(0) == ALLOWED
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


@several_cpus
def test_the_pilot_gets_its_cpus_back_when_the_spawn_fails() -> None:
    seen: list[set[int]] = []

    def failing() -> int:
        seen.append(os.sched_getaffinity(0))
        raise FileNotFoundError("no such program")

    with pytest.raises(FileNotFoundError):
        spawn_here(failing)
    assert len(seen[0]) == 1, "the spawn ran on one CPU"
    assert os.sched_getaffinity(0) == ALLOWED


@several_cpus
def test_a_pilot_given_one_cpu_spawns_there_and_keeps_it() -> None:
    one = {min(ALLOWED)}
    os.sched_setaffinity(0, one)
    seen: list[set[int]] = []

    def spawn() -> int:
        seen.append(os.sched_getaffinity(0))
        return os.posix_spawn("/bin/true", ["true"], {})

    pid = spawn_here(spawn)
    os.waitpid(pid, 0)
    assert seen == [one] and os.sched_getaffinity(0) == one, "a pilot bound to one CPU is never widened"
