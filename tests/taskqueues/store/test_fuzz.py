"""Fuzz every store script directly, as anyone holding the store's credentials could call it (real redis-server).

Each example starts from the same populated store (a job in every state, tests.support.store.populate) and one real,
accepted call of the script (tests.support.store.script_calls), and makes one or two of its arguments bad: wrong
types, NaN and infinities, negative, huge, out-of-range indexes, unknown states, injected, missing or
retyped JSON fields, invalid JSON, too few or too many arguments, keys swapped, dropped, of another
community or of another role. The call must then either be refused by the script's own checks (an error
that names the script, and a keyspace byte-identical to before: DUMP of every key) or do its job, after
which the invariant checker finds nothing. A Lua runtime error or a Redis error out of a script is a
failure: every bad call must be caught before the first write.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskqueues.store import Store, scripts
from taskqueues.store.keys import Keys
from taskqueues.store.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.invariants import check
from tests.support.keyspace import dump_all, restore_all
from tests.support.store import Call, populate, script_calls

#: ARGV index of each script's JSON argument.
JSON_ARG = {"submit": 2, "complete": 5, "fail": 5, "heartbeat": 3, "release": 3, "rescore": 1, "update": 5}

BAD_TEXT = [
    "",
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1e400",
    "-1e400",
    "-1",
    "0",
    "-0",
    "1.5",
    "2",
    "1e18",
    "1e308",
    "9" * 40,
    " 5",
    "5 ",
    "0x10",
    "abc",
    "ü",
    "\x00",
    "a:b",
    "a b",
    "{",
    "}",
    "[]",
    "{}",
    "null",
    "true",
    "x" * 5000,
    "1",
    "waiting",
    "running",
    "kill",
    "cancel",
]
STATES = ["waiting", "running", "matched", "done", "blocked", "releasing", "failed", "dep-failed", "cancelled", ""]
NUMBERS = [0, 1, 2, -1, 0.5, 60, 1e20, -1e20, 2**63, float("nan"), float("inf"), float("-inf"), "1", "x", None]
#: Fields a bad call might carry or retype, each with values it might plausibly (or wrongly) hold: the state,
#: lease and placement fields of a record, its dependencies, a result's, a release's, a pilot record's.
FIELDS: dict[str, list[Any]] = {
    "s": STATES,
    "a": NUMBERS,
    "pl": ["p1", "p9", "", None, 1],
    "tm": NUMBERS,
    "st": NUMBERS,
    "te": NUMBERS,
    "ts": NUMBERS,
    "rt": NUMBERS,
    "mr": NUMBERS,
    "t": ["a", "b", "e", "zz", "", "a:b", "a b", 5, None],
    "m": ["1:1:1:0:1", ":1:1:0:1", ""],
    "mt": [":1:1:0:1", ":1:100:0:0", ":x", ""],
    "m_tail": [":1:1:0:1", ":1:100:0:60", ":x:1:0:1", ":1:1:0", ":-1:1:0:1", ":1e400:1:0:1", ":9999999999:1:0:1", ""],
    "sc": ["1.0", "nan", "inf", "1e30", " 1", "0x1", "", 1.0, None],
    "e": NUMBERS,
    "pr": NUMBERS,
    "me": NUMBERS,
    "nd": NUMBERS,
    "dl": [[], [0], [1], [2], [7], [-1], ["1"], [1, 1], {}],
    "dpl": [[], [0], [1], [2], [7], [0, 0]],
    "dn": [["1"], []],
    "dx": [1, 0, True, "1"],
    "df": ["{}", "[]", "x", 1],
    "r": ["{}", '{"wall":1}', "[1]", "x", 1],
    "rn": ["c", "m", "cm", "x", 1],
    "c": ["true", "", 1, None],
    "q": ["req1", "", "a b", 1],
    "ru": ["r", "", 1],
    "n": ["x", 1],
    "k": ["k", 1],
    "why": ["x", "", 1],
    "x": NUMBERS,
    "w": NUMBERS,
    "cpu": NUMBERS,
    "pm": NUMBERS,
    "o": ["{}", '{"a": 1}', "[]", "x", 1],
    "id": ["1", "2", "3", "99", "", "1:2", 1],
    "error": ["x", "", 1, None],
    "queues": [[], ["site/ce/q1"], ["x"], ["a b"], "site/ce/q1", [1]],
    "def": ["{}", "[]", "x", 1],
    "jobs": [[], {}, [{}], "x"],
    "tqs": [{}, [], {"zz": {"def": "{}", "queues": []}}],
    "request": [None, {}, {"id": "r2", "rec": {}}, {"id": "req1", "rec": {}}],
    "rec": [{}, [], {"first": 1}],
    "first": NUMBERS,
    "last": NUMBERS,
    "requests": [{}, {"req1": 1}, {"req1": "x"}, []],
    "progress": [{}, {"repressure": "x"}, {"repressure": 1e300}],
    "marks": [{}, {"x": "nan"}, {"x": 1}],
    "cores": NUMBERS,
    "queue": ["site/ce/q1", 1, None],
    "time_left": NUMBERS,
    "draining": [True, 1, None],
    "running": [[], "x"],
    "priority": NUMBERS,
    "eta": NUMBERS,
    "cp": NUMBERS,
    "name": ["x", 1, None],
}

#: The fields whose wrong value would break the store if it got in: a record's state, lease and placement, a
#: member's tail, a score, dependencies; picked more often than the others.
DANGEROUS = [
    "s",
    "a",
    "pl",
    "tm",
    "st",
    "t",
    "m",
    "mt",
    "m_tail",
    "sc",
    "nd",
    "dl",
    "dpl",
    "dn",
    "dx",
    "e",
    "me",
    "id",
    "rt",
    "mr",
    "queues",
    "def",
    "cores",
    "time_left",
    "first",
    "last",
    "pr",
    "w",
]
DANGEROUS_SET = set(DANGEROUS)
UNICODE = ["ü", "日本", "\u202e", "\ud7ff", "e\u0301"]


def text(rnd: random.Random) -> str:
    """A bad or odd piece of text: a listed one, a number written some way, or random characters."""
    how = rnd.randrange(4)
    if how == 0:
        return rnd.choice(BAD_TEXT)
    if how == 1:
        return repr(rnd.choice([rnd.uniform(-1e20, 1e20), rnd.randint(-(10**20), 10**20), float("nan"), 1e300]))
    if how == 2:
        return str(rnd.randint(-5, 10))
    return "".join(
        rnd.choice(["a", "1", ":", " ", "{", "}", '"', "\\", "\x00", *UNICODE]) for _ in range(rnd.randrange(12))
    )


def json_value(rnd: random.Random, depth: int = 0) -> Any:
    """Any JSON value (NaN and infinities included, as Python's json writes them)."""
    how = rnd.randrange(8 if depth < 2 else 6)
    if how == 0:
        return None
    if how == 1:
        return rnd.choice([True, False])
    if how == 2:
        return rnd.choice([rnd.randint(-(2**70), 2**70), rnd.randint(-3, 10)])
    if how == 3:
        return rnd.choice([rnd.uniform(-1e300, 1e300), float("nan"), float("inf"), -0.0, 0.5])
    if how in (4, 5):
        return text(rnd)
    if how == 6:
        return [json_value(rnd, depth + 1) for _ in range(rnd.randrange(3))]
    return {rnd.choice(sorted(FIELDS)): json_value(rnd, depth + 1) for _ in range(rnd.randrange(3))}


def value_for(rnd: random.Random, name: str) -> Any:
    """Mostly a value field ``name`` might hold (a fresh copy: later mutations change it), else any JSON value."""
    known = FIELDS.get(name)
    return copy.deepcopy(rnd.choice(known)) if known and rnd.random() < 0.75 else json_value(rnd)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[bytes, bytes], dict[str, Call]]]:
    """A store of its own (the module's examples restore it between calls), its snapshot, its calls."""
    server = RedisServer(tmp_path_factory.mktemp("fuzz")).start()
    client = redis.Redis.from_url(server.url)
    clock = FakeClock()
    store = Store(client, lease_seconds=30, backoff=10, clock=clock)
    calls = script_calls(store, populate(store), clock)
    assert check(client, store.keys) == []
    yield store, dump_all(client), calls
    client.close()
    server.stop()


