"""Running limits under concurrent pilots: six processes lease from two sites at once and keep what they get;
no group ever holds more cores than its limits allow, no type more jobs, and the counters end at zero."""

from __future__ import annotations

import multiprocessing as mp

import redis

from taskqueues.store import Store
from taskqueues.store.fairshare import Policy
from taskqueues.store.keys import account_of
from taskqueues.store.records import PilotOffer
from tests.support.store import check_store, job

QUEUES = ("s1/c/a", "s2/c/b")
POLICY = Policy(
    shares={"g1": 1, "g2": 1, "g3": 1}, cores={("g1", "*"): 7, ("g2", "s2"): 5, ("g3", "s1/c/a"): 3}, jobs={"reco": 4}
)


def hold(url: str, pilot: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Lease until nothing more comes, keeping every job; report (job id, task queue, cores, queue)."""
    store = Store.from_url(url)
    queue = QUEUES[pilot % 2]
    got: list[tuple[str, str, int, str]] = []
    idle = 0
    while idle < 3:
        jobs = store.match(PilotOffer(f"p{pilot}", queue, 64, 64000), max_jobs=1 + pilot % 3)
        idle = idle + 1 if not jobs else 0
        got += [(j.id, j.tq_id, j.cpu, queue) for j in jobs]
    out.put(got)


def test_concurrent_pilots_never_pass_a_limit(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    store.shares.publish(POLICY)
    tqs = ("t1.g1.ann", "t2.g1.bob.reco", "t3.g2.cy", "t4.g3.dee.reco", "t5.g3.dee")
    # g2 runs only at s2, g3's second task queue only at s1/c/a: the limits there are reached whichever pilots
    # start first.
    where = {"t3.g2.cy": QUEUES[1:], "t5.g3.dee": QUEUES[:1]}
    specs = [job(tqs[i % 5], score=i % 7, cpu=1 + i % 2, queues=where.get(tqs[i % 5], QUEUES)) for i in range(400)]
    store.submit(specs)
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=hold, args=(redis_url, p, out)) for p in range(6)]
    for p in procs:
        p.start()
    held = [row for _ in procs for row in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=30)
    assert len({row[0] for row in held}) == len(held), "a job was leased twice"
    cores: dict[tuple[str, str], int] = {}
    reco = 0
    for _, tq, cpu, queue in held:
        group, _, job_type = account_of(tq)
        for where in ("*", queue.split("/")[0], queue):
            cores[(group, where)] = cores.get((group, where), 0) + cpu
        reco += job_type == "reco"
    for (group, where), limit in POLICY.cores.items():
        assert cores.get((group, where), 0) <= limit, (group, where)
        assert cores.get((group, where), 0) >= limit - 1, f"{group}@{where}: a limit, not a lost lease, stops it"
    assert reco == 4
    check_store(store)
    for leased in store.jobs([row[0] for row in held]):
        store.complete(leased.id, leased.attempt, leased.pilot)
    client: redis.Redis = store.client
    fair = {k.decode(): v.decode() for k, v in client.hgetall(store.keys.fair).items()}
    assert {k: v for k, v in fair.items() if not k.startswith("u:") and v != "0"} == {}
    check_store(store)
