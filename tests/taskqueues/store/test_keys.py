"""Every key of one community hashes to one Redis Cluster slot, in every script call the store makes."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from matcher.repressure import repressure
from taskqueues.errors import ConfigError
from taskqueues.store import JobUpdate, Store, retention, scripts
from taskqueues.store.keys import Keys
from taskqueues.store.records import JobState, PilotOffer, RunResult
from taskqueues.store.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.polling import wait_until
from tests.support.store import job


def test_every_key_builder_carries_the_hash_tag() -> None:
    keys = Keys(prefix="pf", vo="lhcb")
    built = [
        keys.jobs,
        keys.seq,
        keys.idrange,
        keys.tq("x"),
        keys.tqdefs,
        keys.tqempty,
        keys.pool("x"),
        keys.poolstamp,
        keys.qheads("a/b/c"),
        keys.leases,
        keys.delayed,
        keys.kills,
        keys.releasing,
        keys.donelog,
        keys.requests,
        keys.etekeys,
        keys.eterules,
        keys.byrule("r"),
        keys.cursor,
        keys.pilots,
        keys.pilotseen,
        keys.heads,
        keys.qfloor,
        keys.wake,
        keys.pilot_channel("slurm-1@n1"),
        keys.stops,
        keys.tqmax,
        keys.parked,
        keys.ended,
        keys.blocked,
        keys.log("12"),
        keys.stats,
        keys.held,
        keys.events,
        keys.tokens,
        keys.audit,
    ]
    assert {key_slot(k.encode()) for k in built} == {key_slot(b"{lhcb}")}
    assert key_slot(Keys(vo="atlas").jobs.encode()) != key_slot(b"{lhcb}")


@pytest.mark.parametrize("bad", ["", "a{b", "a:b", "a b", "*", "a?", "a[bc]", "a\\\\b"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        Keys(vo=bad)


def test_every_script_call_declares_keys_of_one_slot(real_redis: redis.Redis) -> None:
    clock = FakeClock()
    store = Store(real_redis, Keys(vo="lhcb"), lease_seconds=10, backoff=1, clock=clock)
    calls: list[tuple[str, list[Any]]] = []
    for name, script in [(n, s) for n, s in store._scripts.items() if n != "match"]:

        def spy(keys: list[Any], args: list[Any], _name: str = name, _script: Any = script, **how: Any) -> Any:
            calls.append((_name, list(keys)))
            return _script(keys=keys, args=args, **how)

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
    # match (and complete in an exchange) go through pre-packed calls (taskqueues.store.packed): their keys too.
    calls += [(name.split(":")[0], call.keys) for name, call in store._packed.items()]
    clock.now += 11
    store.requeue_expired()
    clock.now += 2
    store.requeue_expired()
    store.cancel(c)
    store.refresh_pool("t3", ["site/ce/q1"])
    clock.now += 100
    store.clean(grace=1)
    store.release(b, {"error": "nothing to release"})
    store.logs.ship(m.id, m.attempt, "p", cap=10, host="h", directory="/d", live=False, chunks={"out": (b"x", 1)})
    (h,) = store.submit([job("t1")])
    store.lifecycle.hold([h], "alice")
    store.lifecycle.update([JobUpdate(h, "priority 5", priority=5)], "alice")
    store.lifecycle.hold([h], "alice", release=True)
    store.lifecycle.resubmit([c], "alice")
    store.submit([job("t1")], ("rn", {"notify": "http://h.example.org/"}))  # request-end notifications
    store.notices.ready("rn", clock.now)
    [claim] = store.notices.claim("s", clock.now, 10)
    store.notices.settle(claim, clock.now)
    retention.forget_ended(store, clock.now + 1)
    # unlock/renew take the lock's own key (keys.lock, checked above), not the store's.
    assert {name for name, _ in calls} == set(scripts.names()) - {"unlock", "renew"}
    slot = key_slot(b"{lhcb}")
    for name, keys in calls:
        assert {key_slot(k.encode() if isinstance(k, str) else k) for k in keys} == {slot}, name


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 above it, as Redis 6 fixes it) is free too."""
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 30000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


@pytest.fixture
def split_cluster(tmp_path: Path) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two real redis-servers in cluster mode: the first serves only the slot of ``{lhcb}``, the second
    every other slot."""
    nodes = [
        RedisServer(
            tmp_path / name,
            cluster_port(),
            options=("--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / name / "nodes.conf")),
        )
        for name in ("a", "b")
    ]
    try:
        for node in nodes:
            node.start()
        a, b = (redis.Redis(port=node.port) for node in nodes)
        slot = key_slot(b"{lhcb}")
        a.execute_command("CLUSTER", "ADDSLOTS", slot)
        b.execute_command("CLUSTER", "ADDSLOTS", *(s for s in range(16384) if s != slot))
        a.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[1].port)
        wait_until(
            lambda: all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO") for c in (a, b)),
            timeout=20,
            what="the two-node cluster to come up",
        )
        yield a, b
    finally:
        for node in nodes:
            node.stop()


def test_a_community_runs_on_the_cluster_node_of_its_slot(split_cluster: tuple[redis.Redis, redis.Redis]) -> None:
    """match.lua builds the keys of the task queues it leases from instead of declaring them (see its header):
    a Redis Cluster node serves them because they carry the community's hash tag. A key outside the slot
    would be refused, as the last check shows."""
    a, _ = split_cluster
    clock = FakeClock()
    store = Store(a, Keys(vo="lhcb"), lease_seconds=10, clock=clock)
    ids = store.submit([job("t1", score=2), job("t2", score=1), job("t3", queues=("x/y/z",))])
    got = store.match(PilotOffer("p", "site/ce/q1", 4, 4000), max_jobs=4)
    assert [j.id for j in got] == [ids[1], ids[0]]
    assert store.complete(got[0].id, got[0].attempt, "p", RunResult(wall=5)) == []
    assert store.job(got[0].id).state is JobState.DONE
    with pytest.raises(redis.ResponseError, match=r"non local key|same slot"):
        a.eval("return redis.call('GET', '{atlas}x')", 1, Keys(vo="lhcb").jobs)
