"""The heads index by group (issue 31): every writer of a heads index keeps it, on a real Redis.

A policy-stored store goes through every operation that moves task-queue heads (submit, match, complete, fail,
cancel, hold, release, update, resubmit, reap, clean, refresh of a SubmitPool, rescore, release of a deferred
job); after each, ``store.gheads.check()`` (what ``tests.support.invariants.check`` runs for every store test)
must find each queue's index by group equal to its heads index split by group, and the match must pick what a
scan of every task queue's head picks (the fair-share oracle, ``test_fairshare_oracle.py``, checks the rule).
"""

from __future__ import annotations

import dataclasses

import redis

from taskqueues.store import JobUpdate, Placed, Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.keys import account_of
from taskqueues.store.records import PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.store import check_store, job

Q1, Q2 = "site/ce/q1", "site/ce/q2"
POLICY = Policy(shares={"g1": 1.0, "g2": 3.0})
OFFER = PilotOffer("p1", Q1, 4, 10_000, 10_000)


def _store(client: redis.Redis) -> Store:
    return Store(client, lease_seconds=30, backoff=0, clock=FakeClock())


def _consistent(store: Store, when: str) -> None:
    assert store.gheads.check() == [], when
    check_store(store)


def _split(store: Store, queue: str) -> dict[str, dict[str, float]]:
    """The index by group of ``queue`` as stored: group -> task queue -> score."""
    k = store.keys
    out: dict[str, dict[str, float]] = {}
    for g in store.client.smembers(k.gheads(queue)):
        name = g.decode()
        if name != "~":
            out[name] = {tq.decode(): s for tq, s in store.client.zrange(k.gheads(queue, name), 0, -1, withscores=True)}
    return out


