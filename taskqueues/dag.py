"""The dependency graph of a request: checks, topological order, pressure and the critical path.

Vocabulary. ``deps[j]`` are the jobs ``j`` depends on (they must finish before ``j`` starts); the
*dependents* of ``j`` are the jobs that depend on ``j``. The *sinks* are the jobs nothing depends on:
the request's final targets.

Pressure (open-lmake): the time still needed, along the critical path, from the start of a job to the
final targets, counting the job itself::

    pressure(j) = ete(j) + max(pressure(d) for d in dependents(j))      (0 for the max when j is a sink)

A job's score in its task queue is ``ETA(request) - pressure(job)``: the higher the pressure, the
earlier the job should start, so the critical path runs first and the request finishes soonest.

Incremental updates. When run-time estimates change (a job finished and its rule's mean moved), only
the ancestors of the changed jobs can change pressure. :func:`propagate_pressure` visits exactly those
that do change, nearest to the targets first so each is visited once, and applies open-lmake's damping:
a new pressure is written and propagated only when it differs from the stored one by more than
``damping`` (10 %). We damp *both ways*: a pressure that grows by more than 10 % or shrinks to less
than 1/1.1 of the stored value is rewritten and propagated; smaller moves are dropped and the stored
value stays. Dropping shrinks too keeps a long workflow from rewriting thousands of scores for a few
seconds of noise, and propagating large shrinks keeps a job from staying urgent forever after its
estimate collapsed. The price is a bounded error: every stored pressure stays within a factor
``(1 + damping) ** h`` of the exact one, ``h`` being the number of jobs on the longest path from it to
a target (tested). A full :func:`pressures` recomputation (the periodic re-pressure) resets it to exact.

Everything here is pure Python over mappings, so the store can feed it from Redis and write back only
what changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from taskqueues.errors import ProblemList, ValidationError, located, shown

__all__ = [
    "DAMPING",
    "DagError",
    "DagIndex",
    "check_dag",
    "critical_path",
    "dependents_of",
    "index_dag",
    "pressures",
    "propagate_pressure",
]

DAMPING = 0.10
_CYCLE_SHOWN = 10


class DagError(ProblemList):
    """The graph is not a DAG of known, unique jobs. ``problems`` lists every one, each naming its job and field."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("bad dependency graph", problems)


def check_dag(nodes: Iterable[str], deps: Mapping[str, Iterable[str]]) -> list[str]:
    """The jobs in a topological order (every job after all its dependencies), stable in input order.

    Raises :class:`DagError` listing every problem: duplicate job names, dependencies of unknown
    jobs, dependencies on unknown jobs, and each cycle as a path (``a -> b -> a``).
    """
    order_in: list[str] = []
    seen: set[str] = set()
    problems: list[str] = []
    for node in nodes:
        if node in seen:
            problems.append(located("more than one job has this name", job=node, field="name"))
        else:
            seen.add(node)
            order_in.append(node)
    edges: dict[str, list[str]] = {node: [] for node in order_in}
    for job, job_deps in deps.items():
        if job not in seen:
            problems.append(located("dependencies given for a job that is not in the graph", job=job, field="deps"))
            continue
        for dep in dict.fromkeys(job_deps):  # a dependency listed twice is one edge
            if dep not in seen:
                problems.append(located(f"depends on unknown job {shown(dep)}", job=job, field="deps"))
            else:
                edges[job].append(dep)
    order = _kahn(order_in, edges)
    if len(order) < len(order_in):
        placed = set(order)
        problems.extend(_cycles([node for node in order_in if node not in placed], edges))
    if problems:
        raise DagError(problems)
    return order


