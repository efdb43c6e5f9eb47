"""Fuzz every store script directly, as anyone holding the store's credentials could call it (real redis-server).

Each example starts from the same populated store (a job in every state, storehelp.populate) and one real,
accepted call of the script (storehelp.script_calls), and makes one or two of its arguments bad: wrong
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
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storehelp import Call, FakeClock, dump_all, populate, restore_all, script_calls

from taskqueues import scripts
from taskqueues.invariants import check
from taskqueues.keys import Keys
from taskqueues.redis_server import RedisServer
from taskqueues.store import Store

#: ARGV index of each script's JSON argument.
JSON_ARG = {"submit": 2, "complete": 5, "fail": 5, "heartbeat": 3, "release": 3, "rescore": 1}

BAD_TEXT = ["", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "-1", "0", "-0", "1.5", "2",
            "1e18", "1e308", "9" * 40, " 5", "5 ", "0x10", "abc", "ü", "\x00", "a:b", "a b", "{", "}", "[]", "{}",
            "null", "true", "x" * 5000, "1", "waiting", "running", "kill", "cancel"]
STATES = ["waiting", "running", "matched", "done", "blocked", "releasing", "failed", "dep-failed", "cancelled", ""]
NUMBERS = [0, 1, 2, -1, 0.5, 60, 1e20, -1e20, 2**63, float("nan"), float("inf"), float("-inf"), "1", "x", None]
#: Fields a bad call might carry or retype, each with values it might plausibly (or wrongly) hold: the state,
#: lease and placement fields of a record, its dependencies, a result's, a release's, a pilot record's.
FIELDS: dict[str, list[Any]] = {
    "s": STATES, "a": NUMBERS, "pl": ["p1", "p9", "", None, 1], "tm": NUMBERS, "st": NUMBERS, "te": NUMBERS,
    "ts": NUMBERS, "rt": NUMBERS, "mr": NUMBERS, "t": ["a", "b", "e", "zz", "", "a:b", "a b", 5, None],
    "m": ["1:1:1:0:1", ":1:1:0:1", ""], "mt": [":1:1:0:1", ":1:100:0:0", ":x", ""],
    "m_tail": [":1:1:0:1", ":1:100:0:60", ":x:1:0:1", ":1:1:0", ":-1:1:0:1", ":1e400:1:0:1", ":9999999999:1:0:1", ""],
    "sc": ["1.0", "nan", "inf", "1e30", " 1", "0x1", "", 1.0, None], "e": NUMBERS, "pr": NUMBERS, "me": NUMBERS,
    "nd": NUMBERS, "dl": [[], [0], [1], [2], [7], [-1], ["1"], [1, 1], {}], "dpl": [[], [0], [1], [2], [7], [0, 0]],
    "dn": [["1"], []], "dx": [1, 0, True, "1"], "df": ["{}", "[]", "x", 1], "r": ["{}", '{"wall":1}', "[1]", "x", 1],
    "rn": ["c", "m", "cm", "x", 1], "c": ["true", "", 1, None], "q": ["req1", "", "a b", 1], "ru": ["r", "", 1],
    "n": ["x", 1], "k": ["k", 1], "why": ["x", "", 1], "x": NUMBERS, "w": NUMBERS, "cpu": NUMBERS, "pm": NUMBERS,
    "o": ["{}", '{"a": 1}', "[]", "x", 1], "id": ["1", "2", "3", "99", "", "1:2", 1], "error": ["x", "", 1, None],
    "queues": [[], ["site/ce/q1"], ["x"], ["a b"], "site/ce/q1", [1]], "def": ["{}", "[]", "x", 1],
    "jobs": [[], {}, [{}], "x"], "tqs": [{}, [], {"zz": {"def": "{}", "queues": []}}],
    "request": [None, {}, {"id": "r2", "rec": {}}, {"id": "req1", "rec": {}}], "rec": [{}, [], {"first": 1}],
    "first": NUMBERS, "last": NUMBERS, "requests": [{}, {"req1": 1}, {"req1": "x"}, []],
    "progress": [{}, {"repressure": "x"}, {"repressure": 1e300}], "marks": [{}, {"x": "nan"}, {"x": 1}],
    "cores": NUMBERS, "queue": ["site/ce/q1", 1, None], "time_left": NUMBERS, "draining": [True, 1, None],
    "running": [[], "x"], "priority": NUMBERS, "eta": NUMBERS, "cp": NUMBERS, "name": ["x", 1, None],
}

texts = st.one_of(st.sampled_from(BAD_TEXT), st.text(max_size=12), st.integers(-10**20, 10**20).map(str),
                  st.floats(allow_nan=True, allow_infinity=True).map(repr))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(sorted(FIELDS)) | st.text(max_size=4),
                                                                inner, max_size=3),
    max_leaves=6)


def value_for(name: str) -> st.SearchStrategy[Any]:
    """Mostly a value field ``name`` might hold, sometimes any JSON value."""
    known = FIELDS.get(name)
    return st.sampled_from(known).map(copy.deepcopy) if known else json_values  # later mutations change it


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


@st.composite
def mutated_json(draw: st.DrawFn, text: str) -> str:
    """``text`` (a JSON document) with one to three fields of its objects set, deleted or retyped."""
    if draw(st.integers(0, 9)) == 0:
        return text[:draw(st.integers(0, max(0, len(text) - 1)))]  # not JSON any more
    body = json.loads(text)
    for _ in range(draw(st.integers(1, 3))):
        if not objects(body):  # an earlier mutation left no object
            return json.dumps(draw(json_values))
        target = draw(st.sampled_from(objects(body)))
        how = draw(st.sampled_from(["set", "delete", "retype"]))
        if how == "delete" and target:
            del target[draw(st.sampled_from(sorted(target)))]
        elif how == "retype" and target:
            name = draw(st.sampled_from(sorted(target)))
            target[name] = draw(value_for(name) if draw(st.integers(0, 3)) else json_values)
        else:
            name = draw(st.sampled_from(sorted(FIELDS))) if draw(st.integers(0, 9)) else draw(st.text(max_size=6))
            target[name] = draw(value_for(name) if draw(st.integers(0, 3)) else json_values)
    return json.dumps(body)


@st.composite
def mutated_call(draw: st.DrawFn, name: str, call: Call, keys: Keys) -> tuple[list[str], list[Any], list[str]]:
    """The call with one or two of its arguments made bad; returns (KEYS, ARGV, what was done)."""
    ks, args = list(call[0]), [a if isinstance(a, str) else str(a) for a in call[1]]
    done: list[str] = []
    for _ in range(draw(st.integers(1, 2))):
        kinds = ["argv", "argv", "count", "keys"] + ["json"] * (4 if name in JSON_ARG else 0)
        what = draw(st.sampled_from(kinds))
        if what == "json" and JSON_ARG.get(name, len(args)) < len(args):
            i = JSON_ARG[name]
            try:
                args[i] = draw(mutated_json(args[i]))
            except ValueError:  # an earlier mutation made it invalid JSON already
                args[i] = draw(texts)
            done.append(f"json ARGV[{i + 1}]")
        elif what == "count":
            if draw(st.booleans()) and args:
                args.pop()
                done.append("dropped the last ARGV")
            else:
                args.append(draw(texts))
                done.append("one more ARGV")
        elif what == "keys" and len(ks) > 1:
            how = draw(st.sampled_from(["swap", "drop", "foreign", "role", "extra"]))
            i = draw(st.integers(0, len(ks) - 1))
            if how == "swap":
                j = draw(st.integers(0, len(ks) - 1))
                ks[i], ks[j] = ks[j], ks[i]
            elif how == "drop":
                del ks[i]
            elif how == "foreign":
                ks[i] = ks[i].replace("{default}", "{atlas}")
            elif how == "role":
                ks[i] = draw(st.sampled_from([keys.jobs, keys.leases, keys.delayed, keys.heads, keys.qfloor,
                                              keys.tqempty, keys.tqdefs, keys.parked, keys.work, keys.seq,
                                              keys.pilots, keys.cursor, keys.tq("a"), keys.lock("beat")]))
            else:
                ks.append(draw(st.sampled_from(["pf:{atlas}:jobs", keys.tq("zz"), keys.requests])))
            done.append(f"keys: {how} {i}")
        elif args:
            i = draw(st.integers(0, len(args) - 1))
            args[i] = draw(texts)
            done.append(f"ARGV[{i + 1}] = {args[i][:40]!r}")
    return ks, args, done


@pytest.mark.parametrize("name", scripts.names())
@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_bad_call_is_refused_or_does_its_job(world: tuple[Store, dict[bytes, bytes], dict[str, Call]], name: str,
                                               data: st.DataObject) -> None:
    store, snapshot, calls = world
    client = store.client
    restore_all(client, snapshot)
    keys, args, done = data.draw(mutated_call(name, calls[name], store.keys))
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


def test_the_unchanged_calls_are_accepted(world: tuple[Store, dict[bytes, bytes], dict[str, Call]]) -> None:
    """Each starting call does its job on the populated store (the fuzz starts from calls that work)."""
    store, snapshot, calls = world
    for name, (keys, args) in calls.items():
        restore_all(store.client, snapshot)
        reply = store._scripts[name](keys=keys, args=args)
        assert reply, name
        assert check(store.client, store.keys) == [], name