def test_every_writer_of_the_heads_keeps_the_index_by_group(real_redis: redis.Redis) -> None:
    store = _store(real_redis)
    clock = store.clock
    assert isinstance(clock, FakeClock)
    store.shares.publish(POLICY)
    ids = store.submit(
        [
            job("h1.g1.alice", score=1, queues=(Q1, Q2)),
            job("h1.g1.alice", score=2, queues=(Q1, Q2)),
            job("h2.g2.bob.reco", score=3, queues=(Q1,), rule="reco"),
            job("h2.g2.bob.reco", score=4, queues=(Q1,), rule="reco"),
            job("h3", score=5, queues=(Q1, Q2)),  # no account: the default group
            job("h4.g2.carol", score=6, queues=(Q2,), dependents=(6,)),
            job("h4.g2.carol", pending=1, queues=(Q2,)),
        ]
    )
    _consistent(store, "submit, before any match: nothing built")
    assert store.gheads.built() == []

    # the first policy match of a queue builds its index by group from the heads index (the upgrade path)
    (m,) = store.match(OFFER)
    assert m.id == ids[0]  # no group has used anything: every rank is 0, and the most urgent head goes first
    _consistent(store, "first match")
    assert store.gheads.built() == [Q1]
    assert set(_split(store, Q1)) == {"g1", "g2", "default"}

    store.start(m.id, 1, "p1")
    store.complete(m.id, 1, "p1", RunResult(wall=5))
    _consistent(store, "complete")
    (m,) = store.match(dataclasses.replace(OFFER, queue=Q2))
    _consistent(store, "match on the second queue")
    assert store.gheads.built() == [Q1, Q2]
    store.fail(m.id, 1, "p1", RunResult(reason="preempted"), requeue=True)
    _consistent(store, "fail with requeue")
    store.cancel(ids[1], "no longer needed")
    _consistent(store, "cancel")
    store.lifecycle.hold([ids[4]], "alice", "look first")
    _consistent(store, "hold")
    store.lifecycle.hold([ids[4]], "alice", release=True)
    _consistent(store, "release of a held job")
    placed = Placed("h5.g1.alice", '{"class":"h5"}', (Q1, Q2), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    store.lifecycle.update([JobUpdate(ids[4], "cpu 1 -> 2", 3, placed)], "alice")
    _consistent(store, "update into another task queue")
    leased = store.match(OFFER, 4)
    _consistent(store, "a filling match")
    for j in leased:
        store.complete(j.id, j.attempt, "p1", RunResult(wall=1))
    _consistent(store, "completes")
    assert store.lifecycle.resubmit([leased[0].id], "alice", "again")
    _consistent(store, "resubmit")
    (m,) = store.match(OFFER)
    clock.now += 100
    assert store.requeue_expired()[0] == 1
    _consistent(store, "reap of an expired lease")
    store.refresh_pool("h2.g2.bob.reco", [Q2])
    _consistent(store, "refresh of a SubmitPool (h2 leaves q1 for q2)")
    assert "h2.g2.bob.reco" in _split(store, Q2)["g2"] and "h2.g2.bob.reco" not in _split(store, Q1).get("g2", {})
    store.rescore([], waiting_tqs=["h1.g1.alice"])
    _consistent(store, "rescore")
    while leased := store.match(dataclasses.replace(OFFER, cpu=64), 64) + store.match(
        dataclasses.replace(OFFER, queue=Q2, cpu=64), 64
    ):
        for j in leased:
            store.complete(j.id, j.attempt, "p1", RunResult(wall=1))
    _consistent(store, "every job done")
    clock.now += 10_000
    assert store.clean(grace=600)
    _consistent(store, "clean")
    assert all(not tqs for tqs in _split(store, Q1).values())

    # without a policy none is kept; a policy again builds them afresh
    store.shares.publish(None)
    assert store.gheads.built() == [] and not real_redis.keys(store.keys.gheads_prefix + "*")
    _consistent(store, "policy removed")
    store.submit([job("h6.g1.dan", score=1, queues=(Q1,))])
    assert not real_redis.keys(store.keys.gheads_prefix + "*")
    store.shares.publish(POLICY)
    (m,) = store.match(OFFER)
    assert m.tq_id == "h6.g1.dan"
    _consistent(store, "policy stored again")


def test_a_store_written_before_the_index_matches_as_a_scan_says(real_redis: redis.Redis) -> None:
    """The upgrade: a policy store whose index by group does not exist (dropped by hand, as an older version
    left it) is indexed by its first match, which leases what the index would have given; an index damaged
    by hand is named by the check."""
    store = _store(real_redis)
    store.shares.publish(POLICY)
    tqs = [f"h{i}.g{1 + i % 2}.u{i}" for i in range(40)]
    store.submit([job(tq, score=100 - i) for i, tq in enumerate(tqs)])
    assert store.gheads.built() == []
    (m,) = store.match(OFFER)
    assert m.tq_id == tqs[39]  # every rank is 0 (nothing used): the most urgent head
    _consistent(store, "first match")
    split = _split(store, OFFER.queue)
    assert {tq for g in split.values() for tq in g} == set(tqs)
    assert all(account_of(tq)[0] == g for g, part in split.items() for tq in part)
    real_redis.zadd(store.keys.gheads(OFFER.queue, "g1"), {tqs[0]: 1.0})
    assert any(tqs[0] in line for line in store.gheads.check())


def test_a_policy_match_of_a_queue_with_nothing_indexed_marks_its_floor(real_redis: redis.Redis) -> None:
    """A queue whose heads index lists no task queue: the policy match finds nothing, and the queue's floor
    says so (the next call answers without a walk), as without a policy."""
    store = _store(real_redis)
    store.shares.publish(POLICY)
    store.submit([job("h1.g1.alice", queues=(Q2,))])
    assert store.match(OFFER) == []
    assert store.gheads.built() == [Q1]
    assert store.client.hget(store.keys.qfloor, Q1) == b"1e+18:1e+18:1e+18:1e+18"
    _consistent(store, "an empty queue matched")
