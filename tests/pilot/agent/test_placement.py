"""Where a one-core payload starts (pilot.agent.placement): on the CPU that spawns it while the kernel's own
placement makes the pilot wait, else where the kernel puts it; the payload then runs on every CPU the pilot
may use, and the pilot keeps its own CPUs whatever happens (real spawns; the waits on a given clock)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pilot.agent import placement
from pilot.agent.payload import Payload, spawn_in
from pilot.agent.placement import Placement, spawn_here
from tests.pilot.agent.test_units import _area, _job

ALLOWED = os.sched_getaffinity(0)
several_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: a payload starts on it anyway")


@pytest.fixture(autouse=True)
def _own_cpus_back() -> Iterator[None]:
    yield
    os.sched_setaffinity(0, ALLOWED)


def test_only_a_one_core_payload_is_placed(tmp_path: Path) -> None:
    area, where = _area(tmp_path), Placement()
    one = Payload(_job("true"), area.payload("1", cores=1), log_dir=tmp_path, output_cap=0, placement=where)
    assert one.placement is where
    wide = Payload(_job("true", cpu=2), area.payload("2", cores=2), log_dir=tmp_path, output_cap=0, placement=where)
    assert wide.placement is None, "a two-core payload would start on one CPU, and what it forks at once stay there"


class Waits:
    """The pilot's clock as a placement reads it: each spawn the kernel places lasts ``wait`` seconds."""

    def __init__(self) -> None:
        self.now, self.wait = 0.0, 0.0

    def clock(self) -> float:
        return self.now

    def spawner(self, seen: list[int]) -> Callable[[], int]:
        def spawn() -> int:
            seen.append(len(os.sched_getaffinity(0)))
            self.now += self.wait if len(os.sched_getaffinity(0)) > 1 else 0.0001
            return os.posix_spawn("/bin/true", ["true"], {})

        return spawn


@several_cpus
def test_payloads_start_here_while_the_kernels_placement_makes_the_pilot_wait_and_no_longer() -> None:
    waits = Waits()
    where = Placement(clock=waits.clock)
    seen: list[int] = []
    spawn = waits.spawner(seen)

    def run(times: int) -> None:
        for _ in range(times):
            os.waitpid(where.spawn(spawn), 0)

    waits.wait = 0.00008  # an idle host: the child runs at once
    run(50)
    assert set(seen) == {len(ALLOWED)} and not where.here
    waits.wait = 0.05  # a few stray long waits (a tick, the first spawns) do not turn it
    run(5)
    waits.wait = 0.00008
    run(1)
    assert not where.here
    seen.clear()
    waits.wait = 0.002  # a busy host: every child waits for a CPU
    run(30)
    assert where.here, f"30 long waits in a row: mean {where.mean}"
    turned = seen.index(1)
    run(4 * placement.PROBE)
    busy = seen[turned:]
    probes = [i for i, cpus in enumerate(busy) if cpus > 1]
    assert probes == list(range(placement.PROBE - 1, len(busy), placement.PROBE)), (
        "one spawn in PROBE left to the kernel"
    )
    waits.wait = 0.00008  # quiet again: a few hundred spawns later the kernel places them
    run(40 * placement.PROBE)
    assert not where.here and seen[-5:] == [len(ALLOWED)] * 5


@several_cpus
def test_a_payload_started_here_runs_on_every_cpu_and_the_pilot_keeps_its_own(tmp_path: Path) -> None:
    pids = []
    try:
        for _ in range(20):
            pid = spawn_here(
                lambda: spawn_in(tmp_path, "/bin/sleep", ["sleep", "30"], dict(os.environ), stdout=None, stderr=None)
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
