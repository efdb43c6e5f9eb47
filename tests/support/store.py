"""Builders shared by the store tests: jobs with hand-made task queues (no catalog needed), a populated
store, a real call of every script to start from, and the store's consistency checks."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskqueues.store import JobUpdate, Placed, Store, retention
from taskqueues.store.lock import Lock
from taskqueues.store.records import JobState, NewJob, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.invariants import check, heads_violations
from tests.support.keyspace import dump_all, restore_all, text


def job(
    tq: str = "tqA",
    *,
    cpu: int = 1,
    mem: int = 100,
    tmp: int = 0,
    ete: float = 0,
    score: float = 0,
    queues: tuple[str, ...] = ("site/ce/q1",),
    command: str = "true",
    wall: int | None = None,
    **kw: object,
) -> NewJob:
    exact: dict[str, int] = {"cpu": cpu, "mem": mem, "tmp": tmp, **({"wall": wall} if wall else {})}
    reqs = json.dumps(exact, separators=(",", ":"))
    return NewJob(
        command=command,
        tq_id=tq,
        tq_def=json.dumps({"class": tq}),
        queues=queues,
        cpu=cpu,
        mem=mem,
        tmp=tmp,
        ete=ete,
        score=score,
        requirements=reqs,
        **kw,
    )  # type: ignore[arg-type]


def check_heads(store: Store, pools: dict[str, tuple[str, ...]]) -> None:
    """heads holds each non-empty task queue's real head and a floor under all its members; every queue
    floor is under all members of the task queues of its pool; index scores are never above real heads."""
    assert heads_violations(store.client, store.keys, pools) == []


def check_pools(store: Store, pools: dict[str, tuple[str, ...]]) -> None:
    """Each task queue of ``pools`` has the stored pool it was submitted with. With that, :func:`check_store`
    (``invariants.check``) runs :func:`check_heads`'s checks on exactly these pools (the heads of task queues
    never submitted are checked empty either way): a test that runs both would read the heads twice."""
    client = store.client
    stored = {tq: {text(q) for q in client.smembers(store.keys.pool(tq))} for tq in pools}
    assert stored == {tq: set(queues) for tq, queues in pools.items()}, stored


def check_states(store: Store, expected: dict[str, str]) -> None:
    """Every job of ``expected`` (id -> state) exists and is in that state, read in one round trip (the
    oracle tests check this after every operation)."""
    found = {j.id: j.state.value for j in store.jobs(list(expected))}
    wrong = {jid: (found.get(jid), state) for jid, state in expected.items() if found.get(jid) != state}
    assert not wrong and len(found) == len(expected), wrong


def check_store(store: Store) -> None:
    """The whole store of the community is consistent (tests.support.invariants)."""
    assert [str(v) for v in check(store.client, store.keys)] == []


@dataclass(frozen=True)
class Population:
    """A store with a job in every state a script acts on (ids by role), and the clock it runs on."""

    waiting: str  # A2, task queue "a", behind the matched one
    matched: str  # A1, leased to p1, attempt 1
    running: str  # X, task queue "b", running on p1, with a blocked dependent
    blocked: str  # D, task queue "c", waiting for X
    releasing: str  # E, deferred, released by the completion of Y
    done: str  # Y
    delayed: str  # Z, task queue "z": its lease expired, back in its task queue after a back-off


PILOT = "p1"
QUEUE = "site/ce/q1"
OFFER = PilotOffer(PILOT, QUEUE, 8, 10_000, 10_000)


def populate(store: Store) -> Population:
    """Jobs in every state (see :class:`Population`), task queues emptied by them marked, a kill request
    pending for the running job, a lock held. The store's clock must be a :class:`FakeClock` (it moves 31 s)."""
    clock = store.clock
    assert isinstance(clock, FakeClock)
    a1, a2, x, d, y, e, z = store.submit(
        [
            job("a", score=1, rule="r", key="k1", ete=60),
            job("a", score=5, ete=60),
            job("b", score=2, dependents=(3,)),
            job("c", pending=1),
            job("d", score=3, dependents=(5,)),
            job("e", pending=1, deferred='{"deferred": {}}'),
            job("z", score=4, cpu=2),
        ]
    )
    for want in (a1, x, y, z):
        (m,) = store.match(OFFER)
        assert m.id == want, (m.id, want)
    store.start(x, 1, PILOT)
    assert store.complete(y, 1, PILOT, RunResult(wall=5)) == [e]
    # z is given back once, matched again, then its pilot never reports: a second lease expiry waits a back-off
    store.fail(z, 1, PILOT, RunResult(reason="preempted"), requeue=True)
    (again,) = store.match(OFFER)
    assert (again.id, again.attempt) == (z, 2)
    clock.now += 20
    store.heartbeat(PILOT, {a1: 1, x: 1})
    clock.now += 11
    assert store.requeue_expired() == (1, 0, 0)
    assert store.kill(x, "by the operator") == "requested"
    store.client.set(store.keys.lock("beat"), "token-1", px=600_000)
    # Request-end notifications (taskqueues.store.notices), each request one job failed at submission: n1's
    # claimed by sender "s" (token "s#1"), n2's due, n3 watched with its job ended (not made due yet).
    for request in ("n1", "n2", "n3"):
        failed = job("n", state=JobState.FAILED, reason="refused at submission", queues=())
        store.submit([failed], (request, {"name": request, "notify": "http://hooks.example.org/pf"}))
    for request in ("n1", "n2"):
        assert store.notices.ready(request, clock.now) == "due"
    assert [c.token for c in store.notices.claim("s", clock.now, 60, 1)] == ["s#1"]
    return Population(waiting=a2, matched=a1, running=x, blocked=d, releasing=e, done=y, delayed=z)


