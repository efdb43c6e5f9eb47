"""Builders shared by the store tests: jobs with hand-made task queues (no catalog needed)."""

from __future__ import annotations

import json

import redis

from taskqueues.records import NewJob
from taskqueues.store import Store


def job(tq: str = "tqA", *, cpu: int = 1, mem: int = 100, tmp: int = 0, ete: float = 0, score: float = 0,
        queues: tuple[str, ...] = ("site/ce/q1",), command: str = "true", wall: int | None = None,
        **kw: object) -> NewJob:
    exact: dict[str, int] = {"cpu": cpu, "mem": mem, "tmp": tmp, **({"wall": wall} if wall else {})}
    reqs = json.dumps(exact, separators=(",", ":"))
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


def snapshot(client: redis.Redis) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key with its DUMP and its time to live: equal snapshots mean a byte-identical keyspace."""
    return {key: (client.dump(key), client.pttl(key)) for key in sorted(client.keys("*"))}


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_heads(store: Store, pools: dict[str, tuple[str, ...]]) -> None:
    """heads holds each non-empty task queue's real head and a floor under all its members; every queue
    floor is under all members of the task queues of its pool; index scores are never above real heads."""
    client, k = store.client, store.keys
    members: dict[str, list[tuple[int, ...]]] = {}
    for tq in pools:
        zset = client.zrange(k.tq(tq), 0, -1, withscores=True)
        entry = client.hget(k.heads, tq)
        members[tq] = [tuple(int(x) for x in text(m).split(":")[1:]) for m, _ in zset]
        if not zset:
            assert entry is None, tq
            continue
        assert entry is not None, tq
        score, member, floor = text(entry).split(" ")
        assert (text(zset[0][0]), float(score)) == (member, zset[0][1]), tq
        low = [float(x) for x in floor.split(":")]
        assert all(all(lo <= v for lo, v in zip(low, values, strict=True)) for values in members[tq]), tq
        for queue in pools[tq]:
            index = client.zscore(k.qheads(queue), tq)
            assert index is not None and index <= zset[0][1], (tq, queue)
    for queue in {q for qs in pools.values() for q in qs}:
        floor = client.hget(k.qfloor, queue)
        if floor is not None:
            low = [float(x) for x in text(floor).split(":")]
            reach = [v for tq, qs in pools.items() if queue in qs for v in members[tq]]
            assert all(all(lo <= v for lo, v in zip(low, values, strict=True)) for values in reach), queue
