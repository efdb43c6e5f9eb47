"""Single faults, one test each: what a kill -9 of one component does, on real processes and a real Redis.

The director-restart wedge first (issue 21): a director and its pilot killed, a new director started as a
supervisor would, and the site must go on: the new director takes over (adopts) the pilots the dead one
left, counts them while they live, forgets them once they are gone, and retires what nobody can answer
for. Jobs the killed pilot held come back through lease expiry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from matcher.submission import JobSpec, Submitter
from pilot.director.service import Director, QueueReport
from taskqueues.context import Context
from taskqueues.errors import StoreUnavailable
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer
from taskqueues.store.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.polling import wait_until
from tests.support.store import job

QUEUE = "L/host/q"
CATALOG = """
[sites.L.ces.host]
[sites.L.ces.host.batch_options]
grace = 1
[sites.L.ces.host.queues.q]
n_max_queued = 1
max_running = 1
wall_granularity = 60
shapes = [{ name = "c1", cpu = 1, mem = "300M", wall = "10m", cost = 1.0 }]
"""


class Site:
    """A local site: the test's Redis, a catalog of one queue of at most one pilot, directors as processes."""

    def __init__(self, tmp: Path, redis_url: str, **settings: object) -> None:
        self.tmp = tmp
        (tmp / "catalog.toml").write_text(CATALOG)
        values: dict[str, object] = {
            "redis_url": redis_url,
            "pilot_redis_url": redis_url,
            "catalog": str(tmp / "catalog.toml"),
            "state_dir": str(tmp / "state"),
            "lease_seconds": 3.0,
            "backoff_seconds": 0.0,
            "pilot_idle_timeout": 2.0,
            "pilot_events": False,
            "director_interval": 0.5,
            **settings,
        }
        self.settings = Settings().with_(**values)
        self.ctx = Context(self.settings)
        self.env = {**os.environ, **{f"PILOTFISH_{k.upper()}": str(v) for k, v in values.items()}}
        self.directors: list[subprocess.Popen[bytes]] = []

    def submit(self, n: int, seconds: float) -> list[str]:
        jobs = [
            JobSpec(
                name=f"j{i}",
                command=f"sleep {seconds}",
                ete=seconds,
                requirements={"Site": "L", "cpu": 1, "mem": "100M", "wall": "5m"},
            )
            for i in range(n)
        ]
        return list(Submitter.of(self.ctx).submit(jobs, name="faults").ids.values())

    def start_director(self) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"director-{len(self.directors)}.log", "wb")  # noqa: SIM115 - the process holds it
        process = subprocess.Popen(
            [sys.executable, "-m", "matcher.cli", "director", "--log-dir", str(self.tmp / "logs")],
            cwd=self.tmp,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.directors.append(process)
        return process

    def pilot_pids(self) -> list[int]:
        """Pids of the pilots alive now (from their own heartbeat records)."""
        pids = [int(r["pid"]) for r in self.ctx.store.pilot_records(30).values() if not r.get("stopped")]
        return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]

    def provisioned(self) -> dict[str, dict[str, object]]:
        raw = self.ctx.client.hgetall(self.ctx.keys.provisioned)
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def states(self, ids: list[str]) -> list[JobState]:
        return [j.state for j in self.ctx.store.jobs(ids)]

    def failure(self, what: str) -> Callable[[], str]:
        """What a wait for ``what`` says when it fails: the director's records and logs at that moment."""

        def described() -> str:
            logs = "\n".join(p.read_text()[-1500:] for p in sorted(self.tmp.glob("director-*.log")))
            return f"{what}; provisioned {self.provisioned()}\n{logs}"

        return described

    def reap(self) -> None:
        self.ctx.store.requeue_expired()

    def close(self) -> None:
        for process in self.directors:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
        for pid in self.pilot_pids():
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def site(tmp_path: Path, redis_url: str) -> Iterator[Site]:
    made = Site(tmp_path, redis_url)
    yield made
    made.close()


def test_a_director_killed_with_its_pilot_does_not_wedge_the_site(site: Site) -> None:
    """The issue's reproduction: before, the new director's local backend answered UNKNOWN ('not submitted
    here') for the dead pilot's record forever, which held the queue's only place (max_running 1) and
    absorbed the demand: nothing ran again."""
    ids = site.submit(6, 1.0)
    first = site.start_director()
    wait_until(lambda: bool(site.pilot_pids()), timeout=30, interval=0.2, what=site.failure("a first pilot runs"))
    [pilot] = site.pilot_pids()
    first.kill()
    os.killpg(pilot, signal.SIGKILL)  # its guardian then kills the payload it ran
    first.wait()
    site.start_director()
    wait_until(
        lambda: all(s is JobState.DONE for s in site.states(ids)),
        timeout=90,
        interval=0.2,
        what=site.failure("every job done"),
        between=site.reap,
    )


