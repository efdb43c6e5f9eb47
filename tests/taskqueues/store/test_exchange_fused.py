"""A start and a completion of one job in one exchange go as one ``complete`` call, with the verdicts of the two.

Each case is made twice, in two communities of one server (the same job ids, the same clock): once with both
reports in one exchange (fused), once with the start in an exchange and the completion in the next (the two
scripts, applied in the same order as before the fusion). What the pilot is told (the refusals, merged as one
exchange merges them: the completion's reason last), the record and the job's events must be the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from taskqueues.store import Store
from taskqueues.store.keys import Keys
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.store import job

pytestmark = pytest.mark.store(lease_seconds=30, servers=("real", "fake"))

Q1 = "site/ce/q1"
RESULT = RunResult(exit_code=0, wall=1.5, cpu_time=1.0, peak_mem=20.0)


def offer(pilot: str = "p1") -> PilotOffer:
    return PilotOffer(pilot=pilot, queue=Q1, cpu=8, mem=10_000, tmp=10_000, time_left=None)


def matched(store: Store, clock: FakeClock) -> str:
    (jid,) = store.submit([job(score=1)])
    assert [j.id for j in store.match(offer())] == [jid]
    return jid


def started(store: Store, clock: FakeClock) -> str:
    jid = matched(store, clock)
    store.start(jid, 1, "p1", clock.now)
    return jid


def requeued(store: Store, clock: FakeClock, *, start: bool) -> str:
    """Leased to p1 (started if ``start``), its lease requeued by the reaper (the store was paused): p1's report
    of that attempt takes it back (taskqueues/store/lua/_lib.lua, requeued_from)."""
    jid = started(store, clock) if start else matched(store, clock)
    clock.now += 31
    assert store.requeue_expired() == (1, 0, 1)
    return jid


def matched_again(store: Store, clock: FakeClock) -> str:
    """Requeued and matched by p2 since: attempt 1 is stale."""
    jid = requeued(store, clock, start=False)
    assert [j.id for j in store.match(offer("p2"))] == [jid]
    return jid


CASES: dict[str, tuple[Callable[[Store, FakeClock], str], str]] = {
    "matched": (matched, "p1"),
    "started already": (started, "p1"),
    "leased to another pilot": (matched, "p2"),
    "requeued while matched": (lambda s, c: requeued(s, c, start=False), "p1"),
    "requeued while running": (lambda s, c: requeued(s, c, start=True), "p1"),
    "matched again since": (matched_again, "p1"),
}


def outcome(store: Store, jid: str) -> tuple[Any, ...]:
    rec = store.job(jid)
    return rec.state, rec.attempt, rec.pilot, rec.started, rec.ended, rec.retries, rec.wall, store.lifecycle.events(jid)


@pytest.mark.parametrize("case", list(CASES))
def test_a_fused_start_gets_the_verdicts_of_the_two_reports(store: Store, clock: FakeClock, case: str) -> None:
    make, pilot = CASES[case]
    apart = Store(store.client, Keys(vo="apart"), lease_seconds=store.lease_seconds, clock=store.clock)
    begin = clock.now
    jid = make(store, clock)
    end, clock.now = clock.now, begin  # the twin made at the same times
    assert make(apart, clock) == jid and clock.now == end
    at = clock.now - 0.25
    clock.now += 0.5
    fused = store.exchange(pilot, starts=[(jid, 1, at)], completions=[(jid, 1, RESULT)])
    first = apart.exchange(pilot, starts=[(jid, 1, at)])
    second = apart.exchange(pilot, completions=[(jid, 1, RESULT)])
    assert fused.refused == {**first.refused, **second.refused}
    assert fused.released == second.released
    assert outcome(store, jid) == outcome(apart, jid)


def test_a_fused_start_is_recorded_with_its_time_and_the_job_ends_in_one_call(store: Store, clock: FakeClock) -> None:
    jid = matched(store, clock)
    at = clock.now + 0.125
    clock.now += 0.5
    calls = fcalls(store)
    got = store.exchange("p1", starts=[(jid, 1, at)], completions=[(jid, 1, RESULT)], offer=offer())
    assert got.refused == {} and got.matched == []
    if calls is not None:
        assert fcalls(store) == calls + 2  # complete (with the start) and match: no start script
    rec = store.job(jid)
    assert (rec.state, rec.started, rec.ended, rec.wall) == (JobState.DONE, at, clock.now, 1.5)
    events = [(e.source, e.state, e.time) for e in store.lifecycle.events(jid)]
    assert [(f, s) for f, s, _ in events][-2:] == [("matched", "running"), ("running", "done")]
    assert [t for _, _, t in events][-2:] == [at, clock.now]


def fcalls(store: Store) -> int | None:
    """FCALLs the server answered so far (None where it keeps no command statistics: fakeredis)."""
    try:
        stats: dict[str, dict[str, int]] = store.client.info("commandstats")  # type: ignore[assignment]
    except Exception:
        return None
    return int(stats.get("cmdstat_fcall", {}).get("calls", 0)) if stats else None


def test_complete_refuses_a_bad_start_time_or_an_argument_too_many(store: Store, clock: FakeClock) -> None:
    jid = matched(store, clock)
    keys = store._complete_keys()
    args = store._complete_args(jid, 1, "p1", RESULT, clock.now)
    before = store.job(jid)
    for extra, message in (
        (["nan"], r"^complete: ARGV\[7\] \(started\): wants a number in \[0, 1000000000000\], got \"nan\""),
        (["1", "2"], r"^complete: ARGV: wants 6 or 7 arguments, got 8$"),
    ):
        with pytest.raises(redis.ResponseError, match=message):
            store._scripts["complete"](keys=keys, args=[*args, *extra])
    assert store.job(jid) == before
    assert store._scripts["complete"](keys=keys, args=[*args, ""]) == [b"ok"]  # '' : no start inside
    assert store.job(jid).started is None
