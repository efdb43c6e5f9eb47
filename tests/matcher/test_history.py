"""``pilotfish history`` and ``--format``: time words, windows by owner and group, pages and their cursors,
field lists; ``jobs --owner/--group/--format``. Real redis-server throughout; the commands as subprocesses."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from matcher.formats import JOB_COLUMNS, duration
from matcher.history import HistoryFilter, list_history, parse_time
from matcher.joblist import FINISHED, JobFilter, list_jobs
from taskqueues.errors import ValidationError
from taskqueues.store import Store
from taskqueues.store.records import PilotOffer, RunResult
from tests.matcher.test_joblist import cli
from tests.support.store import job

Q1 = "site/ce/q1"
ALICE, BOB = "tqA.phys.alice", "tqA.chem.bob"


def end_all(store: Store, n: int) -> list[str]:
    """Match and end ``n`` jobs: every third fails with exit code 3."""
    ended = []
    for i in range(n):
        [leased] = store.match(PilotOffer("p1", Q1, cpu=1, mem=1000), 1)
        if i % 3 == 2:
            store.fail(leased.id, 1, "p1", RunResult(exit_code=3, wall=2, reason="exit code 3"))
        else:
            store.complete(leased.id, 1, "p1", RunResult(exit_code=0, wall=1))
        ended.append(leased.id)
    return ended


def test_time_words() -> None:
    now = 1_000_000.0
    assert parse_time("2d", now) == now - 2 * 86400
    assert parse_time("90s", now) == now - 90 and parse_time("1.5h", now) == now - 5400
    assert parse_time("now", now) == now and parse_time("@12.5", now) == 12.5
    assert parse_time("2026-11-27T08:00", now) == datetime(2026, 11, 27, 8).timestamp()
    with pytest.raises(ValidationError, match=r"--until 'yesterday' is not a time: give a duration"):
        parse_time("yesterday", now, "--until")
    with pytest.raises(ValidationError, match="--until '1d' is before --since '1h'"):
        HistoryFilter.of("1h", "1d")
    with pytest.raises(ValidationError, match="--state running: history lists ended jobs only"):
        HistoryFilter.of("1d", states=["running"])


def test_formats_parse_and_render() -> None:
    assert JOB_COLUMNS.parse("JSON").kind == "json"
    assert JOB_COLUMNS.parse("id, State,exit").fields == ("id", "state", "exit")
    with pytest.raises(
        ValidationError, match=r"--format 'id,bogus': no field named 'bogus'; use table, json or .*elapsed"
    ):
        JOB_COLUMNS.parse("id,bogus")
    assert duration(59.6) == "00:01:00" and duration(90061) == "1-01:01:01" and duration(None) == "-"


def test_history_pages_one_owner_and_jobs_filters_by_account(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    store.submit([job(ALICE if i % 2 else BOB, score=i) for i in range(10)], ("r1", {"name": "mix"}))
    ended = end_all(store, 10)
    # In end order; jobs that ended in the same millisecond by id as text (the index's order).
    alice = sorted((j for j in ended if store.job(j).tq_id == ALICE), key=lambda j: (f"{store.job(j).ended:014.3f}", j))
    listing = list_history(store, HistoryFilter.of("1h", owner="alice", limit=3))
    assert [r.id for r in listing.rows] == alice[:3] and listing.next is not None
    rest = list_history(store, HistoryFilter.of("1h", owner="alice", limit=3, after=listing.next))
    assert [r.id for r in rest.rows] == alice[3:] and rest.next is None
    assert {r.owner for r in rest.rows} == {"alice"} and {r.group for r in rest.rows} == {"phys"}
    assert list_history(store, HistoryFilter.of("1h", "30m", owner="alice")).rows == []
    bob_failed = list_history(store, HistoryFilter.of("1h", group="chem", states=["failed"])).rows
    assert [r.id for r in bob_failed] == [j for i, j in enumerate(ended) if i % 3 == 2 and j not in alice]

    assert list_jobs(store, JobFilter(owner="bob", limit=50)).rows == []  # active only by default: all ended
    bobs = list_jobs(store, JobFilter(FINISHED, owner="bob", limit=50)).rows
    assert sorted(r.id for r in bobs) == sorted(j for j in ended if j not in alice)
    assert list_jobs(store, JobFilter(FINISHED, owner="bob", group="phys", limit=50)).rows == []
    latest = list_jobs(store, JobFilter(FINISHED, owner="alice", limit=3))  # the history index, latest end first
    assert [r.id for r in latest.rows] == alice[::-1][:3] and latest.more


def test_the_commands_print_pages_field_lists_and_json(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    store.submit([job(ALICE, score=i, name=f"j{i}") for i in range(4)], ("r1", {"name": "mine"}))
    ended = end_all(store, 4)
    first = cli(redis_url, "history", "--since", "1h", "--owner", "alice", "--limit", "3")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "REQUEST", "OWNER", "GROUP", "STATE", "START", "END", "ELAPSED", "EXIT"]
    assert [line.split()[0] for line in lines[1:4]] == ended[:3]
    assert lines[3].split()[5] == "failed" and lines[3].split()[-2:] == ["00:00:02", "3"]
    cursor = lines[4].removeprefix("... more: add --after ")
    second = cli(redis_url, "history", "-S", "1h", "-u", "alice", "--after", cursor, "--format", "id,state,exit")
    assert second.stdout.splitlines() == ["ID  STATE  EXIT", f"{ended[3]:<2}  done   0"]
    doc = json.loads(cli(redis_url, "history", "--group", "phys", "--format", "json").stdout)
    assert [j["id"] for j in doc["jobs"]] == ended and doc["next"] is None
    fields = cli(redis_url, "jobs", "--state", "finished", "--owner", "alice", "--format", "id,owner,elapsed")
    assert fields.stdout.splitlines()[0].split() == ["ID", "OWNER", "ELAPSED"]
    assert len(fields.stdout.splitlines()) == 5
    bad = cli(redis_url, "history", "--since", "soon")
    assert bad.returncode == 1 and bad.stderr.startswith("pilotfish: error: --since 'soon' is not a time")
    bad = cli(redis_url, "jobs", "--format", "id,color")
    assert bad.returncode == 1 and "no field named 'color'" in bad.stderr
