"""The fan-in bound of a request's ETA (matcher.request_eta): what the request's shape needs on the cores."""

from __future__ import annotations

import random

import pytest

from matcher.request_eta import fan_in_bound, request_eta
from taskqueues import dag
from tests.support import schedules
from tests.support.scripts import script

wl = script("workloads")


def bound(tasks: list[wl.Task], cores: float, cpu: dict[str, int] | None = None) -> float:
    order = [t.name for t in tasks]
    deps = {t.name: t.deps for t in tasks}
    ete = {t.name: t.runtime for t in tasks}
    work = {t.name: t.runtime * (cpu or {}).get(t.name, 1) for t in tasks}
    return fan_in_bound(order, deps, ete, dag.pressures(order, deps, ete), work, cores)


def fan_then_join(width: int, each: float, join: float) -> list[wl.Task]:
    fan = [wl.Task(f"f{i}", "fan", each) for i in range(width)]
    return [*fan, wl.Task("join", "join", join, tuple(t.name for t in fan))]


def test_a_join_waits_for_its_fan_to_run_on_the_cores() -> None:
    # four 10 s jobs then a 5 s join on 2 cores: the join starts at 20 at best, ends at 25 (CP says 15)
    tasks = fan_then_join(4, 10.0, 5.0)
    assert bound(tasks, 2) == 25.0
    assert bound(tasks, 4) == 15.0  # enough cores: the critical path
    assert bound(tasks, 2, cpu={f"f{i}": 2 for i in range(4)}) == 45.0  # 2-core jobs take twice the room


def test_a_chain_needs_its_critical_path() -> None:
    tasks = [wl.Task("a", "k", 3.0), wl.Task("b", "k", 4.0, ("a",)), wl.Task("c", "k", 5.0, ("b",))]
    assert bound(tasks, 1) == 12.0 and bound(tasks, 64) == 12.0


def test_work_reached_through_several_paths_counts_once() -> None:
    # a diamond: d depends on b and c, which both depend on a; d cannot start before a, b and c have run
    tasks = [
        wl.Task("a", "k", 6.0),
        wl.Task("b", "k", 2.0, ("a",)),
        wl.Task("c", "k", 2.0, ("a",)),
        wl.Task("d", "k", 1.0, ("b", "c", "a")),
    ]
    # before d: at least max(a + b, a + c, a + b + c (its direct deps)) = 10 core-s on 1 core
    assert bound(tasks, 1) == 11.0
    assert bound(tasks, 1) <= schedules.optimal_makespan(tasks, 1)


def test_never_above_the_optimum_nor_below_the_critical_path() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        tasks: list[wl.Task] = []
        for i in range(rng.randint(4, 7)):
            deps = tuple(sorted({t.name for t in tasks if rng.random() < 0.4}))
            tasks.append(wl.Task(f"j{i}", "k", float(rng.randint(1, 6)), deps))
        for cores in (1, 2, 3):
            value = bound(tasks, cores)
            assert wl.critical_path(tasks) <= value <= schedules.optimal_makespan(tasks, cores), (seed, cores)
            assert value <= wl.ancestor_bound(tasks, cores) + 1e-9  # a lower bound of the exact ancestor work


def test_on_the_benchmark_s_cybershake_it_sees_the_join() -> None:
    cyber = list(wl.cybershake(random.Random(1), sgts=2, synth=150).tasks)
    value = bound(cyber, 16)
    # ZipSeis waits for 150 seismograms of ~80 s on 16 cores: far above CP and work / cores
    assert value > 1.15 * wl.lower_bound(cyber, 16)
    assert value <= wl.ancestor_bound(cyber, 16)


def test_request_eta_takes_the_largest_need() -> None:
    assert request_eta(100.0, 30.0, 20.0) == 130.0
    assert request_eta(100.0, 30.0, 50.0, 40.0) == 150.0
    assert request_eta(100.0, 30.0, 20.0, 45.5) == pytest.approx(145.5)
