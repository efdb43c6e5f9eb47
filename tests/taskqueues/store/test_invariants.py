"""The store invariant checker: silent on a consistent store, and it names each kind of damage done by hand."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from taskqueues.store import Store
from tests.support.clock import FakeClock
from tests.support.invariants import Violation, check
from tests.support.store import OFFER, Population, populate

Damage = Callable[[Store, Population], object]


@pytest.fixture
def populated(real_redis: redis.Redis) -> tuple[Store, Population]:
    store = Store(real_redis, lease_seconds=30, backoff=10, clock=FakeClock())
    return store, populate(store)


def test_a_store_the_scripts_wrote_is_consistent(populated: tuple[Store, Population]) -> None:
    store, _ = populated
    assert check(store.client, store.keys) == []


def _member(store: Store, job: str) -> str:
    return job + json.loads(store.client.hget(store.keys.jobs, job))["mt"]


def _rewrite(store: Store, job: str, **fields: object) -> None:
    rec = json.loads(store.client.hget(store.keys.jobs, job))
    store.client.hset(store.keys.jobs, job, json.dumps({**rec, **fields}))


DAMAGE: list[tuple[str, Damage]] = [
    ("waiting-misplaced", lambda s, p: s.client.zrem(s.keys.tq("a"), _member(s, p.waiting))),
    ("leased-without-lease", lambda s, p: s.client.zrem(s.keys.leases, p.matched)),
    ("member-not-waiting", lambda s, p: s.client.zadd(s.keys.tq("a"), {_member(s, p.done): 9})),
    ("member-without-record", lambda s, p: s.client.zadd(s.keys.tq("a"), {"999:1:1:0:1": 9})),
    ("unreadable-member", lambda s, p: s.client.zadd(s.keys.tq("a"), {"garbage": 9})),
    ("score-mismatch", lambda s, p: s.client.zadd(s.keys.tq("a"), {_member(s, p.waiting): 9}, xx=True)),
    ("heads-not-head", lambda s, p: s.client.hset(s.keys.heads, "a", "1 1:1:100:0:60 0:0:0:0")),
    ("work-counter", lambda s, p: s.client.incrby(s.keys.work, 7)),
    ("empty-not-marked", lambda s, p: s.client.zrem(s.keys.tqempty, "b")),
    ("nonempty-marked-empty", lambda s, p: s.client.zadd(s.keys.tqempty, {"a": 1})),
    ("unreadable-record", lambda s, p: s.client.hset(s.keys.jobs, p.done, "{not json")),
    ("index-outside-pool", lambda s, p: s.client.srem(s.keys.pool("a"), "site/ce/q1")),
    ("pool-not-indexed", lambda s, p: s.client.zrem(s.keys.qheads("site/ce/q1"), "a")),
    ("blocked-stuck", lambda s, p: _rewrite(s, p.blocked, nd=2)),
    ("misplaced", lambda s, p: s.client.zadd(s.keys.delayed, {p.running: 1})),
    ("kill-of-unleased", lambda s, p: s.client.hset(s.keys.kills, p.waiting, "why")),
    ("releasing-misplaced", lambda s, p: s.client.zrem(s.keys.releasing, p.releasing)),
    ("waiting-misplaced", lambda s, p: s.client.zrem(s.keys.delayed, p.delayed)),
    ("kill-of-unleased", lambda s, p: s.client.hset(s.keys.kills, p.delayed, "why")),
    ("largest-below-member", lambda s, p: s.client.hset(s.keys.tqmax, "a", "0:0:0:0")),
    ("queue-without-definition", lambda s, p: s.client.hdel(s.keys.tqdefs, "a")),
    ("queue-without-pool", lambda s, p: s.client.zrem(s.keys.poolstamp, "a")),
]


@pytest.mark.parametrize("kind, damage", DAMAGE, ids=[kind for kind, _ in DAMAGE])
def test_each_kind_of_damage_is_named(populated: tuple[Store, Population], kind: str, damage: Damage) -> None:
    store, pop = populated
    damage(store, pop)
    found = check(store.client, store.keys)
    assert kind in {v.kind for v in found}, [str(v) for v in found]
    assert all(isinstance(v, Violation) and str(v).startswith(v.kind) for v in found)


def test_a_parked_job_is_accounted_for(populated: tuple[Store, Population]) -> None:
    """A job parked by a script may wait outside every task queue, and its record may be unreadable."""
    store, pop = populated
    store.client.hset(store.keys.jobs, pop.waiting, "{not json")
    assert store.match(OFFER) == []
    assert set(store.parked()) == {pop.waiting}
    assert check(store.client, store.keys) == []
