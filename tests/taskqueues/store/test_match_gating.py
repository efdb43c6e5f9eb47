"""match.lua pays only for what a call uses: a pilot below its queue's floor stops walking the index once its
reservation is decided (or when no job can fit its total), and no shares policy means the strict match. What
a call leases and reserves stays what the full walk gives (the brute-force comparison of every case is
tests/taskqueues/store/test_oracle.py); how many index pages a call reads is counted by the server
(``INFO commandstats``: commands a function runs are counted as if a client sent them)."""

from __future__ import annotations

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.keys import Keys, account_of
from taskqueues.store.records import PilotOffer
from taskqueues.store.reservations import read_reservations
from tests.support.clock import FakeClock
from tests.support.invariants import check
from tests.support.store import job

Q = "site/ce/q1"


@pytest.fixture
def store(real_redis: redis.Redis) -> Store:
    return Store(real_redis, clock=FakeClock(), reservation_slack=30)


def busy(pilot: str, free: int, ends: float = 50.0, held: int = 3) -> PilotOffer:
    """A pilot with ``free`` cores free and ``held`` 1-core jobs ending in ``ends`` seconds."""
    return PilotOffer(pilot, Q, free, 4000, 0, None, running=((ends, 1, 100, 0),) * held)


def pages_read(store: Store, offer: PilotOffer) -> tuple[list[str], int]:
    """The jobs a call leased, and how many index pages (ZRANGEBYSCORE) it read."""
    store.client.config_resetstat()
    got = [j.id for j in store.match(offer)]
    stats = store.client.info("commandstats").get("cmdstat_zrangebyscore", {})
    return got, int(stats.get("calls", 0))


def two_core_queues(store: Store, n: int) -> list[str]:
    """``n`` task queues of one 2-core job each, the first the most urgent; a walk by an idle 1-core pilot
    has set the queue's floor (2 cores)."""
    ids = store.submit([job(f"tq{i:02d}", cpu=2, ete=100, score=i) for i in range(n)])
    assert pages_read(store, PilotOffer("idle", Q, 1, 4000, 0, None, running=()))[0] == []
    return ids


def test_a_busy_pilot_below_the_floor_still_reserves_the_head_that_fits_its_total(store: Store) -> None:
    first, *_ = two_core_queues(store, 3)
    assert pages_read(store, busy("p1", free=1))[0] == []
    (r,) = read_reservations(store.client, store.keys)[0]
    assert (r.pilot, r.job) == ("p1", first)
    assert pages_read(store, busy("p2", free=1, ends=10.0))[0] == []  # frees sooner: takes it over
    assert read_reservations(store.client, store.keys)[0][0].pilot == "p2"
    assert check(store.client, store.keys) == []


def test_once_its_reservation_is_decided_a_pilot_below_the_floor_reads_no_more_pages(store: Store) -> None:
    first, *_ = two_core_queues(store, 40)
    assert pages_read(store, busy("p1", free=1)) == ([], 1)  # the first page holds the head to reserve
    assert read_reservations(store.client, store.keys)[0][0].job == first
    assert pages_read(store, busy("p2", free=1, ends=90.0)) == ([], 1)  # decided: p1 frees sooner


def test_a_pilot_whose_total_fits_no_job_reads_no_page(store: Store) -> None:
    two_core_queues(store, 40)
    assert pages_read(store, busy("p1", free=0, held=1)) == ([], 0)  # 1 core in all: every job wants 2
    assert read_reservations(store.client, store.keys) == ([], {})


def test_without_a_shares_policy_or_with_one_that_cannot_be_read_the_match_is_strict(store: Store) -> None:
    def lease(tq: str, score: float) -> tuple[str, bool]:
        """Submit a job, and which job a pilot is leased then, and whether its record names a fair queue."""
        store.submit([job(tq, score=score)])
        (got,) = pages_read(store, busy("p1", free=1))[0]
        return got, b'"fq":' in (store.client.hget(store.keys.jobs, got) or b"")

    store.submit([job("tqA.g1.o1", score=1)])
    store.shares.publish(Policy(shares={"g1": 1, "g2": 1}))
    store.client.hset(store.keys.fair, "r:g1", 5)  # g1 runs 5 cores: g2 goes first
    assert lease("tqB.g2.o2", 2) == ("2", True)
    store.shares.publish(None)
    assert lease("tqB.g2.o2", 2) == ("1", False)  # no policy: the most urgent
    store.client.hset(store.keys.qfloor, "", "not json")
    assert lease("tqA.g1.o1", 1) == ("4", False)  # unreadable: strict again
    store.client.hset(store.keys.qfloor, "", "1")  # an older mark: the policy is the shares hash's json
    store.client.hset(store.keys.shares, "json", "not json")
    assert lease("tqA.g1.o1", 1) == ("5", False)


