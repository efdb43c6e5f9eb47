"""Reservations end to end: a real pilot process, real payloads, 1-core jobs that keep arriving, and a 4-core
job that must start anyway (match.lua's EASY backfill; without it every core a 1-core job frees is refilled
at once by the next one, and the 4-core job waits until they stop coming)."""

from __future__ import annotations

import time
from pathlib import Path

from matcher.explain import explain
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from taskqueues.store.records import JobState
from taskqueues.store.reservations import read_reservations
from tests.support.pilots import finish, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job

#: 1-core jobs the feeder submits at most: the 4-core job must be done long before they run out.
BAG = 60
#: 1-core jobs kept waiting while the feeder runs (the pilot takes at most 4 at a time).
BACKLOG = 12
CATALOG = """
[sites.site]
[sites.site.ces.ce]
[sites.site.ces.ce.queues.q1]
shapes = [{ name = "four", cpu = 4, mem = "4G" }]
"""  # the queue of storehelp.job and of the pilot (test_pilot_support.QUEUE)


def sleep(i: int) -> float:
    """The run time of the i-th 1-core job: the first four end at different times (so the pilot holds its
    free cores for a while before the 4-core job fits), the others 1.5 s each."""
    return (0.5, 1.0, 2.5, 3.0)[i] if i < 4 else 1.5


def test_a_four_core_job_starts_while_one_core_jobs_keep_arriving(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url, lease_seconds=60)
    submitted: list[str] = []

    def feed() -> None:
        """Keep BACKLOG 1-core jobs waiting (less urgent than the 4-core one), until BAG were submitted. Scores
        are dates, as the Submitter makes them: the 1-core jobs should start 100 s from now or later, so bounded
        reservations (the default) hold them back as EASY's do."""
        waiting = sum(1 for j in store.jobs(submitted) if j.state is JobState.WAITING)
        more = min(BACKLOG - waiting, BAG - len(submitted))
        if more > 0:
            base = len(submitted)
            submitted.extend(
                store.submit(
                    [
                        job(
                            "narrow",
                            cpu=1,
                            mem=100,
                            ete=sleep(base + i),
                            score=time.time() + 100 + base + i,
                            command=f"sleep {sleep(base + i)}",
                        )
                        for i in range(more)
                    ]
                )
            )

    env = pilot_env(tmp_path, cores=4, mem=4000)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "2", env=env) as proc:
        feed()
        # the pilot is full of 1-core jobs before the 4-core one arrives
        wait_until(
            lambda: (feed(), sum(j.state is JobState.RUNNING for j in store.jobs(submitted)) == 4)[1],
            timeout=30,
            what="four 1-core jobs running",
        )
        (wide,) = store.submit([job("wide", cpu=4, mem=100, ete=0.5, score=time.time(), command="sleep 0.5")])
        seen: list[str] = []

        def wide_done() -> bool:
            feed()
            if store.job(wide).state is JobState.WAITING and read_reservations(store.client, store.keys)[0]:
                seen.extend(explain(store, Catalog.loads(CATALOG), wide).reservations)
            return store.job(wide).state is JobState.DONE or len(submitted) >= BAG

        wait_until(wide_done, timeout=300, what="the 4-core job done or the 1-core jobs exhausted", interval=0.05)
        finished_first = store.job(wide).state is JobState.DONE
        left = BAG - len(submitted)
        log = ""
        if finished_first:
            wait_until(
                lambda: all(j.state.final for j in store.jobs(submitted)), timeout=120, what="the 1-core jobs done"
            )
            log = finish(proc, tmp_path, 60)
    assert finished_first, f"the 4-core job starved: {BAG} 1-core jobs went first\n{log}"
    assert left > 0
    assert any("holds cores for this job" in line for line in seen), seen
