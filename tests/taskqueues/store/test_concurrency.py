"""Eight processes matching from the same queues at once: no job twice, every job exactly once."""

from __future__ import annotations

import multiprocessing as mp

from taskqueues.store import Store
from taskqueues.store.records import PilotOffer
from tests.support.store import job

QUEUES = ("s/c/a", "s/c/b")


def drain(url: str, pilot: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    store = Store.from_url(url)
    got: list[str] = []
    idle = 0
    while idle < 3:
        jobs = store.match(PilotOffer(f"p{pilot}", QUEUES[pilot % 2], 4, 4000), max_jobs=1 + pilot % 3)
        if not jobs:
            idle += 1
            continue
        idle = 0
        for j in jobs:
            store.complete(j.id, j.attempt, f"p{pilot}")
            got.append(j.id)
    out.put(got)


def test_eight_matchers_never_share_a_job(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    specs = [
        job(f"tq{i % 20}", score=i % 7, cpu=1 + i % 3, mem=100 * (1 + i % 4), queues=QUEUES if i % 5 else QUEUES[:1])
        for i in range(3000)
    ]
    ids = set(store.submit(specs))
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=drain, args=(redis_url, p, out)) for p in range(8)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    matched = [jid for r in results for jid in r]
    assert len(matched) == len(set(matched)), "a job was matched twice"
    assert set(matched) == ids
