"""_lib.lua's helpers are made once, when the library loads, and no call's state reaches the next.

The helpers keep one call's state in upvalues (the script's name and first problem, the keys declared, the
records loaded, the task queues touched...) that ``begin()`` sets afresh at the start of every call. The calls
go to the scripts directly (tests.support.store.script_calls), on a real server and on fakeredis.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from taskqueues.store import Store, functions, scripts
from tests.support.clock import FakeClock
from tests.support.store import Call, Population, populate, script_calls

pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))


@pytest.fixture
def world(store: Store, clock: FakeClock) -> tuple[Store, Population, dict[str, Call]]:
    pop = populate(store)
    return store, pop, script_calls(store, pop, clock)


def lua(name: str) -> str:
    return (resources.files("taskqueues.store") / "lua" / f"{name}.lua").read_text()


def test_the_helpers_are_made_when_the_library_loads_and_begin_runs_first_on_every_call() -> None:
    code = functions.wrapped("pf_start", scripts.source("start"))
    load_time, per_call = code.split("callback=function(KEYS, ARGV)\n", 1)
    assert "local function check_text(" in load_time and "local function save(" in load_time
    assert per_call.startswith("begin(KEYS, ARGV)\n")
    assert "local function" not in per_call.split("SCRIPT = 'start'")[0]
    assert "begin(KEYS" not in functions.wrapped("pf_match", scripts.source("match"))  # match.lua uses no helper


#: What _lib.lua keeps from call to call on purpose: the keys a key base names, made of its text alone (check_keys).
KEPT = {"ROLE_KEYS", "ROLE_BASES", "OF_BASE", "OF_BASE_N"}


def test_every_upvalue_a_call_writes_is_set_afresh_by_begin() -> None:
    """A name of _lib.lua's top level that a helper or a script assigns (or whose table it fills) is one
    begin() sets (or one of KEPT): otherwise one call's value would reach the next."""
    lib = lua("_lib")
    begin = lib[lib.index("local function begin(") :]
    reset = set(re.findall(r"\b([A-Z_]+)\b", begin.split("\nend", 1)[0]))
    top = set()
    for names in re.findall(r"^local ((?:[A-Z_]+\s*,\s*)*[A-Z_]+)\b", lib, re.MULTILINE):
        top.update(n.strip() for n in names.split(","))
    texts = [lib[: lib.index("local function begin(")]] + [lua(n) for n in scripts.names() if n != "match"]
    written = set()
    index = r"\[(?:[^\[\]\n]|\[[^\]\n]*\])*\]"  # [k], [KEYS[j]]
    for name in top:
        target = rf"(?<![\w.]){name}(\s*{index})?\s*(,\s*[\w.]+({index})?\s*)*=(?!=)"
        listed = rf",\s*{name}(\s*{index})?\s*(,[^=\n]*)?=(?!=)"
        for text in texts:
            body = re.sub(r"^local [^\n]*$", "", text, flags=re.MULTILINE)  # declarations at the top level
            if re.search(target, body) or re.search(listed, body) or re.search(rf"table\.insert\({name}\b", body):
                written.add(name)
    assert {"PROBLEM", "SCRIPT", "DECLARED", "LOADED_STATE", "TOUCHED", "EVENT_NOTE"} <= written  # the check sees
    assert written >= KEPT
    assert written <= reset | KEPT, f"written by a call and not set afresh by begin(): {sorted(written - reset - KEPT)}"


def test_the_keys_kept_for_a_key_base_serve_that_base_alone(world: tuple[Store, Population, dict[str, Call]]) -> None:
    """check_keys keeps, by key base, the fixed keys and the further keys it found to be the base's: a call of
    another community (of many: past the bound, all are made again) with this one's keys is still refused."""
    store, _, calls = world
    keys, args = calls["complete"]
    base = args[0]
    other = [k.replace(base, "pf:{other}:", 1) for k in keys]
    for i in range(80):  # 80 bases of 22 keys each (past both bounds), accepted: their job is unknown there
        vo = f"pf:{{vo{i}}}:"
        reply = store._scripts["complete"](keys=[k.replace(base, vo, 1) for k in keys], args=[vo, *args[1:]])
        assert reply[0] == b"stale"
        assert store._scripts["complete"](keys=keys, args=args)[0] in (b"ok", b"stale")
    with pytest.raises(redis.ResponseError, match=r"^complete: KEYS\[1\]: wants \"pf:\{other\}:jobs\""):
        store._scripts["complete"](keys=keys, args=["pf:{other}:", *args[1:]])
    with pytest.raises(redis.ResponseError, match=r"^complete: KEYS\[9\]: .* is not a key of pf:\{other\}:"):
        store._scripts["complete"](keys=other[:8] + keys[8:], args=["pf:{other}:", *args[1:]])


def test_a_refused_call_leaves_no_problem_for_the_next(world: tuple[Store, Population, dict[str, Call]]) -> None:
    store, _, calls = world
    keys, args = calls["start"]
    bad = list(args)
    bad[1] = "x"  # the attempt
    with pytest.raises(redis.ResponseError, match=r"^start: ARGV\[2\] \(attempt\)"):
        store._scripts["start"](keys=keys, args=bad)
    ckeys, cargs = calls["complete"]
    with pytest.raises(redis.ResponseError, match=r"^complete: ARGV\[3\] \(attempt\)"):  # its own name, problem
        store._scripts["complete"](keys=ckeys, args=[*cargs[:2], "x", *cargs[3:]])
    assert store._scripts["start"](keys=keys, args=args) == [b"ok"]


def test_keys_declared_by_one_call_are_not_declared_for_the_next(
    world: tuple[Store, Population, dict[str, Call]],
) -> None:
    """A submission declares the heads hashes and the work counter; a completion that the next call leaves
    them out of still asks for them (and writes nothing)."""
    store, _, calls = world
    keys, args = calls["submit"]
    assert store._scripts["submit"](keys=keys, args=args)[0] == b"ok"
    ckeys, cargs = calls["complete"]
    reply = store._scripts["complete"](keys=ckeys[:8], args=cargs)
    assert reply[0] == b"needkeys" and store.keys.work.encode() in reply
