"""Redis Cluster: three communities on three primaries, real pilots, slots moved under them mid-run.

A real 3-primary cluster (tests/support/cluster.py); each community's keys live in the slot of its hash tag
``{vo}``, one on each primary. Pilots of every community run jobs while one community's slot is moved the way
``valkey-cli --cluster reshard`` moves it (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) and another's
with Valkey's atomic slot migration; every job of every community ends done, its payload run exactly once,
and every store stays consistent (tests.support.invariants). The control plane's part is the reaper
(Store.requeue_expired), run as the worker runs it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path

import pytest

from taskqueues.errors import ConfigError, StoreUnavailable
from taskqueues.store import Store, access, cluster
from taskqueues.store.functions import library_name
from taskqueues.store.guard import client_url, shown_url
from taskqueues.store.keys import WAKE_SHARDS, Keys
from taskqueues.store.records import JobState, PilotOffer
from tests.support.cluster import ClusterSet, cluster_set
from tests.support.pilots import QUEUE, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.sentinel import quietly
from tests.support.store import check_store, job

#: Communities whose hash tags fall on three different primaries (slots 15495, 3300, 7365 of 16384 in thirds).
COMMUNITIES = ("a", "b", "c")
JOBS = 24


def test_the_url_names_nodes_and_credentials() -> None:
    parsed = cluster.ClusterURL.parse("redis+cluster://u:p%40w@h1:7000,h2,[::1]:7002/0")
    assert parsed.nodes == (("h1", 7000), ("h2", 6379), ("::1", 7002))
    assert (parsed.username, parsed.password, parsed.tls) == ("u", "p@w", False)
    assert cluster.ClusterURL.parse("rediss+cluster://h1:1").tls
    for bad, why in (
        ("redis+cluster://h1:1/3", "only database 0"),
        ("redis+cluster://h1:1,h2:x", "bad port"),
        ("redis+cluster://h1:1,,h2:2", "is not host:port"),
        ("redis+cluster://h1:1?timeout=3", "takes no query"),
    ):
        with pytest.raises(ConfigError, match=why):
            cluster.ClusterURL.parse(bad)
    with pytest.raises(ConfigError, match="serves one community"):
        cluster.client("redis+cluster://h1:1", None)


def _payload(ran: Path) -> str:
    return f'echo "$PILOTFISH_JOB_ID $(date +%s.%N)" >> {ran}; sleep 0.4'


def _runs(ran: Path) -> tuple[Counter[str], list[float]]:
    """How many times each job's payload started, and the start times in order."""
    lines = [line.split() for line in ran.read_text().splitlines()]
    return Counter(job for job, _ in lines), sorted(float(at) for _, at in lines)


def _longest_wait(starts: list[float], since: float, until: float) -> float:
    """The longest time without a payload start that overlaps [since, until]."""
    gaps = [b - a for a, b in pairwise(starts) if b >= since and a <= until]
    return max(gaps, default=0.0)


