"""Every key of one community hashes to one Redis Cluster slot, in every script call the store makes."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.crc import key_slot
from storehelp import FakeClock, job

from matcher.repressure import repressure
from taskqueues import scripts
from taskqueues.keys import Keys
from taskqueues.records import PilotOffer, RunResult
from taskqueues.store import Store


def test_every_key_builder_carries_the_hash_tag() -> None:
    keys = Keys(prefix="pf", vo="lhcb")
    built = [keys.jobs, keys.seq, keys.tq("x"), keys.tqdefs, keys.tqempty, keys.pool("x"), keys.poolstamp,
             keys.qheads("a/b/c"), keys.leases, keys.delayed, keys.kills, keys.releasing, keys.donelog,
             keys.requests, keys.etekeys, keys.eterules, keys.byrule("r"), keys.cursor, keys.pilots, keys.pilotseen,
             keys.heads, keys.qfloor]
    assert {key_slot(k.encode()) for k in built} == {key_slot(b"{lhcb}")}
    assert key_slot(Keys(vo="atlas").jobs.encode()) != key_slot(b"{lhcb}")


@pytest.mark.parametrize("bad", ["", "a{b", "a:b", "a b"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        Keys(vo=bad)


def test_every_script_call_declares_keys_of_one_slot(real_redis: redis.Redis) -> None:
    clock = FakeClock()
    store = Store(real_redis, Keys(vo="lhcb"), lease_seconds=10, backoff=1, clock=clock)
    calls: list[tuple[str, list[Any]]] = []
    for name, script in [(n, s) for n, s in store._scripts.items() if n != "match"]:
        def spy(keys: list[Any], args: list[Any], _name: str = name, _script: Any = script) -> Any:
            calls.append((_name, list(keys)))
            return _script(keys=keys, args=args)
        store._scripts[name] = spy  # type: ignore[assignment]

    _, b, c = store.submit([job("t1", dependents=(1,)), job("t2", pending=1), job("t3", queues=("x/y/z",))])
    (m,) = store.match(PilotOffer("p", "site/ce/q1", 4, 1000))
    store.heartbeat("p", {m.id: m.attempt})
    store.start(m.id, m.attempt, "p")
    store.complete(m.id, m.attempt, "p", RunResult(wall=5))
    repressure(store)  # rescore.lua
    (m2,) = store.match(PilotOffer("p", "site/ce/q1", 4, 1000))
    store.fail(m2.id, m2.attempt, "p", RunResult(reason="preempted"), requeue=True)
    store.match(PilotOffer("p", "site/ce/q1", 4, 1000))
    # match goes through a pre-packed call (taskqueues.packed): check the keys it declares too.
    calls += [("match", call.keys) for call in store._match_calls.values()]
    clock.now += 11
    store.requeue_expired()
    clock.now += 2
    store.requeue_expired()
    store.cancel(c)
    store.refresh_pool("t3", ["site/ce/q1"])
    clock.now += 100
    store.clean(grace=1)
    store.release(b, {"error": "nothing to release"})
    # unlock/renew take the lock's own key (keys.lock, checked above), not the store's.
    assert {name for name, _ in calls} == set(scripts.names()) - {"unlock", "renew"}
    slot = key_slot(b"{lhcb}")
    for name, keys in calls:
        assert {key_slot(k.encode() if isinstance(k, str) else k) for k in keys} == {slot}, name
