"""Every script refuses a bad call with a clear error and changes nothing (the audit's calls first).

Calls go to the scripts directly, as anyone holding the store's credentials could make them, starting from
one real call of each (tests.support.store.script_calls) with one argument made bad; and through the store, whose
StoreError carries the script's message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from taskqueues.errors import StoreError
from taskqueues.store import Store
from taskqueues.store.lock import Lock
from taskqueues.store.records import JobState, NewJob, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.keyspace import dump_all
from tests.support.store import OFFER, PILOT, Call, Population, check_store, job, populate, script_calls

pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))


@pytest.fixture
def world(store: Store, clock: FakeClock) -> tuple[Store, Population, dict[str, Call]]:
    pop = populate(store)
    return store, pop, script_calls(store, pop, clock)


def refused(store: Store, name: str, keys: list[str], args: list[Any], message: str) -> None:
    """The script refuses the call with ``message`` (a regex) in its error, and the keyspace is unchanged."""
    before = dump_all(store.client)
    with pytest.raises(redis.ResponseError, match=message):
        store._scripts[name](keys=keys, args=args)
    assert dump_all(store.client) == before


def edit_json(args: list[Any], i: int, change: Callable[[Any], None]) -> list[Any]:
    out = list(args)
    body = json.loads(out[i])
    change(body)
    out[i] = json.dumps(body)
    return out


# -- the audit's calls


def test_submit_refuses_a_job_born_running_with_no_lease(world: tuple[Store, Population, dict[str, Call]]) -> None:
    store, _, calls = world
    keys, args = calls["submit"]

    def running(body: Any) -> None:
        body["jobs"][0]["s"] = "running"

    refused(
        store,
        "submit",
        keys,
        edit_json(args, 2, running),
        r"^submit: ARGV\[3\] \(payload\)\.jobs\[0\]\.s: wants a state a job is born in \(waiting, blocked, "
        r"failed, dep-failed\), got \"running\"$",
    )
    with pytest.raises(StoreError, match=r"^script submit refused the call: ARGV\[3\] \(payload\)\.jobs\[0\]\.s: "):
        store.submit(
            [NewJob(command="c", tq_id="t", tq_def="{}", queues=("site/ce/q1",), cpu=1, mem=1, state=JobState.RUNNING)]
        )


@pytest.mark.parametrize(
    "field, value",
    [
        ("pl", "p9"),
        ("a", 3),
        ("tm", 1.0),
        ("st", 1.0),
        ("x", 0),
        ("m", "1:1:1:1:1"),
        ("mt", ":1:1:1:1"),
        ("dn", ["1"]),
        ("cx", 1),
        ("id", "77"),
        ("rt", 9),
    ],
)
def test_submit_refuses_a_field_a_new_job_may_not_carry(
    world: tuple[Store, Population, dict[str, Call]], field: str, value: object
) -> None:
    store, _, calls = world
    keys, args = calls["submit"]
    refused(
        store,
        "submit",
        keys,
        edit_json(args, 2, lambda b: b["jobs"][1].update({field: value})),
        rf"^submit: ARGV\[3\] \(payload\)\.jobs\[1\]: may not carry the field \"{field}\"$",
    )


def test_reap_refuses_a_nan_back_off_and_leaves_the_lease(real_redis: redis.Redis, clock: FakeClock) -> None:
    """The audit: a NaN back-off failed reap after its first writes, leaving a job waiting in no task queue,
    and every later match failed for every pilot."""
    store = Store(real_redis, lease_seconds=30, backoff=10, clock=clock)
    ids = store.submit([job("a", score=1), job("b", score=2)])
    store.match(OFFER)
    assert store.requeue_expired() == (0, 0, 0)  # the reaper has noted this server's run (Store._lease_cutoff)
    store.backoff = math.nan
    clock.now += 31
    before = dump_all(real_redis)
    with pytest.raises(
        StoreError,
        match=r"^script reap refused the call: ARGV\[3\] \(back-off\): wants a number in "
        r'\[0, 10000000\], got "nan"$',
    ):
        store.requeue_expired()
    assert dump_all(real_redis) == before
    assert store.job(ids[0]).state is JobState.MATCHED
    store.backoff = 10
    assert store.requeue_expired() == (1, 0, 1)  # a first lease expiry: back in its task queue at once
    assert [j.id for j in store.match(OFFER)] == [ids[0]]
    check_store(store)


# -- one bad argument of each script


def argv(calls: dict[str, Call], name: str, i: int, value: Any) -> tuple[list[str], list[Any]]:
    keys, args = calls[name]
    args = list(args)
    args[i] = value
    return keys, args


CASES: list[tuple[str, int, Any, str]] = [
    ("match", 4, "nan", r"^match: ARGV\[5\] \(free cores\) wants a number in \[0, 1e15\], got "),
    ("match", 5, "inf", r"^match: ARGV\[6\] \(free memory\)"),
    ("match", 7, "nan", r"^match: ARGV\[8\] \(seconds left\)"),
    ("match", 8, "0", r"^match: ARGV\[9\] \(jobs wanted\) wants a whole number"),
    ("match", 8, "2.5", r"^match: ARGV\[9\] \(jobs wanted\)"),
    ("match", 3, "-1", r"^match: ARGV\[4\] \(lease length\)"),
    ("match", 1, "", r"^match: ARGV\[2\] \(pilot id\)"),
    ("start", 4, "nan", r"^start: ARGV\[5\] \(lease length\): wants a number"),
    ("start", 1, "1.5", r"^start: ARGV\[2\] \(attempt\): wants an integer"),
    ("start", 5, "inf", r"^start: ARGV\[6\] \(started\)"),
    ("complete", 4, "1e400", r"^complete: ARGV\[5\] \(now\)"),
    ("complete", 5, '{"w": 1, "s": "waiting"}', r'^complete: ARGV\[6\] \(result\): may not carry the field "s"$'),
    ("complete", 5, '{"w": -1}', r"^complete: ARGV\[6\] \(result\)\.w: wants a number in \[0, "),
    ("complete", 5, '{"w": NaN}', r"^complete: ARGV\[6\] \(result\)\.w"),
    ("complete", 5, '{"o": "[1]"}', r"^complete: ARGV\[6\] \(result\)\.o: wants a JSON object as text"),
    ("complete", 5, "[]", r"^complete: ARGV\[6\] \(result\): wants a JSON object as text"),
    ("fail", 6, "3", r"^fail: ARGV\[7\] \(requeue\): wants 0, 1 or 2"),
    ("fail", 5, '{"pl": "p9"}', r'^fail: ARGV\[6\] \(result\): may not carry the field "pl"$'),
    ("heartbeat", 2, "0", r"^heartbeat: ARGV\[3\] \(lease length\): wants a positive length"),
    ("heartbeat", 3, '{"cores": "many"}', r"^heartbeat: ARGV\[4\] \(pilot record\)\.cores: wants a number"),
    ("heartbeat", 3, "not json", r"^heartbeat: ARGV\[4\] \(pilot record\): wants a JSON object"),
    ("heartbeat", 5, "x", r"^heartbeat: ARGV\[6\] \(attempt\)"),
    ("reap", 3, "0", r"^reap: ARGV\[4\] \(batch size\)"),
    ("reap", 1, "-inf", r"^reap: ARGV\[2\] \(now\)"),
    ("cancel", 2, "nuke", r"^cancel: ARGV\[3\] \(mode\): wants cancel or kill, got \"nuke\"$"),
    ("cancel", 1, "1:2", r"^cancel: ARGV\[2\] \(job id\)"),
    ("refresh_pool", 3, "not a queue", r"^refresh_pool: ARGV\[4\] \(queue id\)"),
    ("clean", 2, "0", r"^clean: ARGV\[3\] \(batch size\)"),
    ("clean", 1, "nan", r"^clean: ARGV\[2\] \(cutoff\)"),
    ("release", 3, '{"error": "x", "t": "a"}', r'^release: ARGV\[4\] \(release\): may not carry the field "t"$'),
    (
        "release",
        3,
        '{"t": "e", "def": "{}", "queues": [], "m_tail": ":1:1:1", "e": 1}',
        r"^release: ARGV\[4\] \(release\)\.m_tail: wants \":cpu:mem:tmp:ete\"",
    ),
    (
        "release",
        3,
        '{"t": "e", "def": "{}", "queues": [], "m_tail": ":1:1:0:1", "e": 1, "s": "running"}',
        r'^release: ARGV\[4\] \(release\): may not carry the field "s"$',
    ),
    (
        "rescore",
        1,
        '{"jobs": [{"id": "2", "pr": 1, "e": 1, "me": 1, "sc": "nan"}]}',
        r"^rescore: ARGV\[2\] \(payload\)\.jobs\[0\]\.sc: wants a score",
    ),
    ("rescore", 1, '{"jobs": [], "marks": {"x": "high"}}', r"^rescore: ARGV\[2\] \(payload\)\.marks\.x"),
    ("renew", 1, "-1", r"^renew: ARGV\[2\] \(time to live\)"),
    ("unlock", 0, "", r"^unlock: ARGV\[1\] \(token\)"),
    ("submit", 1, "nan", r"^submit: ARGV\[2\] \(now\)"),
]


@pytest.mark.parametrize("name, i, value, message", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]!s:.12}" for c in CASES])
def test_a_bad_argument_is_refused_and_changes_nothing(
    world: tuple[Store, Population, dict[str, Call]], name: str, i: int, value: Any, message: str
) -> None:
    store, _, calls = world
    refused(store, name, *argv(calls, name, i, value), message)


@pytest.mark.parametrize(
    "name",
    [
        "submit",
        "match",
        "start",
        "complete",
        "fail",
        "heartbeat",
        "reap",
        "cancel",
        "refresh_pool",
        "clean",
        "release",
        "rescore",
    ],
)
def test_keys_of_the_wrong_role_or_community_are_refused(
    world: tuple[Store, Population, dict[str, Call]], name: str
) -> None:
    store, _, calls = world
    keys, args = calls[name]
    swapped = [keys[1], keys[0], *keys[2:]]
    refused(store, name, swapped, list(args), rf"^{name}: KEYS")
    if name == "match":  # two keys, the others built from the base: another community's index is refused
        other = [keys[0].replace("{default}", "{atlas}"), keys[1]]
        refused(store, name, other, list(args), r"^match: KEYS want the keys pf:\{default\}:qh:<queue> and ")
    foreign = [*keys, "pf:{atlas}:jobs"]
    if name != "match":  # match takes exactly its two keys
        refused(store, name, foreign, list(args), rf'^{name}: KEYS\[{len(foreign)}\]: "pf:{{atlas}}:jobs" is not a key')


def test_dependency_indexes_out_of_range_are_refused(world: tuple[Store, Population, dict[str, Call]]) -> None:
    store, _, calls = world
    keys, args = calls["submit"]
    refused(
        store,
        "submit",
        keys,
        edit_json(args, 2, lambda b: b["jobs"][1].update(dl=[7])),
        r"^submit: ARGV\[3\] \(payload\)\.jobs\[1\]\.dl\[0\]: wants an integer in \[2, 2\], got 7$",
    )
    refused(
        store,
        "submit",
        keys,
        edit_json(args, 2, lambda b: b["jobs"][2].update(dpl=[2])),
        r"^submit: ARGV\[3\] \(payload\)\.jobs\[2\]\.dpl\[0\]: wants an integer in \[0, 1\], got 2$",
    )


def test_a_job_blocked_with_nothing_to_release_it_is_refused(any_redis: redis.Redis) -> None:
    store = Store(any_redis)
    with pytest.raises(StoreError, match=r"jobs\[0\]\.nd: wants 0, the jobs of this call that list it"):
        store.submit([job("b", pending=1)])
    assert dump_all(any_redis) == {}


def test_a_request_id_is_not_reused(world: tuple[Store, Population, dict[str, Call]]) -> None:
    store, _, calls = world
    keys, args = calls["submit"]
    store._scripts["submit"](keys=keys, args=args)
    refused(store, "submit", keys, args, r'^submit: ARGV\[3\] \(payload\)\.request\.id: request "req1" exists already$')


def test_a_lock_is_renewed_only_with_a_positive_time_to_live(real_redis: redis.Redis) -> None:
    store = Store(real_redis)
    lock = Lock(real_redis, store.keys.lock("beat"), 5)
    assert lock.acquire()
    refused(store, "renew", [lock.key], [lock.token, "0"], r"^renew: ARGV\[2\] \(time to live\)")
    refused(store, "unlock", [store.keys.jobs], [lock.token], r"^unlock: KEYS\[1\]: wants a lock key")
    assert lock.renew() and lock.release()


def test_a_store_call_with_a_bad_offer_is_a_store_error_naming_the_argument(any_redis: redis.Redis) -> None:
    store = Store(any_redis)
    with pytest.raises(
        StoreError,
        match=r"^script match refused the call: ARGV\[5\] \(free cores\) wants a number in "
        r"\[0, 1e15\], got \[",
    ):
        store.match(PilotOffer(PILOT, "site/ce/q1", math.nan, 100))  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=r"^script complete refused the call: ARGV\[6\] \(result\)\.w: "):
        store.complete("1", 1, PILOT, RunResult(wall=math.inf))


def test_a_dependency_named_twice_is_one_edge_but_a_dependent_twice_is_refused(any_redis: redis.Redis) -> None:
    """A user may list a dependency twice (one edge, as taskqueues.dag reads it); a dependent listed twice would
    release its job after one of two completions, so it is refused."""
    store = Store(any_redis)
    a, b = store.submit([job("a", dependents=(1,)), job("b", pending=1, deps=(0, 0))])
    assert store.job(b).deps == (a, a) and store.job(b).pending == 1
    with pytest.raises(StoreError, match=r"jobs\[0\]\.dl: names job 1 twice"):
        store.submit([job("a", dependents=(1, 1)), job("b", pending=1)])


def test_a_releasing_job_cancelled_leaves_the_releasing_set(world: tuple[Store, Population, dict[str, Call]]) -> None:
    """Found by the fuzz: the cancelled job stayed in the releasing set, and every sweep read it again."""
    store, pop, _ = world
    assert store.cancel(pop.releasing) == "ended"
    assert store.job(pop.releasing).state is JobState.CANCELLED
    assert store.releasing() == []
    check_store(store)


def test_a_member_need_of_minus_zero_is_written_as_zero(world: tuple[Store, Population, dict[str, Call]]) -> None:
    """Found by the fuzz: rescore wrote "-0" into a member, which nothing reads back as a member."""
    store, pop, calls = world
    keys, args = calls["rescore"]
    store._scripts["rescore"](keys=keys, args=edit_json(args, 1, lambda b: b["jobs"][0].update(me=-0.0)))
    assert store.task_queue("a") == [(pop.waiting, 1.5)]
    assert store.client.zrange(store.keys.tq("a"), 0, -1) == [f"{pop.waiting}:1:100:0:0".encode()]
    check_store(store)
