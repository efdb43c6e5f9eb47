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


@pytest.mark.parametrize("outage", [20.0])  # over three leases (8 s, one lease and a bit, passed too)
def test_payloads_ending_during_an_outage_longer_than_the_lease_run_once(tmp_path: Path, outage: float) -> None:
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    store = Store.from_url(server.url, lease_seconds=LEASE)
    runs = tmp_path / "runs"
    runs.mkdir()
    ids = store.submit([job(tq="tqA", command=f"echo $$ >> {runs}/{n}; sleep 2", queues=(QUEUE,)) for n in range(JOBS)])
    log = tmp_path / "pilot.log"
    reaper = Reaper(store)
    reaper.start()
    with open(log, "wb") as out:
        pilot = subprocess.Popen(
            [
                *(sys.executable, "-m", "matcher.cli", "pilot", "--queue", QUEUE, "--lease", str(LEASE)),
                *("--idle-timeout", "3", "--no-events", "--cores", str(JOBS), "--mem", "1000", "-v"),
                *("--workdir", str(tmp_path / "work")),
                *("--payload-sandbox", "none"),  # the payloads mark their runs in tmp_path, which a sandbox hides
            ],
            env={**os.environ, "PILOTFISH_REDIS_URL": server.url},
            stdout=out,
            stderr=out,
        )
    try:
        wait_until(
            lambda: all(store.job(i).state is JobState.RUNNING for i in ids),
            timeout=30,
            interval=0.1,
            what=lambda: f"the payloads to run: {log.read_text()}",
        )
        time.sleep(1.2)  # the append-only file is synced every second: the starts are on disk
        pid = server.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        down = time.monotonic()
        wait_until(lambda: len(list(runs.iterdir())) == JOBS, timeout=30, what="every payload to start")
        time.sleep(max(0.0, outage - (time.monotonic() - down)))  # the payloads end meanwhile
        server.start()
        assert pilot.wait(120) == 0, log.read_text()
        text = log.read_text()
        for i in ids:
            record = store.job(i)
            assert (record.state, record.attempt) == (JobState.DONE, 1), (i, record, text)
        for n in range(JOBS):
            assert len((runs / str(n)).read_text().split()) == 1, (n, text)
        assert reaper.requeued == 0, text
        assert "giving up" not in text and "Traceback" not in text, text
    finally:
        reaper.halt.set()
        if pilot.poll() is None:
            pilot.kill()
        reaper.join(5)
        server.stop()
