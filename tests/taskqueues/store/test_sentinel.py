"""Redis Sentinel: the store and real pilots on a ``sentinel://`` URL ride out a SIGKILL of the primary.

A real primary, replica and three sentinels (tests/support/sentinel.py); the primary is killed while pilots run
a workflow's jobs; the sentinels promote the replica, every client finds it by itself, and every job ends
done. The control plane's part here is the reaper (Store.requeue_expired), run as the worker runs it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from taskqueues.errors import ConfigError, StoreUnavailable
from taskqueues.store import Store, sentinel
from taskqueues.store.guard import client_url
from taskqueues.store.records import JobState
from taskqueues.store.records import text as _text
from tests.support.pilots import QUEUE, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.sentinel import MASTER, quietly, sentinel_set
from tests.support.store import job


def test_the_url_is_celerys_form() -> None:
    parsed = sentinel.SentinelURL.parse("sentinel://u:p%40w@h1:26380/2;sentinel://h2;sentinel://h3:26381")
    assert parsed.sentinels == (("h1", 26380), ("h2", 26379), ("h3", 26381))
    assert (parsed.username, parsed.password, parsed.db) == ("u", "p@w", 2)
    with pytest.raises(ConfigError, match="redis://h2"):
        sentinel.SentinelURL.parse("sentinel://h1:1;redis://h2:2")
    assert sentinel.transport_options("sentinel://h1:1", "m") == {"master_name": "m"}
    assert sentinel.transport_options("redis://h1:1") == {}


def test_a_run_completes_across_a_failover(tmp_path: Path) -> None:
    with sentinel_set(tmp_path / "redis") as deployment:
        client = sentinel.client(deployment.url, master=MASTER)
        assert client_url(client) == f"sentinel://{MASTER}/0"
        store = Store(client, lease_seconds=6, submit_replicas=1)  # acknowledged once the replica holds it
        ids = store.submit([job(queues=(QUEUE,), command="sleep 0.3", name=f"j{i}") for i in range(24)])
        env = {**pilot_env(tmp_path), sentinel.MASTER_VARIABLE: MASTER}
        first = deployment.primary.pid()
        assert first is not None
        with (
            running_pilot(deployment.url, tmp_path, "--lease", "6", "--idle-timeout", "30", env=env, name="a"),
            running_pilot(deployment.url, tmp_path, "--lease", "6", "--idle-timeout", "30", env=env, name="b"),
        ):
            wait_until(
                quietly(lambda: sum(j.state is JobState.DONE for j in store.jobs(ids)) >= 4), what="a few jobs done"
            )
            os.kill(first, signal.SIGKILL)
            wait_until(
                quietly(lambda: deployment.primary_port() == deployment.replica.port), what="the replica promoted"
            )

            def finished() -> bool:
                try:
                    store.requeue_expired()
                    return all(j.state is JobState.DONE for j in store.jobs(ids))
                except StoreUnavailable:
                    return False

            try:
                wait_until(quietly(finished), timeout=50, what="every job done after the failover")
            except AssertionError:
                from collections import Counter

                logs = "".join((tmp_path / f"{n}.err").read_text()[-3000:] for n in "ab")
                raise AssertionError(f"{Counter(j.state.value for j in store.jobs(ids))}\n{logs}") from None
        promoted = redis.Redis(port=deployment.replica.port)
        assert promoted.info("replication")["role"] == "master"
        # The reaper saw the new primary's run: its restart grace started there (the pilots were cut off too).
        assert promoted.hget(store.keys.cursor, "reap:run") == promoted.info("server")["run_id"].encode()


def test_a_primary_without_replicas_acknowledges_at_once(real_redis: redis.Redis) -> None:
    store = Store(real_redis, submit_timeout=30)  # the default submit_replicas = 1: no replica, no wait
    assert store.submit([job(queues=(QUEUE,)), job(queues=(QUEUE,))]) == ["1", "2"]
    assert real_redis.hget(store.keys.idrange, "ceil") == b"2"  # without a replica the ceiling follows the ids


def test_a_lossy_failover_loses_no_acknowledged_submission_and_reuses_no_id(tmp_path: Path) -> None:
    """The issue's failover: the replica falls behind (SIGSTOP, its link cut), submissions go on, the
    primary is killed and the stale replica promoted. With the defaults, every submission that was
    acknowledged is on the new primary, and the next ids are above every id the old primary gave."""
    with sentinel_set(tmp_path / "redis") as deployment:
        client = sentinel.client(deployment.url, master=MASTER)
        store = Store(client, submit_timeout=30)  # the defaults, patient on a busy machine
        hasty = Store(client, submit_timeout=1)  # for the submissions that cannot be acknowledged
        acknowledged = {i: store.job(i) for _ in range(3) for i in store.submit([job(queues=(QUEUE,))] * 2)}
        old = redis.Redis(port=deployment.primary.port)
        replica = deployment.replica.pid()
        assert replica is not None
        os.kill(replica, signal.SIGSTOP)
        try:
            old.execute_command("CLIENT", "KILL", "TYPE", "replica")  # nothing more reaches the replica
            refused = 0
            for _ in range(3):
                try:
                    for i in hasty.submit([job(queues=(QUEUE,))] * 2):
                        acknowledged[i] = store.job(i)
                except StoreUnavailable as exc:
                    assert "replicas acknowledged them within 1 s" in str(exc)
                    refused += 1
            given = {_text(i) for i in old.hkeys(store.keys.jobs)}
            assert refused == 3 and len(given) == 12  # stored on the primary, never acknowledged
            first = deployment.primary.pid()
            assert first is not None
            os.kill(first, signal.SIGKILL)
        finally:
            os.kill(replica, signal.SIGCONT)
        wait_until(quietly(lambda: deployment.primary_port() == deployment.replica.port), what="the replica promoted")
        promoted = redis.Redis(port=deployment.replica.port)
        assert {_text(i) for i in promoted.hkeys(store.keys.jobs)} < given  # the failover lost writes
        after: list[str] = []

        def submitted() -> bool:
            try:
                after.extend(store.submit([job(queues=(QUEUE,))]))
            except StoreUnavailable:  # the sentinels still electing, or the client still asking them
                return False
            return True

        wait_until(submitted, timeout=30, what="a submission accepted by the new primary")
        assert {i: store.job(i) for i in acknowledged} == acknowledged
        assert int(after[0]) > max(map(int, given)), (after, sorted(given, key=int))


def test_the_celery_broker_takes_the_same_url_across_a_failover(tmp_path: Path) -> None:
    from celery import Celery

    with sentinel_set(tmp_path / "redis") as deployment:
        app = Celery("pf-sentinel-test", broker=deployment.url, set_as_current=False)
        app.conf.broker_transport_options = sentinel.transport_options(deployment.url, MASTER)
        with app.connection_for_write() as conn:
            queue = conn.SimpleQueue("pf-test")
            queue.put({"n": 1})
        wait_until(
            quietly(lambda: redis.Redis(port=deployment.replica.port).llen("pf-test") == 1),
            what="the message on the replica",
        )
        first = deployment.primary.pid()
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(quietly(lambda: deployment.primary_port() == deployment.replica.port), what="the replica promoted")
        with app.connection_for_write() as conn:
            queue = conn.SimpleQueue("pf-test")
            queue.put({"n": 2})
            got = [queue.get(timeout=10), queue.get(timeout=10)]
            for message in got:
                message.ack()
            assert [m.payload for m in got] == [{"n": 1}, {"n": 2}]


def test_a_primary_that_lost_the_data_is_told(real_redis: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """What a promoted replica that never synced looks like to the reaper: the cursor it wrote is gone."""
    store = Store(real_redis)
    store.requeue_expired()
    store.requeue_expired()
    assert "holds nothing of" not in caplog.text
    real_redis.flushall()
    store.requeue_expired()
    assert "holds nothing of pf:{default}'s reaper cursor" in caplog.text


def test_no_id_is_given_past_a_ceiling_no_replica_acknowledged(tmp_path: Path) -> None:
    """The ceiling's own WAIT: a submission that needs ids past it, while the replica does not answer,
    stores nothing (a failover could otherwise give those ids again)."""
    with sentinel_set(tmp_path / "redis") as deployment:
        client = sentinel.client(deployment.url, master=MASTER)
        store = Store(client, submit_timeout=30)
        store.submit([job(queues=(QUEUE,))])
        primary = redis.Redis(port=deployment.primary.port)
        primary.hset(store.keys.idrange, "ceil", 1)  # as if the block were used up
        replica = deployment.replica.pid()
        assert replica is not None
        os.kill(replica, signal.SIGSTOP)
        try:
            with pytest.raises(
                StoreUnavailable, match=r"acknowledged the next job ids within 0\.5 s: nothing was stored"
            ):
                Store(client, submit_timeout=0.5).submit([job(queues=(QUEUE,))])
            assert primary.hlen(store.keys.jobs) == 1 and primary.get(store.keys.seq) == b"1"
        finally:
            os.kill(replica, signal.SIGCONT)
        assert store.submit([job(queues=(QUEUE,))]) == ["2"]  # the replica answers again: the ceiling is raised
        assert int(primary.hget(store.keys.idrange, "ceil") or 0) == 2 + 10000
