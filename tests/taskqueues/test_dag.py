"""DAG algebra: checks, topological order, pressure, critical path, incremental damped propagation."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskqueues.dag import (
    DagError,
    check_dag,
    critical_path,
    dependents_of,
    index_dag,
    pressures,
    propagate_pressure,
)
from taskqueues.errors import ValidationError

# a -> (b, c) -> d : d depends on b and c, which both depend on a.
DIAMOND_NODES = ["a", "b", "c", "d"]
DIAMOND = {"b": ["a"], "c": ["a"], "d": ["b", "c"]}


def dag_error(nodes: list[str], deps: dict[str, list[str]]) -> DagError:
    with pytest.raises(DagError) as info:
        check_dag(nodes, deps)
    return info.value


# -------------------------------------------------------------------------------------- check_dag


def test_diamond_order_puts_dependencies_first() -> None:
    assert check_dag(DIAMOND_NODES, DIAMOND) == ["a", "b", "c", "d"]


def test_order_is_stable_in_input_order() -> None:
    assert check_dag(["z", "y", "x"], {}) == ["z", "y", "x"]
    assert check_dag(["d", "c", "b", "a"], DIAMOND) == ["a", "c", "b", "d"]


def test_long_chain_needs_no_recursion() -> None:
    nodes = [f"j{i}" for i in range(20_000)]
    deps = {f"j{i}": [f"j{i - 1}"] for i in range(1, 20_000)}
    assert check_dag(reversed(nodes), deps) == nodes


def test_duplicate_edges_are_one_edge() -> None:
    assert check_dag(["a", "b"], {"b": ["a", "a"]}) == ["a", "b"]
    assert dependents_of(["a", "b"], {"b": ["a", "a"]}) == {"a": ["b"], "b": []}


def test_cycle_lists_its_path() -> None:
    error = dag_error(["a", "b", "c", "d"], {"a": ["c"], "b": ["a"], "c": ["b"], "d": ["c"]})
    assert len(error.problems) == 1
    (problem,) = error.problems
    job, path_text = problem.split(", field 'deps': cycle: ")
    path = path_text.split(" -> ")
    assert job == f"job {path[0]!r}"
    assert path[0] == path[-1]
    assert set(path) == {"a", "b", "c"}  # d is blocked behind the cycle, not on it
    deps = {"a": ["c"], "b": ["a"], "c": ["b"]}
    for job, nxt in itertools.pairwise(path):
        assert nxt in deps[job]


def test_self_dependency_and_two_separate_cycles_all_reported() -> None:
    error = dag_error(["a", "b", "c", "x"], {"a": ["a"], "b": ["c"], "c": ["b"]})
    assert "job 'a', field 'deps': cycle: a -> a" in error.problems
    assert any(
        problem in error.problems
        for problem in ("job 'b', field 'deps': cycle: b -> c -> b", "job 'c', field 'deps': cycle: c -> b -> c")
    )
    assert len(error.problems) == 2


def test_unknown_and_duplicate_jobs_all_reported_with_names() -> None:
    error = dag_error(["a", "b", "a"], {"b": ["a", "ghost"], "phantom": ["a"]})
    assert error.problems == [
        "job 'a', field 'name': more than one job has this name",
        "job 'b', field 'deps': depends on unknown job 'ghost'",
        "job 'phantom', field 'deps': dependencies given for a job that is not in the graph",
    ]
    assert str(error) == "bad dependency graph: " + "; ".join(error.problems)
    assert isinstance(error, ValidationError)


# -------------------------------------------------------------------------------------- pressure


def test_chain_pressure_accumulates_towards_sources() -> None:
    order = check_dag(["a", "b", "c"], {"b": ["a"], "c": ["b"]})
    assert pressures(order, {"b": ["a"], "c": ["b"]}, {"a": 1, "b": 2, "c": 3}) == {"a": 6, "b": 5, "c": 3}


def test_diamond_pressure_takes_the_longer_branch() -> None:
    ete = {"a": 1.0, "b": 10.0, "c": 2.0, "d": 5.0}
    pressure = pressures(check_dag(DIAMOND_NODES, DIAMOND), DIAMOND, ete)
    assert pressure == {"a": 16.0, "b": 15.0, "c": 7.0, "d": 5.0}
    assert critical_path(DIAMOND_NODES, DIAMOND, ete) == (16.0, ["a", "b", "d"])


def test_fan_out_and_several_sinks() -> None:
    # root fans out to 3 leaves (each a sink); a separate short chain x -> y is its own component.
    nodes = ["root", "l1", "l2", "l3", "x", "y"]
    deps = {"l1": ["root"], "l2": ["root"], "l3": ["root"], "y": ["x"]}
    ete = {"root": 2, "l1": 1, "l2": 7, "l3": 3, "x": 1, "y": 1}
    pressure = pressures(check_dag(nodes, deps), deps, ete)
    assert pressure == {"root": 9, "l1": 1, "l2": 7, "l3": 3, "x": 2, "y": 1}
    assert critical_path(nodes, deps, ete) == (9, ["root", "l2"])


def test_fan_in() -> None:
    nodes = ["s1", "s2", "s3", "merge"]
    deps = {"merge": ["s1", "s2", "s3"]}
    ete = {"s1": 4, "s2": 1, "s3": 4, "merge": 2}
    assert pressures(nodes, deps, ete) == {"s1": 6, "s2": 3, "s3": 6, "merge": 2}
    # tie between s1 and s3: the one listed first wins, so the answer is stable
    assert critical_path(nodes, deps, ete) == (6, ["s1", "merge"])


def test_critical_path_of_empty_graph() -> None:
    assert critical_path([], {}, {}) == (0.0, [])


def test_missing_or_bad_ete_names_the_job() -> None:
    with pytest.raises(ValidationError, match=r"job 'b'.*no run-time estimate"):
        pressures(["a", "b"], {"b": ["a"]}, {"a": 1})
    with pytest.raises(ValidationError, match=r"job 'a'.*finite and >= 0"):
        pressures(["a"], {}, {"a": -1})
    with pytest.raises(ValidationError, match=r"job 'a'.*finite and >= 0"):
        pressures(["a"], {}, {"a": float("nan")})


# ----------------------------------------------------------------------------- incremental updates


def test_propagation_without_damping_is_exact_and_touches_only_ancestors() -> None:
    order = check_dag(DIAMOND_NODES, DIAMOND)
    ete = {"a": 1.0, "b": 10.0, "c": 2.0, "d": 5.0}
    pressure = pressures(order, DIAMOND, ete)
    changed = propagate_pressure(index_dag(order, DIAMOND), ete, pressure, {"c": 20.0}, damping=0)
    assert changed == ["c", "a"]  # nearest the targets first; b and d are not ancestors of c
    assert ete["c"] == 20.0
    assert pressure == pressures(order, DIAMOND, ete) == {"a": 26.0, "b": 15.0, "c": 25.0, "d": 5.0}


def test_damping_drops_small_growth_and_propagates_large_growth() -> None:
    deps = {"b": ["a"], "c": ["b"]}
    order = check_dag(["a", "b", "c"], deps)
    index = index_dag(order, deps)
    ete = {"a": 10.0, "b": 10.0, "c": 100.0}
    pressure = pressures(order, deps, ete)  # a 120, b 110, c 100
    assert propagate_pressure(index, ete, pressure, {"c": 109.0}) == []  # +9 %: dropped
    assert pressure == {"a": 120.0, "b": 110.0, "c": 100.0}
    assert ete["c"] == 109.0  # the estimate itself is kept
    # +15 % over the *stored* 100, not over the 109 seen last time: small steps cannot creep past damping
    assert propagate_pressure(index, ete, pressure, {"c": 115.0}) == ["c", "b", "a"]
    assert pressure == {"a": 135.0, "b": 125.0, "c": 115.0}
    # +4 % over the stored 115: dropped again
    assert propagate_pressure(index, ete, pressure, {"c": 120.0}) == []


def test_damping_stops_part_way_up() -> None:
    deps = {"b": ["a"], "c": ["b"]}
    order = check_dag(["a", "b", "c"], deps)
    ete = {"a": 1000.0, "b": 10.0, "c": 10.0}
    pressure = pressures(order, deps, ete)  # a 1020, b 20, c 10
    changed = propagate_pressure(index_dag(order, deps), ete, pressure, {"c": 30.0})
    assert changed == ["c", "b"]  # b: 20 -> 40, a: 1020 -> 1040 is under 10 %: stops there
    assert pressure == {"a": 1020.0, "b": 40.0, "c": 30.0}


def test_shrinks_are_damped_and_propagated_the_same_way() -> None:
    deps = {"b": ["a"], "c": ["b"]}
    order = check_dag(["a", "b", "c"], deps)
    index = index_dag(order, deps)
    ete = {"a": 10.0, "b": 10.0, "c": 100.0}
    pressure = pressures(order, deps, ete)
    assert propagate_pressure(index, ete, pressure, {"c": 95.0}) == []  # -5 %: dropped
    assert pressure["a"] == 120.0
    assert propagate_pressure(index, ete, pressure, {"c": 50.0}) == ["c", "b", "a"]
    assert pressure == {"a": 70.0, "b": 60.0, "c": 50.0}


def test_each_job_is_visited_once_in_a_diamond() -> None:
    # Both b and c change; a must be settled after both, once.
    order = check_dag(DIAMOND_NODES, DIAMOND)
    ete = {"a": 1.0, "b": 10.0, "c": 2.0, "d": 5.0}
    pressure = pressures(order, DIAMOND, ete)
    changed = propagate_pressure(index_dag(order, DIAMOND), ete, pressure, {"b": 30.0, "c": 40.0}, damping=0)
    assert changed == ["c", "b", "a"]
    assert pressure["a"] == 46.0


def test_work_is_proportional_to_what_changes() -> None:
    # A wide fan (one source, 10,000 sinks): a change to one sink visits that sink and the source only.
    sinks = [f"s{i}" for i in range(10_000)]
    deps = {sink: ["src"] for sink in sinks}
    order = check_dag(["src", *sinks], deps)
    index = index_dag(order, deps)
    ete = {job: 1.0 for job in order}
    pressure = pressures(order, deps, ete)

    class CountingDict(dict[str, float]):
        reads = 0

        def __getitem__(self, key: str) -> float:
            CountingDict.reads += 1
            return super().__getitem__(key)

    counted = CountingDict(pressure)
    changed = propagate_pressure(index, ete, counted, {"s7": 5.0})
    assert changed == ["s7", "src"]
    # src reads its 10,000 dependents once (its own edges); no other job is touched
    assert CountingDict.reads == 10_000


def test_unknown_job_and_bad_values_refused() -> None:
    order = check_dag(["a"], {})
    index = index_dag(order, {})
    with pytest.raises(ValidationError, match="job 'zz'"):
        propagate_pressure(index, {"a": 1.0}, {"a": 1.0}, {"zz": 1.0})
    with pytest.raises(ValidationError, match=r"job 'a'.*finite"):
        propagate_pressure(index, {"a": 1.0}, {"a": 1.0}, {"a": -3.0})
    with pytest.raises(ValidationError, match="damping"):
        propagate_pressure(index, {"a": 1.0}, {"a": 1.0}, {"a": 3.0}, damping=-1)


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]], dict[str, float]]:
    size = draw(st.integers(1, 25))
    nodes = [f"n{i}" for i in range(size)]
    deps: dict[str, list[str]] = {}
    for i in range(1, size):
        chosen = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
        if chosen:
            deps[nodes[i]] = [nodes[j] for j in chosen]
    ete = {node: draw(st.floats(0, 1000)) for node in nodes}
    return nodes, deps, ete


def _height(order: list[str], deps: dict[str, list[str]]) -> dict[str, int]:
    dependents = dependents_of(order, deps)
    height: dict[str, int] = {}
    for job in reversed(order):
        height[job] = 1 + max((height[d] for d in dependents[job]), default=0)
    return height


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.randoms(use_true_random=False), st.sampled_from([0.0, 0.1]))
def test_incremental_matches_the_bound_after_many_updates(
    dag: tuple[list[str], dict[str, list[str]], dict[str, float]], rnd: random.Random, damping: float
) -> None:
    nodes, deps, ete = dag
    order = check_dag(nodes, deps)
    index = index_dag(order, deps)
    pressure = pressures(order, deps, ete)
    for _ in range(10):
        batch = {rnd.choice(nodes): rnd.uniform(0, 1000) for _ in range(rnd.randint(1, 3))}
        propagate_pressure(index, ete, pressure, batch, damping=damping)
    exact = pressures(order, deps, ete)
    height = _height(order, deps)
    for job in order:
        bound = (1 + damping) ** height[job]
        assert exact[job] / bound - 1e-6 <= pressure[job] <= exact[job] * bound + 1e-6, job
