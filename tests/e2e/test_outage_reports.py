"""Payloads that end while the store is down are recorded once, and not run again (issue 32, part 1).

A real pilot runs three payloads on a real ``redis-server`` (append-only file); the server is killed -9 while
they run and stays down longer than the lease, so they end during the outage and their leases expire by the
clock. A reaper runs beside it all along, as beat would. When the server is back, the pilot renews the leases
(the reaper's grace after a restart) and its waiting reports land: every job is done at its first attempt and
every payload ran once. Before, the pilot gave up its reports one lease after the failure, the reaper
requeued the jobs, and they ran to their end a second time while their first pilot lived.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from taskqueues.errors import StoreError
from taskqueues.store import Store
from taskqueues.store.records import JobState
from taskqueues.store.redis_server import RedisServer
from tests.support.polling import wait_until
from tests.support.store import job

QUEUE = "s/c/q"
LEASE = 6.0
JOBS = 3


class Reaper(threading.Thread):
    """The beat's reaper, every 0.3 s, riding out the outage as beat does (a failed call is tried again)."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.halt = threading.Event()
        self.requeued = 0

    def run(self) -> None:
        while not self.halt.wait(0.3):
            with contextlib.suppress(StoreError):  # the store is down: the next call tries again
                self.requeued += self.store.requeue_expired()[0]


def _pilot(tmp_path: Path, url: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "matcher.cli", "pilot", "--queue", QUEUE, "--lease", str(LEASE)),
                *("--idle-timeout", "3", "--no-events", "--cores", str(JOBS), "--mem", "1000", "-v"),
                *("--workdir", str(tmp_path / "work")),
                *("--payload-sandbox", "none"),  # the payloads mark their runs in tmp_path, which a sandbox hides
            ],
            env={**os.environ, "PILOTFISH_REDIS_URL": url},
            stdout=out,
            stderr=out,
        )


def _submit(store: Store, runs: Path, sleeps: tuple[float, ...] = (2,) * JOBS) -> list[str]:
    runs.mkdir()
    return store.submit(
        [job(tq="tqA", command=f"echo $$ >> {runs}/{n}; sleep {s}", queues=(QUEUE,)) for n, s in enumerate(sleeps)]
    )


def _wait_running(store: Store, ids: list[str], log: Path) -> None:
    wait_until(
        lambda: all(store.job(i).state is JobState.RUNNING for i in ids),
        timeout=30,
        interval=0.1,
        what=lambda: f"the payloads to run: {log.read_text()}",
    )


def _check_once(store: Store, ids: list[str], runs: Path, pilot: subprocess.Popen[bytes], log: Path) -> str:
    """Every job done at its first attempt, every payload ran once, the pilot ended well; returns its log."""
    assert pilot.wait(120) == 0, log.read_text()
    text = log.read_text()
    for i in ids:
        record = store.job(i)
        assert (record.state, record.attempt) == (JobState.DONE, 1), (i, record, text)
    for n in range(JOBS):
        assert len((runs / str(n)).read_text().split()) == 1, (n, text)
    assert "giving up" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("outage", [20.0])  # over three leases (8 s, one lease and a bit, passed too)
def test_payloads_ending_during_an_outage_longer_than_the_lease_run_once(tmp_path: Path, outage: float) -> None:
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    store = Store.from_url(server.url, lease_seconds=LEASE)
    runs = tmp_path / "runs"
    ids = _submit(store, runs)
    log = tmp_path / "pilot.log"
    reaper = Reaper(store)
    reaper.start()
    pilot = _pilot(tmp_path, server.url, log)
    try:
        _wait_running(store, ids, log)
        time.sleep(1.2)  # the append-only file is synced every second: the starts are on disk
        pid = server.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        down = time.monotonic()
        wait_until(lambda: len(list(runs.iterdir())) == JOBS, timeout=30, what="every payload to start")
        time.sleep(max(0.0, outage - (time.monotonic() - down)))  # the payloads end meanwhile
        server.start()
        text = _check_once(store, ids, runs, pilot, log)
        assert reaper.requeued == 0, text
    finally:
        reaper.halt.set()
        if pilot.poll() is None:
            pilot.kill()
        reaper.join(5)
        server.stop()


class QueuedReap(threading.Thread):
    """The reap a beat sends just before a paused store resumes, on a connection it already holds, so the
    server runs it first when it resumes, before the pilot's retries (on new connections, still in the listen
    backlog): it requeues every lease the pause let expire (what Store.requeue_expired does once it is past its
    reads, which a pause would hold up instead)."""

    def __init__(self, store: Store, client: redis.Redis) -> None:
        super().__init__(daemon=True)
        self.store, self.client = store, client
        self.requeued = 0

    def run(self) -> None:
        store, k, now = self.store, self.store.keys, time.time()
        reply = store.call_script(
            "reap",
            [k.jobs, k.leases, k.delayed, k.kills, k.tqempty, k.releasing],
            [k.base + ":", now, store.backoff, 500, now],
            [k.work, k.parked, *store.floors],
            client=self.client,
        )
        self.requeued = int(reply[1])


def test_payloads_ending_while_the_store_is_paused_longer_than_the_lease_run_once(tmp_path: Path) -> None:
    """A paused server (SIGSTOP: a frozen VM, a cut network) keeps its run id, so the reaper gives no grace
    when it resumes: it may requeue the leases that expired meanwhile. The pilot's waiting reports (and
    heartbeats) of those attempts take the jobs back, since nobody matched them since: each ran once. One
    payload ends during the pause (its report takes its job back), two outlive it (their heartbeats do)."""
    server = RedisServer(tmp_path / "redis").start()
    store = Store.from_url(server.url, lease_seconds=LEASE)
    runs = tmp_path / "runs"
    pause = LEASE + 4
    ids = _submit(store, runs, (2, pause + 4, pause + 4))
    log = tmp_path / "pilot.log"
    reaper = Reaper(store)
    reaper.start()
    pilot = _pilot(tmp_path, server.url, log)
    pid = server.pid()
    assert pid is not None
    beat = redis.Redis.from_url(server.url)
    try:
        _wait_running(store, ids, log)
        beat.ping()  # its connection is open before the pause
        os.kill(pid, signal.SIGSTOP)
        time.sleep(pause - 0.5)  # the leases expire by the clock; the first payload ends meanwhile
        reap = QueuedReap(store, beat)
        reap.start()
        time.sleep(0.5)
        os.kill(pid, signal.SIGCONT)
        reap.join(30)
        text = _check_once(store, ids, runs, pilot, log)
        requeued = reap.requeued + reaper.requeued
        taken = int(store.client.hget(store.keys.stats, "taken_back") or 0)
        print(f"paused {pause:.0f} s, lease {LEASE:.0f} s: {requeued} requeued, {taken} taken back")
        assert requeued >= JOBS - 1, text  # the two payloads that outlive the pause at least
        assert taken == requeued, (taken, requeued, text)  # every requeued job was taken back
    finally:
        os.kill(pid, signal.SIGCONT)
        reaper.halt.set()
        if pilot.poll() is None:
            pilot.kill()
        reaper.join(5)
        beat.close()
        server.stop()