def test_a_new_director_counts_the_pilot_a_dead_one_left_and_forgets_it_when_it_ends(site: Site) -> None:
    ids = site.submit(4, 1.0)
    first = site.start_director()
    wait_until(lambda: bool(site.pilot_pids()), timeout=30, interval=0.2, what=site.failure("a first pilot runs"))
    [orphan] = site.pilot_pids()
    first.kill()
    first.wait()
    site.start_director()
    most = 0

    def sample() -> None:
        nonlocal most
        most = max(most, len(site.pilot_pids()))
        site.reap()

    wait_until(
        lambda: all(s is JobState.DONE for s in site.states(ids)),
        timeout=60,
        interval=0.2,
        what=site.failure("the orphan's work done"),
        between=sample,
    )
    wait_until(
        lambda: not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE,
        timeout=30,
        interval=0.2,
        what=site.failure("the orphan idled out"),
        between=sample,
    )
    assert most == 1, "the adopted pilot counted against max_running = 1: no second pilot beside it"
    more = site.submit(2, 0.2)  # new demand after the orphan is gone: the queue's place is free again
    wait_until(
        lambda: all(s is JobState.DONE for s in site.states(more)),
        timeout=60,
        interval=0.2,
        what=site.failure("new work done"),
        between=sample,
    )


def test_a_pilot_nobody_answers_for_is_retired_after_its_silence(
    tmp_path: Path, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A record no backend can answer for (started on another host) and with no heartbeat is retired, with
    one log line, once it has been silent for pilot_retire_after; until then it counts."""
    site = Site(tmp_path, redis_url, pilot_retire_after=2.0)
    director = Director(site.ctx, log_dir=str(tmp_path / "logs"))
    try:
        key = f"{QUEUE}|local|local-999-1"
        record = {
            "shape": "c1",
            "state": "QUEUED",
            "submitted": time.time(),
            "wall": 600,
            "jobs": 1,
            "options": "",
            "queue": QUEUE,
            "kind": "local",
            "batch_id": "local-999-1",
            "host": "elsewhere.example.org",
            "pid": 4242,
            "ctime": 1.0,
        }
        site.ctx.client.hset(site.ctx.keys.provisioned, key, json.dumps(record))
        site.submit(1, 0.1)
        report = director.cycle().queues[QUEUE]
        assert report.submitted == [] and key.split("|")[2] not in report.ended, "it still counts (max_running 1)"

        def retired() -> QueueReport | None:
            report = director.cycle().queues[QUEUE]
            return report if "local-999-1" in report.ended else None

        with caplog.at_level("WARNING", logger="pilot.director.service"):
            report = wait_until(retired, timeout=30, interval=0.2, what="the silent record retired")
        assert "retired" in report.ended["local-999-1"]
        assert [r.getMessage() for r in caplog.records if "retired" in r.getMessage()], "one log line says so"
        assert len(report.submitted) == 1, "its place went to the waiting demand"
    finally:
        director.stop_all()
        director.close()


def test_a_killed_director_holds_the_director_lock_only_a_few_intervals(site: Site) -> None:
    """A director killed mid-cycle leaves its lock behind; another provisions once it expires (3 director
    intervals, at least 10 s), not after the two minutes it used to be."""
    director = Director(site.ctx, log_dir=str(site.tmp / "logs"))
    try:
        site.ctx.client.set(site.ctx.keys.lock("director"), "a dead director's token", px=int(director.lock_ttl * 1000))
        ids = site.submit(1, 0.1)
        assert director.cycle().skipped
        assert director.lock_ttl == 10.0
        wait_until(
            lambda: not director.cycle().skipped,
            timeout=director.lock_ttl + 2,
            interval=0.2,
            what=site.failure("provisioned once the dead director's lock expired"),
        )
        wait_until(
            lambda: site.states(ids) == [JobState.DONE],
            timeout=30,
            interval=0.2,
            what=site.failure("the job ran"),
            between=director.cycle,
        )
    finally:
        director.stop_all()
        director.close()


def test_a_pilot_keeps_its_payload_through_a_redis_outage_shorter_than_its_lease(tmp_path: Path) -> None:
    """Redis killed -9 while a payload runs and started again once the pilot noticed (its append-only file keeps
    the data): the payload runs on, its end is reported when the store answers, the job is done at its first attempt;
    the pilot's log says one line when the outage starts and one when it ends."""
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    store = Store.from_url(server.url, lease_seconds=10)
    (job_id,) = store.submit([job(command="sleep 4", queues=("s/c/q",))])
    log = tmp_path / "pilot.log"
    env = {**os.environ, "PILOTFISH_REDIS_URL": server.url}
    with open(log, "wb") as out:
        pilot = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "matcher.cli",
                "pilot",
                "--queue",
                "s/c/q",
                "--lease",
                "10",
                "--idle-timeout",
                "3",
                "--no-events",
                "--cores",
                "1",
                "--mem",
                "1000",
                "--workdir",
                str(tmp_path / "work"),
            ],
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        wait_until(
            lambda: store.job(job_id).state is JobState.RUNNING,
            timeout=30,
            interval=0.1,
            what=lambda: f"the payload to run: {log.read_text()}",
        )
        pid = server.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: "the store is unreachable" in log.read_text(),
            timeout=30,
            interval=0.1,
            what="the pilot to notice the outage",
        )
        server.start()
        assert pilot.wait(60) == 0, log.read_text()
        record = store.job(job_id)
        assert (record.state, record.attempt) == (JobState.DONE, 1), log.read_text()
        text = log.read_text()
        assert text.count("the store is unreachable") == 1 and text.count("the store answers again") == 1, text
        assert "Traceback" not in text, text
    finally:
        if pilot.poll() is None:
            pilot.kill()
        server.stop()