def _kahn(nodes: Sequence[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """Kahn's algorithm; jobs ready at the same time keep their input order (a heap on input position)."""
    position = {node: index for index, node in enumerate(nodes)}
    waiting = {node: len(edges[node]) for node in nodes}
    dependents = dependents_of(nodes, edges)
    ready = [position[node] for node in nodes if waiting[node] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for dependent in dependents[node]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                heapq.heappush(ready, position[dependent])
    return order


def _cycles(stuck: Sequence[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle path per strongly connected component among the jobs Kahn could not place."""
    members = set(stuck)
    problems: list[str] = []
    for component in _components(stuck, edges):
        start = component[0]
        inside = set(component)
        if len(component) == 1 and start not in edges[start]:
            continue  # blocked behind a cycle, not on one
        path = [*_path_back(start, edges, inside), start]
        if len(path) > _CYCLE_SHOWN:
            path = [*path[: _CYCLE_SHOWN - 1], f"... ({len(path) - _CYCLE_SHOWN} more)", start]
        problems.append(located("cycle: " + " -> ".join(path), job=start, field="deps"))
    if not problems and members:  # pragma: no cover - Kahn leaves nodes only when a cycle exists
        problems.append("cycle among: " + ", ".join(sorted(members)[:_CYCLE_SHOWN]))
    return problems


def _path_back(start: str, edges: Mapping[str, Sequence[str]], inside: set[str]) -> list[str]:
    """A shortest path start -> ... -> (an edge back to start), staying inside one component (BFS)."""
    parent: dict[str, str | None] = {start: None}
    queue = [start]
    for node in queue:
        for nxt in edges[node]:
            if nxt == start:
                path = [node]
                while (previous := parent[path[-1]]) is not None:
                    path.append(previous)
                return path[::-1]
            if nxt in inside and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strongly connected component always has a cycle through each member")


def _components(nodes: Sequence[str], edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on long chains)."""
    members = set(nodes)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = [target for target in edges[node] if target in members]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(component[::-1])
    return found


def dependents_of(nodes: Iterable[str], deps: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """The reverse edges: for each job, the jobs that depend on it (in the order ``nodes`` lists them)."""
    dependents: dict[str, list[str]] = {node: [] for node in nodes}
    for node in dependents:
        for dep in dict.fromkeys(deps.get(node, ())):
            dependents.setdefault(dep, []).append(node)
    return dependents


def _ete_of(ete: Mapping[str, float], job: str) -> float:
    try:
        value = float(ete[job])
    except KeyError:
        raise ValidationError("no run-time estimate", job=job, field="ete") from None
    if not value >= 0 or value == float("inf"):
        raise ValidationError(f"run-time estimate must be finite and >= 0, got {value!r}", job=job, field="ete")
    return value


def pressures(order: Sequence[str], deps: Mapping[str, Iterable[str]], ete: Mapping[str, float]) -> dict[str, float]:
    """The exact pressure of every job; ``order`` is topological (as :func:`check_dag` returns it)."""
    dependents = dependents_of(order, deps)
    result: dict[str, float] = {}
    for job in reversed(order):
        after = max((result[d] for d in dependents[job]), default=0.0)
        result[job] = _ete_of(ete, job) + after
    return result


def critical_path(
    order: Sequence[str], deps: Mapping[str, Iterable[str]], ete: Mapping[str, float]
) -> tuple[float, list[str]]:
    """The length and the jobs of the longest path (by ETE) from a source to a target.

    Ties go to the job listed first in ``order``, so the answer is stable. An empty graph gives (0, []).
    """
    if not order:
        return 0.0, []
    pressure = pressures(order, deps, ete)
    dependents = dependents_of(order, deps)
    position = {job: index for index, job in enumerate(order)}
    job = max(order, key=lambda name: (pressure[name], -position[name]))
    path = [job]
    while dependents[job]:
        job = max(dependents[job], key=lambda name: (pressure[name], -position[name]))
        path.append(job)
    return pressure[path[0]], path


@dataclass(frozen=True)
class DagIndex:
    """What :func:`propagate_pressure` needs to walk only the affected jobs, built once per request.

    ``position`` is each job's index in a topological order; the mappings may be lazy views over a
    store, as long as they answer for the jobs asked.
    """

    deps: Mapping[str, Sequence[str]]
    dependents: Mapping[str, Sequence[str]]
    position: Mapping[str, int]


def index_dag(order: Sequence[str], deps: Mapping[str, Iterable[str]]) -> DagIndex:
    """The :class:`DagIndex` of a checked graph (``order`` from :func:`check_dag`)."""
    return DagIndex(
        deps={job: list(dict.fromkeys(deps.get(job, ()))) for job in order},
        dependents=dependents_of(order, deps),
        position={job: index for index, job in enumerate(order)},
    )


def propagate_pressure(
    index: DagIndex,
    ete: MutableMapping[str, float],
    pressure: MutableMapping[str, float],
    changed: Mapping[str, float],
    *,
    damping: float = DAMPING,
) -> list[str]:
    """Apply new run-time estimates ``changed`` and update the affected pressures in place.

    ``ete`` and ``pressure`` hold the current estimates and stored pressures; ``ete`` receives the
    new values. Returns the jobs whose stored pressure was rewritten, nearest to the targets first.
    Work is proportional to the jobs rewritten and their edges, never to the size of the graph: a job
    is visited only when its own estimate or a dependent's stored pressure changed. See the module
    docstring for the damping rule and its error bound; ``damping=0`` gives exact pressures.
    """
    if damping < 0:
        raise ValidationError(f"damping must be >= 0, got {damping!r}", field="damping")
    grow = 1.0 + damping
    for job, value in changed.items():
        if job not in index.position:
            raise ValidationError("new run-time estimate for a job not in the graph", job=job, field="ete")
        ete[job] = value
        _ete_of(ete, job)
    # Max-heap on topological position: a job is settled only after every dependent that could still
    # change, so it is computed once.
    heap = [-index.position[job] for job in changed]
    heapq.heapify(heap)
    by_position = {index.position[job]: job for job in changed}
    queued = set(heap)
    rewritten: list[str] = []
    while heap:
        key = heapq.heappop(heap)
        job = by_position[-key]
        after = max((pressure[d] for d in index.dependents[job]), default=0.0)
        candidate = _ete_of(ete, job) + after
        stored = pressure.get(job)
        if stored is not None and stored / grow <= candidate <= stored * grow:
            continue
        pressure[job] = candidate
        rewritten.append(job)
        for dep in index.deps[job]:
            dep_key = -index.position[dep]
            if dep_key not in queued:
                queued.add(dep_key)
                by_position[-dep_key] = dep
                heapq.heappush(heap, dep_key)
    return rewritten