def objects(value: Any) -> list[dict[str, Any]]:
    """Every JSON object inside ``value``, itself first."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def mutated_json(rnd: random.Random, text_: str) -> str:
    """``text_`` (a JSON document) with one to three fields of its objects set, deleted or retyped."""
    if rnd.random() < 0.05:
        return text_[: rnd.randrange(max(1, len(text_)))]  # not JSON any more
    body = json.loads(text_)
    for _ in range(rnd.randint(1, 3)):
        if not objects(body):  # an earlier mutation left no object
            return json.dumps(json_value(rnd))
        found = objects(body)  # the ones holding fields that matter (records, results, specs) more often
        target = rnd.choices(found, [1 + 3 * len(DANGEROUS_SET.intersection(o)) for o in found])[0]
        how = rnd.choice(["set", "delete", "retype", "retype"])
        if how == "delete" and target:
            del target[rnd.choice(sorted(target))]
        elif how == "retype" and target:
            risky = [k for k in sorted(target) if k in DANGEROUS]
            name = rnd.choice(risky if risky and rnd.random() < 0.7 else sorted(target))
            target[name] = value_for(rnd, name)
        else:
            pick = rnd.random()
            name = rnd.choice(DANGEROUS) if pick < 0.5 else rnd.choice(sorted(FIELDS)) if pick < 0.9 else text(rnd)
            target[name] = value_for(rnd, name)
    return json.dumps(body)


def mutated_call(rnd: random.Random, name: str, call: Call, keys: Keys) -> tuple[list[str], list[Any], list[str]]:
    """The call with one or two of its arguments made bad; returns (KEYS, ARGV, what was done)."""
    ks, args = list(call[0]), [a if isinstance(a, str) else str(a) for a in call[1]]
    done: list[str] = []
    for _ in range(rnd.randint(1, 2)):
        kinds = ["argv", "argv", "count", "keys"] + ["json"] * (4 if name in JSON_ARG else 0)
        what = rnd.choice(kinds)
        if what == "json" and JSON_ARG.get(name, len(args)) < len(args):
            i = JSON_ARG[name]
            try:
                args[i] = mutated_json(rnd, args[i])
            except ValueError:  # an earlier mutation made it invalid JSON already
                args[i] = text(rnd)
            done.append(f"json ARGV[{i + 1}] = {args[i][:300]}")
        elif what == "count":
            if rnd.random() < 0.5 and args:
                args.pop()
                done.append("dropped the last ARGV")
            else:
                args.append(text(rnd))
                done.append("one more ARGV")
        elif what == "keys" and len(ks) > 1:
            how = rnd.choice(["swap", "drop", "foreign", "role", "extra"])
            i = rnd.randrange(len(ks))
            if how == "swap":
                j = rnd.randrange(len(ks))
                ks[i], ks[j] = ks[j], ks[i]
            elif how == "drop":
                del ks[i]
            elif how == "foreign":
                ks[i] = ks[i].replace("{default}", "{atlas}")
            elif how == "role":
                ks[i] = rnd.choice(
                    [
                        keys.jobs,
                        keys.leases,
                        keys.delayed,
                        keys.heads,
                        keys.qfloor,
                        keys.tqempty,
                        keys.tqdefs,
                        keys.parked,
                        keys.work,
                        keys.seq,
                        keys.pilots,
                        keys.cursor,
                        keys.tq("a"),
                        keys.lock("beat"),
                    ]
                )
            else:
                ks.append(rnd.choice(["pf:{atlas}:jobs", keys.tq("zz"), keys.requests]))
            done.append(f"keys: {how} {i}")
        elif args:
            i = rnd.randrange(len(args))
            args[i] = text(rnd)
            done.append(f"ARGV[{i + 1}] = {args[i][:40]!r}")
    return ks, args, done


#: Examples per script: more where a payload has many fields to get wrong (about 25 s in all).
EXAMPLES = {"submit": 700, "rescore": 700, "release": 400, "complete": 300, "fail": 300, "heartbeat": 300}


@pytest.mark.parametrize("name", scripts.names())
def test_a_bad_call_is_refused_or_does_its_job(
    world: tuple[Store, dict[bytes, bytes], dict[str, Call]], name: str
) -> None:
    """Choices are made with a Random that hypothesis seeds (its own draws favour first elements and small
    numbers, which left most fields of a payload untouched)."""
    store, snapshot, calls = world
    client = store.client

    @settings(
        max_examples=EXAMPLES.get(name, 150),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(rnd=st.randoms(use_true_random=False))
    def one_call(rnd: random.Random) -> None:
        restore_all(client, snapshot)
        keys, args, done = mutated_call(rnd, name, calls[name], store.keys)
        before = dump_all(client)
        try:
            reply = store._scripts[name](keys=keys, args=args)
        except redis.ResponseError as exc:
            message = str(exc)
            assert message.startswith(f"{name}: "), f"{done}: not refused by the script's checks: {message}"
            assert dump_all(client) == before, f"{done}: refused ({message}) but the keyspace changed"
            return
        if isinstance(reply, list) and reply and reply[0] in (b"needkeys", b"stale", b"unknown", b"final"):
            assert dump_all(client) == before, f"{done}: answered {reply[0]!r} but the keyspace changed"
        assert [str(v) for v in check(client, store.keys)] == [], f"{done}: accepted, and the store is inconsistent"

    one_call()


def test_the_unchanged_calls_are_accepted(world: tuple[Store, dict[bytes, bytes], dict[str, Call]]) -> None:
    """Each starting call does its job on the populated store (the fuzz starts from calls that work)."""
    store, snapshot, calls = world
    for name, (keys, args) in calls.items():
        restore_all(store.client, snapshot)
        reply = store._scripts[name](keys=keys, args=args)
        assert reply, name
        assert check(store.client, store.keys) == [], name