def test_three_communities_ride_out_slot_migrations(tmp_path: Path) -> None:
    with cluster_set(tmp_path / "cluster") as deployment:
        keys = {vo: Keys(vo=vo) for vo in COMMUNITIES}
        stores = {vo: Store(cluster.client(deployment.url, keys[vo].base), keys[vo]) for vo in COMMUNITIES}
        slots = {vo: cluster.slot_of(stores[vo].client) for vo in COMMUNITIES}
        first = {vo: deployment.owner(slots[vo]) for vo in COMMUNITIES}
        assert sorted(first.values()) == [0, 1, 2]
        assert client_url(stores["a"].client) == deployment.url + f" (slot {slots['a']})"
        ids = {
            vo: stores[vo].submit(
                [job(queues=(QUEUE,), command=_payload(tmp_path / f"ran-{vo}"), name=f"{vo}{i}") for i in range(JOBS)]
            )
            for vo in COMMUNITIES
        }
        # Community a's pilots use their own ACL user, made on every node: no CLUSTER command among its rights.
        for i in range(len(deployment.nodes)):
            access.apply(deployment.admin(i), access.pilot_user("a"), "pw-a", access.pilot_rules("pf", "a"))
        urls = {vo: deployment.url for vo in COMMUNITIES}
        urls["a"] = deployment.url.replace("://", "://pf-pilot-a:pw-a@")
        env = pilot_env(tmp_path)

        def done(vo: str) -> int:
            return sum(j.state is JobState.DONE for j in stores[vo].jobs(ids[vo]))

        def finished() -> bool:
            for store in stores.values():
                store.requeue_expired()
            return all(done(vo) == JOBS for vo in COMMUNITIES)

        with ExitStack() as pilots:
            for vo in COMMUNITIES:
                for n in range(2):
                    pilots.enter_context(
                        running_pilot(urls[vo], tmp_path, "--vo", vo, "--idle-timeout", "30", env=env, name=f"{vo}{n}")
                    )
            wait_until(lambda: done("a") >= 3 and done("b") >= 3, what="a few jobs of a and b done")
            at = [time.time()]
            moved = deployment.migrate_classic(slots["a"], first["a"], (first["a"] + 1) % 3)
            at.append(time.time())
            deployment.migrate_atomic(slots["b"], first["b"], (first["b"] + 1) % 3)
            at.append(time.time())
            assert done("a") < JOBS and done("b") < JOBS, "the slots moved after the run"
            try:
                wait_until(quietly(finished), timeout=50, what="every job of every community done")
            except AssertionError:
                states = {vo: Counter(j.state.value for j in stores[vo].jobs(ids[vo])) for vo in COMMUNITIES}
                logs = "".join((tmp_path / f"{vo}{n}.err").read_text()[-2000:] for vo in "ab" for n in range(2))
                raise AssertionError(f"{states}\n{logs}") from None
            # Community a's pilots run their scripts on the slot's new owner (as their ACL user).
            new_owner = deployment.admin((first["a"] + 1) % 3)
            clients = new_owner.client_list()
            assert any(c["user"] == "pf-pilot-a" and c["cmd"].startswith("fcall") for c in clients), clients
        assert moved > 0
        runs = {vo: _runs(tmp_path / f"ran-{vo}") for vo in COMMUNITIES}
        for vo in COMMUNITIES:
            assert runs[vo][0] == Counter(ids[vo]), f"community {vo}: every payload ran exactly once"
            check_store(stores[vo])
        # What docs/operator/ha.md quotes (pytest -s shows it): how long each move took, and the longest
        # time community a and b went without a payload start around it (a pilot's round is 0.4 s here).
        print(
            f"\nclassic move of {moved} keys: {at[1] - at[0]:.3f} s, longest wait for a start in a: "
            f"{_longest_wait(runs['a'][1], at[0], at[1]):.3f} s; atomic move: {at[2] - at[1]:.3f} s, in b: "
            f"{_longest_wait(runs['b'][1], at[1], at[2]):.3f} s; in c (not moved): "
            f"{_longest_wait(runs['c'][1], at[0], at[2]):.3f} s"
        )
        for vo in ("a", "b"):  # the moved slots: all their keys on the new owner, none left behind
            assert deployment.owner(slots[vo]) == (first[vo] + 1) % 3
            old = deployment.admin(first[vo])
            assert old.execute_command("CLUSTER", "COUNTKEYSINSLOT", slots[vo]) == 0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    with cluster_set(tmp_path_factory.mktemp("cluster")) as started:
        yield started


def _store(deployment: ClusterSet, vo: str, url: str = "") -> Store:
    keys = Keys(vo=vo)
    return Store(cluster.client(url or deployment.url, keys.base), keys)