def test_a_policy_published_before_its_mark_carried_it_is_read_from_the_shares_hash(store: Store) -> None:
    """A store written before the mark held the policy (the mark "1") still matches by the policy: match reads
    the shares hash's json then, one HGET more, and packs it; publishing again writes the packed policy into
    the mark."""
    store.submit([job("tqA.g1.o1", score=1), job("tqB.g2.o2", score=2)])
    policy = Policy(shares={"g1": 1, "g2": 1})
    store.shares.publish(policy)
    store.client.hset(store.keys.fair, "r:g1", 5)  # g1 runs 5 cores: g2 goes first
    store.client.hset(store.keys.qfloor, "", "1")
    store.client.config_resetstat()
    assert [j.id for j in store.match(busy("p1", free=1))] == ["2"]
    assert int(store.client.info("commandstats")["cmdstat_hget"]["calls"]) >= 1
    store.shares.publish(policy)
    assert store.client.hget(store.keys.qfloor, "") == policy.packed().encode()


def test_a_call_without_a_policy_reads_neither_the_shares_hash_nor_more_than_before(store: Store) -> None:
    """The policy is read only where publish marked the qfloor hash: a community without one pays one HMGET
    (its queue's floor and the mark) and no HGET of the shares hash; one with a policy reads it."""

    def reads(offer: PilotOffer) -> tuple[int, int]:
        store.client.config_resetstat()
        store.match(offer)
        stats = store.client.info("commandstats")
        return (int(stats.get("cmdstat_hget", {}).get("calls", 0)), int(stats.get("cmdstat_hmget", {}).get("calls", 0)))

    for i in range(4):
        store.submit([job(f"tq{i}.g1.o1", score=i)])
    strict = PilotOffer("p1", Q, 4, 4000, 0, None)
    assert reads(strict) == (0, 3)  # the floor and mark, one page's heads, the record
    store.shares.publish(Policy(shares={"g1": 1}))
    assert store.client.hget(store.keys.qfloor, "") == b" halflife=21600.0 s:*=1.0 s:g1=1.0 "
    _, hmget = reads(strict)
    assert hmget >= 4  # the fair hash's fields are read (the policy comes with the floor: its mark)
    store.shares.publish(None)
    assert store.client.hget(store.keys.qfloor, "") is None
    assert reads(strict) == (0, 3)
    assert check(store.client, store.keys) == []


def test_the_policys_functions_made_at_load_keep_no_call_for_the_next(real_redis: redis.Redis) -> None:
    """match.lua makes its policy's functions once, when the library loads (above its line "-- per call:"),
    and sets what they read at the start of every call with a policy: calls of communities with other
    policies and fair hashes, and calls without a policy, take turns on one server, and each is served by its
    own policy alone."""
    clock = FakeClock()
    stores = {vo: Store(real_redis, Keys(vo=vo), clock=clock) for vo in ("va", "vb", "vc")}
    for vo, store in stores.items():
        store.submit([job(f"tq{g}{i}.{g}.o", score=i) for g in ("g1", "g2") for i in range(3)])
        if vo != "vc":
            store.shares.publish(Policy(shares={"g1": 1, "g2": 1}, cores={("g1", "*"): 100}))
    used = f"50000 {clock.now}"  # recent usage (the running counters must match the leases)
    stores["va"].client.hset(stores["va"].keys.fair, "u:g1", used)  # va: g2 goes first
    stores["vb"].client.hset(stores["vb"].keys.fair, "u:g2", used)  # vb: g1 goes first

    def group(vo: str) -> str:
        (leased,) = stores[vo].match(PilotOffer("p", Q, 1, 4000, 0, None))
        return account_of(leased.tq_id)[0]

    turns = [(vo, group(vo)) for vo in ("va", "vb", "vc", "va", "vb", "vc")]
    assert turns == [("va", "g2"), ("vb", "g1"), ("vc", "g1"), ("va", "g2"), ("vb", "g1"), ("vc", "g2")]  # vc: by score
    assert all(check(store.client, store.keys) == [] for store in stores.values())


def test_the_kept_policies_are_forgotten_past_their_bound_and_made_again(store: Store) -> None:
    """match.lua keeps what at most 64 packed policies give (POLICIES): the 65th policy forgets them all, and a
    call with a policy forgotten makes its entry again; every call is served by the policy stored then."""
    store.submit([job(f"tq{g}{i}.{g}.o", score=i) for g in ("g1", "g2") for i in range(70)])
    served = []
    used = f"1000 {store.clock()}"
    for i in range(70):
        first = "g1" if i % 3 else "g2"  # the group with the larger share goes first: equal usage, E / share
        store.shares.publish(Policy(shares={first: 100.0 + i, "g1" if first == "g2" else "g2": 1.0}))
        store.client.delete(store.keys.fair)  # the same usage for both, no running cores
        store.client.hset(store.keys.fair, mapping={"u:g1": used, "u:g2": used})
        (leased,) = store.match(PilotOffer("p", Q, 1, 4000, 0, None))
        served.append(account_of(leased.tq_id)[0])
    assert served == ["g1" if i % 3 else "g2" for i in range(70)]
