"""Builders shared by the store tests: jobs with hand-made task queues (no catalog needed)."""

from __future__ import annotations

import json

from taskqueues.invariants import check, heads_violations
from taskqueues.records import NewJob
from taskqueues.store import Store


def job(tq: str = "tqA", *, cpu: int = 1, mem: int = 100, tmp: int = 0, ete: float = 0, score: float = 0,
        queues: tuple[str, ...] = ("site/ce/q1",), command: str = "true", **kw: object) -> NewJob:
    reqs = json.dumps({"cpu": cpu, "mem": mem, "tmp": tmp}, separators=(",", ":"))
    return NewJob(command=command, tq_id=tq, tq_def=json.dumps({"class": tq}), queues=queues, cpu=cpu, mem=mem,
                  tmp=tmp, ete=ete, score=score, requirements=reqs, **kw)  # type: ignore[arg-type]


# Two sites of one 4-core queue each, told apart by Platform: the operator-view tests' catalog.
TWO_SITES = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce]
[sites.A.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
[sites.B]
Platform = "EL8"
[sites.B.ces.ce]
[sites.B.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""
QA, QB = "A/ce/q", "B/ce/q"


class FakeClock:
    """A settable clock for lease and back-off tests (the store takes any callable)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_heads(store: Store, pools: dict[str, tuple[str, ...]]) -> None:
    """heads holds each non-empty task queue's real head and a floor under all its members; every queue
    floor is under all members of the task queues of its pool; index scores are never above real heads."""
    assert heads_violations(store.client, store.keys, pools) == []


def check_store(store: Store) -> None:
    """The whole store of the community is consistent (taskqueues.invariants)."""
    assert [str(v) for v in check(store.client, store.keys)] == []