def test_the_library_is_on_every_primary_and_reloaded_where_lost(deployment: ClusterSet) -> None:
    store = _store(deployment, "lib")
    store.submit([job(queues=(QUEUE,))])
    for i in range(len(deployment.nodes)):
        listed = deployment.admin(i).function_list(library=library_name())
        assert len(listed) == 1, f"node {i} holds the library"
    owner = deployment.owner(cluster.slot_of(store.client))
    deployment.admin(owner).function_flush()  # as a primary that joined after the load holds none
    pilot_url = deployment.url.replace("://", "://pf-pilot-lib:pw@")
    for i in range(len(deployment.nodes)):
        access.apply(deployment.admin(i), access.pilot_user("lib"), "pw", access.pilot_rules("pf", "lib"))
    with pytest.raises(StoreUnavailable, match="holds no function pf_start"):
        _store(deployment, "lib", pilot_url).start("1", 1, "p")  # a pilot waits for the control plane
    assert [j.id for j in store.match(_offer())] == ["1"]  # the control plane loads it again and goes on
    assert len(deployment.admin(owner).function_list(library=library_name())) == 1


def test_a_subscription_hears_its_community_after_the_slot_moved(deployment: ClusterSet) -> None:
    store = _store(deployment, "wake")
    slot = cluster.slot_of(store.client)
    listener = store.subscribe(ignore_subscribe_messages=True)
    channels = [store.keys.wake_channel(QUEUE, shard) for shard in range(WAKE_SHARDS)]  # the job's is one
    for channel in channels:
        listener.subscribe(channel)
    assert listener.message(timeout=0.5) is None  # the first notice came: the server has the subscriptions
    owner = deployment.owner(slot)
    deployment.migrate_atomic(slot, owner, (owner + 1) % len(deployment.nodes))
    store.submit([job(queues=(QUEUE,))])  # publishes on the wake channel, from the slot's new owner
    heard = None
    for _ in range(20 + WAKE_SHARDS):  # the subscription notices first (read as None)
        heard = heard or listener.message(timeout=0.5)
    assert heard is not None and heard["channel"].decode() in channels
    listener.close()


def _offer() -> PilotOffer:
    return PilotOffer(pilot="p1", queue=QUEUE, cpu=1, mem=1000)


def test_messages_show_a_cluster_url_without_its_password() -> None:
    assert (
        shown_url("redis+cluster://pf-control:s3cret@r1:6379,r2:6379") == "redis+cluster://pf-control@r1:6379,r2:6379"
    )
    assert shown_url("rediss+cluster://r1:6379,r2:6379") == "rediss+cluster://r1:6379,r2:6379"


def test_a_slot_left_migrating_is_an_outage_until_the_move_ends(
    deployment: ClusterSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(deployment, "stuck")
    [submitted] = store.submit([job(queues=(QUEUE,))])
    slot = cluster.slot_of(store.client)
    source = deployment.owner(slot)
    target = (source + 1) % len(deployment.nodes)
    assert deployment.start_classic(slot, source, target) > 0  # every key on the target, the slot not yet
    monkeypatch.setattr(cluster, "PATIENCE", 0.3)
    with pytest.raises(StoreUnavailable, match=f"slot {slot} is still migrating after 0.3 s"):
        store.match(_offer())  # the source answers ASK: the call waits for the move's end, then gives up
    deployment.end_classic(slot, source, target)
    assert [j.id for j in store.match(_offer())] == [submitted]  # MOVED: followed to the new owner


def test_a_pilots_own_connection_follows_the_slot_when_no_reply_is_due(deployment: ClusterSet) -> None:
    store = _store(deployment, "own")
    first, second = store.submit([job(queues=(QUEUE,)), job(queues=(QUEUE,))])
    slot = cluster.slot_of(store.client)
    owner = deployment.owner(slot)
    channel = store.own_connection()
    store.send_exchange("p1", channel, offer=_offer()).receive()  # connects it to the owner
    target = (owner + 1) % len(deployment.nodes)
    deployment.migrate_atomic(slot, owner, target)
    assert store.job(first).state is JobState.MATCHED  # the client learns the new owner (MOVED)
    # Replies may still be due on the channel: it stays, its scripts answer MOVED and are redone alone.
    assert [j.id for j in store.send_exchange("p1", channel, offer=_offer()).receive().matched] == [second]
    assert channel.port == deployment.nodes[owner].port
    store.follow(channel)  # nothing due: to the new owner
    store.send_exchange("p1", channel, starts=[(first, 1, 0.0)]).receive()
    assert channel.port == deployment.nodes[target].port
    assert store.job(first).state is JobState.RUNNING
    store.give_back(channel)
