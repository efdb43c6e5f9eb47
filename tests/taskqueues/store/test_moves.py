"""Moving a community between Cluster primaries (taskqueues.store.moves) on a real 3-primary cluster: the
chunked classic move (small chunks, so the community's jobs hash and task queue go piecewise) and the atomic
one keep every key of the community exactly, its store works on at the new owner, and a submission sent
while the chunked move runs waits for it and is stored whole, nothing of it lost between the two copies."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from taskqueues.store import Store, cluster
from taskqueues.store.keys import Keys
from taskqueues.store.moves import move_slot
from taskqueues.store.records import PilotOffer
from tests.support.cluster import ClusterSet, cluster_set
from tests.support.pilots import QUEUE
from tests.support.store import job

CHUNK = 20


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[ClusterSet]:
    with cluster_set(tmp_path / "cluster") as made:
        yield made


def _snapshot(node: redis.Redis, slot: int) -> dict[bytes, Any]:
    """Every key of ``slot`` on ``node``, read whole by type."""
    out: dict[bytes, Any] = {}
    for key in node.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100000):
        kind = node.type(key).decode()
        out[key] = {
            "hash": node.hgetall,
            "zset": lambda k: node.zrange(k, 0, -1, withscores=True),
            "set": node.smembers,
            "list": lambda k: node.lrange(k, 0, -1),
            "string": node.get,
        }[kind](key)
    return out


def _community(deployment: ClusterSet, vo: str, jobs: int) -> tuple[Store, int, int]:
    keys = Keys(vo=vo)
    store = Store(cluster.client(deployment.url, keys.base), keys)
    store.submit([job(queues=(QUEUE,), name=f"j{i}") for i in range(jobs)])
    store.match(PilotOffer(pilot="p1", queue=QUEUE, cpu=4, mem=4000), max_jobs=3)
    slot = cluster.slot_of(store.client)
    source = deployment.owner(slot)
    return store, slot, source


def _move(deployment: ClusterSet, slot: int, source: int, target: int, **how: Any) -> Any:
    others = [deployment.admin(i) for i in range(len(deployment.nodes)) if i not in (source, target)]
    return move_slot(deployment.admin(source), deployment.admin(target), slot, others, **how)


@pytest.mark.parametrize("atomic", [False, None])
def test_a_move_keeps_every_key_and_the_store_works_at_the_new_owner(deployment: ClusterSet, atomic: bool) -> None:
    store, slot, source = _community(deployment, "big", 5 * CHUNK)
    target = (source + 1) % len(deployment.nodes)
    before = _snapshot(deployment.admin(source), slot)
    move = _move(deployment, slot, source, target, atomic=atomic, chunk=CHUNK, first=[store.keys.stats])
    assert deployment.owner(slot) == target
    assert _snapshot(deployment.admin(target), slot) == before
    assert _snapshot(deployment.admin(source), slot) == {}
    if atomic is None:
        assert move.how == "atomic"  # the shipped Valkey 9 has CLUSTER MIGRATESLOTS
    else:
        assert move.how == "chunked" and move.keys == len(before)
        assert move.chunked_keys >= 2  # the jobs hash and the task queue went piecewise
    assert len(store.match(PilotOffer(pilot="p2", queue=QUEUE, cpu=1, mem=1000))) == 1
    [new] = store.submit([job(queues=(QUEUE,))])
    assert int(new) == 5 * CHUNK + 1


def test_a_submission_during_a_chunked_move_waits_and_is_stored_whole(deployment: ClusterSet) -> None:
    store, slot, source = _community(deployment, "busy", 30 * CHUNK)
    target = (source + 1) % len(deployment.nodes)
    submitted: list[str] = []
    started = threading.Event()

    def submit() -> None:
        started.wait()
        for _ in range(10):
            submitted.extend(store.submit([job(queues=(QUEUE,)) for _ in range(5)]))

    thread = threading.Thread(target=submit)
    thread.start()
    started.set()
    _move(deployment, slot, source, target, atomic=False, chunk=CHUNK // 4, first=[store.keys.stats])
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(submitted) == 50
    assert store.client.hlen(store.keys.jobs) == 30 * CHUNK + 50
    assert sorted(int(i) for i in submitted) == list(range(30 * CHUNK + 1, 30 * CHUNK + 51))
