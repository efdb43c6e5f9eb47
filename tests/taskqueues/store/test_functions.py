"""The store's scripts as one Redis function library: kept across a restart, on a replica, one version at a
time, and pilots may call only their own functions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskqueues.errors import StoreUnavailable
from taskqueues.store import Store, access, functions, scripts
from taskqueues.store.keys import Keys
from taskqueues.store.records import PilotOffer
from taskqueues.store.redis_server import RedisServer
from tests.support.store import job

Q = "site/ce/q1"


def offer() -> PilotOffer:
    return PilotOffer(pilot="p1", queue=Q, cpu=1, mem=1000, tmp=1000, time_left=None)


def pilot_client(server: RedisServer, control: redis.Redis) -> redis.Redis:
    """A client of the default community's pilot user, with the rights taskqueues.store.access gives it."""
    access.apply(control, access.pilot_user("default"), "pw", access.pilot_rules("pf", "default"), broker=True)
    return redis.Redis(port=server.port, username=access.pilot_user("default"), password="pw")


def loads(client: redis.Redis) -> int:
    """Script and function loads the server ran since it started."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("script|load", "function|load"))


@pytest.fixture
def persistent(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    yield server
    server.stop()


def test_a_restarted_server_answers_every_call_without_a_load(persistent: RedisServer) -> None:
    control = redis.Redis(port=persistent.port)
    (jid,) = Store(control).submit([job(queues=(Q,))])
    persistent.stop()
    persistent.start()
    pilot = Store(pilot_client(persistent, redis.Redis(port=persistent.port)))
    assert [j.id for j in pilot.exchange("p1", offer=offer()).matched] == [jid]
    assert pilot.exchange("p1", starts=[(jid, 1, 0.0)]).refused == {}
    assert loads(redis.Redis(port=persistent.port)) == 0, "the functions came back with the data"


def test_a_replica_holds_the_library(tmp_path: Path) -> None:
    primary = RedisServer(tmp_path / "primary").start()
    replica = RedisServer(tmp_path / "replica").start()
    try:
        control = redis.Redis(port=primary.port)
        Store(control).submit([job(queues=(Q,))])
        on_replica = redis.Redis(port=replica.port)
        on_replica.replicaof("127.0.0.1", primary.port)
        deadline = time.monotonic() + 30
        while on_replica.info("replication").get("master_link_status") != "up" and time.monotonic() < deadline:
            time.sleep(0.05)
        on_replica.replicaof("no", "one")  # promoted, as Sentinel does
        store = Store(pilot_client(replica, on_replica))
        assert [j.id for j in store.match(offer())] == ["1"]
        assert loads(on_replica) == 0
    finally:
        primary.stop()
        replica.stop()


def test_an_older_version_is_replaced_whole(real_redis: redis.Redis) -> None:
    old = (
        "#!lua name=pilotfish_000000000000\n"
        "redis.register_function('pf_match', function(KEYS, ARGV) return {'old'} end)\n"
        "redis.register_function('pf_gone', function(KEYS, ARGV) return 1 end)\n"
    )
    real_redis.function_flush()
    real_redis.function_load(old)
    functions.Library.of(real_redis).checked = False  # a process starting with the new code
    store = Store(real_redis)
    (jid,) = store.submit([job(queues=(Q,))])
    assert [j.id for j in store.match(offer())] == [jid]
    listed = real_redis.function_list(library="pilotfish_*")
    assert [entry[1].decode() for entry in listed] == [functions.library_name()]
    with pytest.raises(redis.ResponseError, match="Function not found"):
        real_redis.fcall("pf_gone", 0)


def test_a_pilot_calls_functions_on_its_community_only_and_loads_none(
    redis_server: RedisServer, real_redis: redis.Redis
) -> None:
    """A pilot may call the library's functions (``+fcall`` whole: rules on a command's first argument are
    deprecated), bounded by its key pattern: on another community's keys every one is refused before it runs;
    it may not load, replace or evaluate Lua of its own."""
    pilot = pilot_client(redis_server, real_redis)
    Store(real_redis).submit([job(queues=(Q,))])
    other = Keys(vo="other")
    for name in ("submit", "clean", "cancel", "refresh_pool", "match", "complete"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.fcall(functions.function_name(name), 1, other.jobs)
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.function_load(functions.code(), replace=True)
    with pytest.raises(redis.exceptions.NoPermissionError):
        pilot.eval("return 1", 1, Keys().jobs)
    assert len(Store(pilot).match(offer())) == 1


def test_a_pilot_finding_no_library_waits_for_the_control_plane(
    redis_server: RedisServer, real_redis: redis.Redis
) -> None:
    pilot = Store(pilot_client(redis_server, real_redis))
    Store(real_redis).submit([job(queues=(Q,))])
    real_redis.function_flush()
    with pytest.raises(StoreUnavailable, match="holds no function pf_match"):
        pilot.match(offer())
    Store(real_redis).cancel("1")  # the control plane's next operation loads it again
    assert pilot.match(offer()) == []


def test_a_scripts_load_time_part_runs_once_and_its_functions_serve_every_call(real_redis: redis.Redis) -> None:
    """Above the line ``-- per call:`` a script runs once, when the library loads (match.lua makes its policy's
    functions there); below it, on every call. Two scripts' load-time locals of one name do not collide."""
    counter = "local n = 0\nlocal function bump(by) n = n + by return n end\n-- per call:\nreturn bump({by})\n"
    code = "#!lua name=pf_test_load_time\n" + "".join(
        functions.wrapped(f"pf_test_count{by}", counter.format(by=by)) for by in (1, 10)
    )
    real_redis.function_load(code, replace=True)
    try:
        got = [real_redis.fcall(name, 0) for name in ("pf_test_count1", "pf_test_count1", "pf_test_count10")]
        assert got == [1, 2, 10]  # the same upvalue from one call to the next; each script its own
        assert functions.wrapped("f", "return 1").startswith("redis.register_function")  # no part: as before
    finally:
        real_redis.function_delete("pf_test_load_time")


def test_match_makes_its_policys_functions_when_the_library_loads() -> None:
    code = functions.wrapped("pf_match", scripts.source("match"))
    load_time, per_call = code.split("callback=function(KEYS, ARGV)", 1)
    assert code.startswith("do\n") and "local function fs_take(" in load_time and "fs_take(" in per_call
    assert not any(f"function fs_{name}" in per_call for name in ("take", "write", "final", "next", "usage"))
