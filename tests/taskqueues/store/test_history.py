"""The history of ended jobs (``store.history``): the ``endedby`` index the scripts keep beside ``ended``, pages
of a time window by owner, group and state, their cursors, and retention forgetting the entries. Real
redis-server throughout."""

from __future__ import annotations

import pytest

from taskqueues.errors import ValidationError
from taskqueues.store import Store, retention
from taskqueues.store.records import PilotOffer, RunResult
from tests.support.clock import FakeClock
from tests.support.store import job

Q1 = "site/ce/q1"
ALICE, BOB = "tqA.phys.alice", "tqA.chem.bob"


def run_all(store: Store, clock: FakeClock, n: int, fail_every: int = 0) -> list[str]:
    """Match and end ``n`` waiting jobs, one per clock second: done, or failed for every ``fail_every``-th."""
    ended = []
    for i in range(n):
        [leased] = store.match(PilotOffer("p1", Q1, cpu=1, mem=1000), 1)
        clock.now += 1
        if fail_every and i % fail_every == fail_every - 1:
            store.fail(leased.id, 1, "p1", RunResult(exit_code=3, reason="exit code 3"))
        else:
            store.complete(leased.id, 1, "p1", RunResult(wall=1))
        ended.append(leased.id)
    return ended


def entries(store: Store) -> list[str]:
    return [e.decode() for e in store.client.zrange(store.keys.endedby, 0, -1)]


def test_each_end_writes_an_owner_and_a_group_entry(store: Store, clock: FakeClock) -> None:
    [a] = store.submit([job(ALICE, score=1)], ("r1", {"owner": "alice", "group": "phys"}))
    [done] = run_all(store, clock, 1)
    assert done == a
    end = f"{clock.now:014.3f}"
    assert sorted(entries(store)) == [f"g:phys:{end}:{a}:done:alice", f"o:alice:{end}:{a}:done:phys"]


def test_a_job_with_no_account_in_its_task_queue_is_indexed_under_its_requests(store: Store) -> None:
    # A deferred job has no task queue until released: cancelling its request ends it with none.
    [parent, child] = store.submit(
        [job(ALICE, score=1, dependents=(1,)), job("", pending=1, deps=(0,), deferred="{}", queues=())],
        ("r1", {"owner": "alice", "group": "phys"}),
    )
    store.cancel(parent)
    owners = {e.split(":")[3]: e.split(":")[1] for e in entries(store) if e.startswith("o:")}
    assert owners == {parent: "alice", child: "alice"}
    assert {j.state.value for j in store.history.page(0, 2e9, owner="alice").jobs} == {"cancelled", "dep-failed"}


def test_pages_of_one_owner_in_a_window_with_cursors(store: Store, clock: FakeClock) -> None:
    store.submit([job(ALICE if i % 3 else BOB, score=i) for i in range(30)], ("r1", {}))
    ended = run_all(store, clock, 30, fail_every=4)
    alice = [j for j in ended if store.job(j).tq_id == ALICE]
    seen: list[str] = []
    after = None
    while True:
        page = store.history.page(0, 2e9, owner="alice", after=after, limit=7)
        seen += [j.id for j in page.jobs]
        if page.next is None:
            break
        after = page.next
    assert seen == alice  # oldest end first, each once
    window = store.history.page(1_000_005, 1_000_010, owner="alice").jobs
    assert all(1_000_005 <= (j.ended or 0) <= 1_000_010 for j in window) and len(window) == 4
    failed = store.history.page(0, 2e9, group="phys", states=frozenset({"failed"})).jobs
    assert failed and {(j.state.value, j.tq_id) for j in failed} == {("failed", ALICE)}
    assert store.history.page(0, 2e9, owner="alice", group="chem").jobs == []
    assert [j.id for j in store.history.page(0, 2e9, owner="bob", group="chem").jobs] == [
        j for j in ended if j not in alice
    ]


def test_pages_of_everyone_by_state_and_cursor(store: Store, clock: FakeClock) -> None:
    store.submit([job(ALICE, score=i) for i in range(12)], ("r1", {}))
    ended = run_all(store, clock, 12, fail_every=3)
    first = store.history.page(0, 2e9, limit=5)
    assert [j.id for j in first.jobs] == ended[:5] and first.next is not None
    second = store.history.page(0, 2e9, limit=5, after=first.next)
    assert [j.id for j in second.jobs] == ended[5:10]
    failed = store.history.page(0, 2e9, states=frozenset({"failed"}), limit=3)
    assert [j.id for j in failed.jobs] == ended[2::3][:3] and failed.next is not None
    rest = store.history.page(0, 2e9, states=frozenset({"failed"}), limit=3, after=failed.next)
    assert [j.id for j in rest.jobs] == ended[2::3][3:] and rest.next is None


def test_retention_forgets_the_entries_with_the_records(store: Store, clock: FakeClock) -> None:
    clock.now = 1_795_840_483.329_517_3  # more digits than a record keeps: the entries name what it keeps
    store.submit([job(ALICE, score=i) for i in range(3)], ("r1", {"owner": "alice", "group": "phys"}))
    run_all(store, clock, 3)
    store.client.hset(store.keys.cursor, "repressure", "2e9")  # learnt from already
    assert len(entries(store)) == 6
    retention.forget_ended(store, clock.now + 1)
    assert entries(store) == [] and store.history.page(0, 2e9, owner="alice").jobs == []


def test_a_bad_cursor_or_limit_is_refused_naming_it(store: Store) -> None:
    with pytest.raises(ValidationError, match="--after 'nope' is not a history cursor"):
        store.history.page(0, 1, owner="alice", after="nope")
    with pytest.raises(ValidationError, match="--limit must be at least 1"):
        store.history.page(0, 1, limit=0)