Call = tuple[list[str], list[Any]]


def script_calls(store: Store, pop: Population, clock: FakeClock) -> dict[str, Call]:
    """One real, accepted call of every script on the populated store: (KEYS, ARGV) as the store sends them
    (recorded from the store's own operations, the store restored after each)."""
    client, k = store.client, store.keys
    saved = dump_all(client)
    calls: dict[str, Call] = {}
    scripts = dict(store._scripts)

    def record(name: str, run: Callable[[], object]) -> None:
        def spy(keys: list[Any], args: list[Any], **how: Any) -> Any:
            calls[name] = (list(keys), list(args))
            return scripts[name](keys=keys, args=args, **how)

        store._scripts[name] = spy  # type: ignore[assignment]
        try:
            run()
        finally:
            store._scripts[name] = scripts[name]
            restore_all(client, saved)

    record(
        "submit",
        lambda: store.submit(
            [job("a", score=5), job("f", score=6, dependents=(2,)), job("g", pending=1)],
            request=("req1", {"name": "demo", "n": 3}),
        ),
    )
    record("start", lambda: store.start(pop.matched, 1, PILOT))
    record("complete", lambda: store.complete(pop.running, 1, PILOT, RunResult(wall=7, outputs={"n": 1})))
    record("fail", lambda: store.fail(pop.matched, 1, PILOT, RunResult(reason="preempted"), requeue=True))
    record(
        "heartbeat",
        lambda: store.heartbeat(
            PILOT, {pop.matched: 1, pop.running: 1}, {"queue": QUEUE, "cores": 8, "time_left": None}
        ),
    )
    record("cancel", lambda: store.cancel(pop.waiting, "no longer needed"))
    record("hold", lambda: store.lifecycle.hold([pop.waiting, pop.blocked], "alice", "look first"))
    record("resubmit", lambda: store.lifecycle.resubmit([pop.done], "alice", "again"))
    placed = Placed("n", '{"class":"n"}', (QUEUE,), {"cpu": 2, "mem": 200, "tmp": 0}, 2, 200, 0, None)
    record("update", lambda: store.lifecycle.update([JobUpdate(pop.waiting, "cpu 1 -> 2", 3, placed)], "alice"))
    record("refresh_pool", lambda: store.refresh_pool("a", [QUEUE, "site/ce/q2"]))
    record(
        "release",
        lambda: store.release(
            pop.releasing,
            {"t": "e", "def": '{"class":"e"}', "queues": [QUEUE], "m_tail": ":2:200:0:30", "e": 30, "sc": "7.0"},
        ),
    )
    body = {
        "jobs": [{"id": pop.waiting, "pr": 5.0, "e": 30.0, "me": 30, "sc": "1.5"}],
        "requests": {},
        "progress": {"repressure": "1000.0"},
        "marks": {"repressure:rule:r": "30.0"},
    }
    record(
        "rescore",
        lambda: store.call_script(
            "rescore",
            [k.jobs, k.requests, k.cursor],
            [k.base + ":", json.dumps(body)],
            [k.work, *store.floors, *store.pool_keys(["a"])],
        ),
    )
    record(
        "ship_log",
        lambda: store.logs.ship(
            pop.running,
            1,
            PILOT,
            cap=1024,
            host="node",
            directory="/logs",
            live=True,
            chunks={"out": (b"hello\n", 6), "err": (b"\xff", 9)},
        ),
    )
    record("notify", lambda: store.notices.claim("t", clock.now, 60))  # ready and settle: tests/matcher/test_notify.py
    now = clock.now
    clock.now += 10_000  # every lease expired, every emptied task queue past its grace period
    try:
        record("reap", lambda: store.requeue_expired())
        record("clean", lambda: store.clean(grace=600))
        record("forget", lambda: retention.forget_ended(store, clock.now))
        # with what the pilot runs, so that a reservation may be made (match.lua's "Reservations")
        busy = dataclasses.replace(OFFER, cpu=1, running=((30.0, 1, 100, 0), (60.0, 2, 200, 0)))
        calls["match"] = (store._match_call(QUEUE).keys, store.match_args(busy, 4))
    finally:
        clock.now = now
    lock = Lock(client, k.lock("beat"), 600)
    calls["renew"] = ([k.lock("beat")], ["token-1", 600_000])
    calls["unlock"] = ([lock.key], ["token-1"])
    return calls
