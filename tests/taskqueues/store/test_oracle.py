"""match against a brute-force oracle over random jobs, pilots and operation sequences (real Redis).

The oracle is the plain-Python definition: among the task queues the pilot's queue is eligible for,
take each queue's head (lowest score, ties by member), keep the heads whose exact resources fit what is
free and whose estimate fits the time left, and return the most urgent (ties by task-queue id).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer, member_tail
from tests.support.clock import FakeClock
from tests.support.store import check_heads, job

QUEUES = ["s/c/q0", "s/c/q1", "s/c/q2"]
TQS = {  # task queue -> its eligible queues
    "ta": ("s/c/q0",), "tb": ("s/c/q0", "s/c/q1"), "tc": ("s/c/q1", "s/c/q2"), "td": tuple(QUEUES),
}


@dataclass
class OracleJob:
    id: str
    tq: str
    score: float
    cpu: int
    mem: int
    ete: int
    retries: int = 0
    state: str = "waiting"

    @property
    def member(self) -> str:
        return self.id + member_tail(self.cpu, self.mem, 0, self.ete)


@dataclass
class Oracle:
    jobs: dict[str, OracleJob] = field(default_factory=dict)

    def pick(self, queue: str, cpu: int, mem: int, left: float | None) -> OracleJob | None:
        heads = []
        for tq, queues in TQS.items():
            if queue not in queues:
                continue
            waiting = [j for j in self.jobs.values() if j.tq == tq and j.state == "waiting"]
            if not waiting:
                continue
            head = min(waiting, key=lambda j: (j.score, j.member.encode()))
            if head.cpu <= cpu and head.mem <= mem and (left is None or head.ete <= left):
                heads.append((head.score, tq, head))
        return min(heads, key=lambda h: (h[0], h[1]))[2] if heads else None


job_st = st.tuples(st.sampled_from(sorted(TQS)), st.integers(0, 5), st.integers(1, 4),
                   st.sampled_from([100, 200, 400]), st.sampled_from([0, 60, 600]))
op_st = st.one_of(
    st.tuples(st.just("submit"), st.lists(job_st, min_size=1, max_size=6)),
    st.tuples(st.just("match"), st.sampled_from(QUEUES), st.integers(0, 4), st.sampled_from([0, 150, 250, 1000]),
              st.sampled_from([None, 30, 100, 1000]), st.integers(1, 3)),
    st.tuples(st.just("complete"), st.integers(0, 50)),
    st.tuples(st.just("expire")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_st, min_size=1, max_size=25))
def test_match_agrees_with_the_oracle(real_redis: redis.Redis, ops: list[tuple]) -> None:
    real_redis.flushall()
    clock = FakeClock()
    store = Store(real_redis, lease_seconds=30, backoff=1, clock=clock)
    oracle = Oracle()
    for op in ops:
        if op[0] == "submit":
            specs = [job(tq, score=score, cpu=cpu, mem=mem, ete=ete, queues=TQS[tq], max_retries=1)
                     for tq, score, cpu, mem, ete in op[1]]
            for jid, (tq, score, cpu, mem, ete) in zip(store.submit(specs), op[1], strict=True):
                oracle.jobs[jid] = OracleJob(jid, tq, score, cpu, mem, ete)
        elif op[0] == "match":
            _, queue, cpu, mem, left, n = op
            got = store.match(PilotOffer("p", queue, cpu, mem, 0, left), max_jobs=n)
            expected = []
            for _ in range(n):
                pick = oracle.pick(queue, cpu, mem, left)
                if pick is None:
                    break
                pick.state = "matched"
                expected.append(pick.id)
                cpu, mem = cpu - pick.cpu, mem - pick.mem
            assert [j.id for j in got] == expected
        elif op[0] == "complete":
            matched = sorted((j for j in oracle.jobs.values() if j.state == "matched"), key=lambda j: int(j.id))
            if matched:
                target = matched[op[1] % len(matched)]
                store.complete(target.id, store.job(target.id).attempt, "p")
                target.state = "done"
        else:
            clock.now += 31
            store.requeue_expired()
            clock.now += 5
            store.requeue_expired()
            for j in oracle.jobs.values():
                if j.state == "matched":
                    j.retries += 1
                    j.state = "waiting" if j.retries <= 1 else "failed"
        for jid, j in oracle.jobs.items():
            assert store.job(jid).state == JobState(j.state), jid
        check_heads(store, TQS)
