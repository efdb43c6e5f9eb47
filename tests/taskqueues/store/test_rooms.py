"""The store's rooms (issue 33): every Redis call behind the face goes through the guard, and the values the
store owns (the live window, the canonical JSON) have one definition."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import redis

from taskqueues.errors import StoreUnavailable
from taskqueues.requirements import Requirements
from taskqueues.store import LIVE_LEASES, Policy, Store, canonical_json
from tests.support.clock import FakeClock

DEAD = "redis://127.0.0.1:1/0"

CALLS: dict[str, Callable[[Store], object]] = {
    "reading a pilot's stop request": lambda s: s.pilots.stop_request("p1"),
    "asking a pilot to stop": lambda s: s.pilots.request_stop("p1", "drain", "operator"),
    "forgetting stop requests": lambda s: s.pilots.forget_stops("p1"),
    "reading the live pilots": lambda s: s.pilots.live(),
    "storing the shares policy": lambda s: s.shares.publish(Policy(shares={"g": 1})),
    "reading the fair-share usage": lambda s: s.shares.state(0.0),
    "recording that a component is alive": lambda s: s.control.beat("worker"),
    "reading a component's last beat": lambda s: s.control.last_beat("beat"),
    "counting a submitted pilot": lambda s: s.control.count_submitted("slurm"),
    "reading the submitted pilots": lambda s: s.registry.of("site/ce/q", "local"),
    "reading the task queues": lambda s: s.views.task_queue_ids(),
    "counting jobs and pilots for metrics": lambda s: s.views.census(30.0),
    "reading a job's output": lambda s: s.logs.read("1"),
    "pinging the store": lambda s: s.ping(),
    "taking a connection of one's own": lambda s: s.own_connection(),
    "subscribing to a channel": lambda s: s.subscribe().subscribe("c"),
    "reading the parked jobs": lambda s: s.parked(),
}


@pytest.mark.parametrize("operation", sorted(CALLS))
def test_every_room_answers_a_dead_server_with_a_store_error_naming_what_it_did(operation: str) -> None:
    store = Store.from_url(DEAD)
    with pytest.raises(StoreUnavailable) as caught:
        CALLS[operation](store)
    assert "127.0.0.1:1" in str(caught.value) and operation in str(caught.value), caught.value
    assert not isinstance(caught.value, redis.RedisError)


def test_the_live_window_is_three_leases_and_a_pilot_is_live_within_it(real_redis: redis.Redis) -> None:
    clock = FakeClock()
    store = Store(real_redis, lease_seconds=10, clock=clock)
    assert store.pilots.live_window == LIVE_LEASES * 10 == 30
    store.heartbeat("p1", {}, {"queue": "site/ce/q"})
    clock.now += 29
    assert store.pilots.live().records == {"p1": {"queue": "site/ce/q"}}
    assert set(store.pilot_records(store.pilots.live_window)) == {"p1"}
    clock.now += 2
    live = store.pilots.live()
    assert live.records == {} and live.total == 1, "gone from the window, still in the pilots hash"


def test_canonical_json_is_one_form_and_refuses_what_has_none() -> None:
    assert canonical_json({"b": 1, "a": ["y", "x"], "c": "é"}) == '{"a":["y","x"],"b":1,"c":"\\u00e9"}'
    with pytest.raises(ValueError):
        canonical_json({"cpu": math.nan})
    req = Requirements(values={"cpu": 2, "site": ["B", "A"]})
    assert req.canonical_json() == canonical_json(req.canonical())