def test_no_lease_is_requeued_within_a_lease_of_a_server_restart(tmp_path: Path) -> None:
    """A restart is an outage for every pilot: leases that expired meanwhile are not a dead pilot's, and live
    pilots renew them once they are back; so the reaper requeues none for half a lease after it saw the
    restart."""
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    clock = FakeClock()
    store = Store.from_url(server.url, lease_seconds=30, clock=clock)
    try:
        (job_id,) = store.submit([job(queues=("s/c/q",))])
        assert store.match(PilotOffer("p1", "s/c/q", 1, 1000, 0, None))
        assert store.requeue_expired() == (0, 0, 0)  # the reaper has seen this server run
        server.stop()
        server.start()  # the same port and data (append-only file)
        clock.now += 31  # expired, by the clock
        assert store.requeue_expired() == (0, 0, 0)
        assert store.job(job_id).state is JobState.MATCHED
        clock.now += 14
        assert store.requeue_expired() == (0, 0, 0)
        clock.now += 2  # half a lease since the reaper saw the restart
        assert store.requeue_expired() == (1, 0, 1)
    finally:
        server.stop()


def test_an_exchange_whose_connection_an_outage_closed_says_the_store_is_unreachable(redis_url: str) -> None:
    """Found by the chaos run: an outage drops every pooled connection (Store.drop_connections), the pilot's
    own exchange connection included; reading the replies of an exchange in flight on it then raised an
    AttributeError from redis-py's parser, which killed the pilot."""
    store = Store.from_url(redis_url)
    (job_id,) = store.submit([job(queues=("s/c/q",))])
    conn = store.client.connection_pool.get_connection()
    try:
        pending = store.send_exchange("p1", conn, offer=PilotOffer("p1", "s/c/q", 1, 1000, 0, None))
        # What Store.drop_connections does in a pilot, whose process has one thread; a pytest-xdist worker has
        # execnet's besides, where drop_connections leaves checked-out connections alone (threads may be using them).
        store.client.connection_pool.disconnect(inuse_connections=True)
        assert pending.ready(), "a closed connection is ready: its reader must learn it is closed"
        with pytest.raises(StoreUnavailable, match="connection closed"):
            pending.receive()
    finally:
        store.client.connection_pool.release(conn)
    assert store.job(job_id).state in (JobState.WAITING, JobState.MATCHED)


def test_the_replies_of_an_exchange_are_read_only_from_the_socket_it_was_written_on(redis_url: str) -> None:
    """An outage closed the pilot's exchange connection with a reply due, and the next exchange reconnected it:
    the first one's reply is lost (unreachable), it must not read the second one's."""
    store = Store.from_url(redis_url)
    (job_id,) = store.submit([job(queues=("s/c/q",))])
    conn = store.client.connection_pool.get_connection()
    try:
        first = store.send_exchange("p1", conn, starts=[("no-such-job", 1, time.time())])
        store.client.connection_pool.disconnect(inuse_connections=True)  # as in the test above
        second = store.send_exchange("p1", conn, offer=PilotOffer("p1", "s/c/q", 1, 1000, 0, None))
        assert first.ready(), "an exchange whose socket was closed is ready: its reader must learn it is lost"
        with pytest.raises(StoreUnavailable, match="connection closed"):
            first.receive()
        assert [j.id for j in second.receive().matched] == [job_id]
    finally:
        store.client.connection_pool.release(conn)
