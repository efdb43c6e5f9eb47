""" "Why is this job pending": explain() and the ``explain`` command for known situations, real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from matcher.cli.operator_commands import explain as explain_command
from matcher.explain import explain, render_explanation
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.errors import NotFound
from taskqueues.store import Store
from taskqueues.store.keys import Keys
from taskqueues.store.records import JobUsage, PilotOffer, RunResult
from tests.support.catalogs import QA, QB, TWO_SITES
from tests.support.clock import FakeClock

CATALOG = TWO_SITES
NOW = 1_000_000.0
# The community of these tests, which no other test or pilot uses. The clock below is frozen in 1970, so a
# heartbeat written with the real clock counts as live for every test here; pilots that other tests start or
# cancel outlive them by a few seconds and their last heartbeats land in the next tests' freshly flushed
# Redis, in the default community (that made this file fail now and then in full runs). Keys of a community
# of our own see none of them.
VO = "explain-tests"

pytestmark = pytest.mark.store(keys=Keys(vo=VO))

# A pilot's record as its heartbeat writes it (pilot.agent.heartbeat.Heartbeat.record): its size and what is used.
FULL = {
    "queue": QA,
    "cores": 4,
    "mem": 8000,
    "tmp": 1000,
    "used_cpu": 0,
    "used_mem": 0,
    "used_tmp": 0,
    "time_left": 3600,
    "running": [],
    "draining": False,
}


@pytest.fixture(autouse=True)
def leftover_pilot(real_redis: redis.Redis) -> None:
    """A pilot of an earlier test still beating into this server, in the default community, on the real clock."""
    Store(real_redis).heartbeat("leftover@elsewhere", {}, {**FULL, "queue": "local/localhost/local"})


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.loads(CATALOG)


@pytest.fixture
def submitter(store: Store, catalog: Catalog) -> Submitter:
    return Submitter(store, catalog, vo=VO, clock=store.clock, capacity=lambda: 1e6)  # no load: ETA = critical path


def el9(name: str, ete: float = 100, **reqs: Any) -> JobSpec:
    return JobSpec(name, "true", {"Platform": "EL9", **reqs}, ete=ete)


def pilot(store: Store, name: str, **record: Any) -> None:
    """A pilot's heartbeat, with the record it publishes."""
    store.heartbeat(name, {}, {**FULL, **record})


def test_a_job_no_pilot_can_run(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    sub = submitter.submit([el9("j")])
    e = explain(store, catalog, sub.ids["j"])
    assert (e.state, e.position, e.queue_length, e.eligible) == ("waiting", 0, 1, [QA])
    assert "Platform" in e.ineligible[QB]
    assert e.pilots == [] and e.verdict == "no live pilot in an eligible queue: the director must start one"
    # A live pilot in the wrong queue does not change that, and says why.
    pilot(store, "b1", queue=QB)
    e = explain(store, catalog, sub.ids["j"])
    (fit,) = e.pilots
    assert not fit.eligible and "EL9" in fit.reasons[0]
    assert fit.reasons[0].startswith(f"its queue {QB} is not eligible: ")
    assert e.verdict.startswith("no live pilot in an eligible queue")


def test_a_job_blocked_by_resources(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    sub = submitter.submit([el9("big", ete=7200, cpu=2, mem="4G")])
    pilot(store, "p1", used_cpu=3, used_mem=2000)
    pilot(store, "p2", time_left=600)
    pilot(store, "p3", draining=True)
    e = explain(store, catalog, sub.ids["big"])
    by = {f.pilot: f for f in e.pilots}
    # No wall: it needs its estimate with the safety margin (1.5 x 7200 s) left.
    margin = "10800 s needed (estimated run time 7200 s, with margin)"
    assert by["p1"].reasons == ["free cpu 1 < 2 cores needed", f"time left 3600 s < {margin}"]
    assert by["p2"].reasons == [f"time left 600 s < {margin}"]
    assert by["p3"].reasons[0] == "it is draining (takes no new work)"
    assert not any(f.fits for f in e.pilots)
    assert e.verdict.startswith("no live pilot in an eligible queue has room for it (3 seen); e.g. p1: free cpu 1")


def test_a_job_with_a_wall_needs_its_wall_left_whatever_its_estimate(
    submitter: Submitter, store: Store, catalog: Catalog
) -> None:
    sub = submitter.submit([el9("long", ete=5, wall="600s"), el9("short", ete=100, wall="30s", cpu=2)])
    pilot(store, "p", time_left=60)
    assert explain(store, catalog, sub.ids["long"]).pilots[0].reasons == ["time left 60 s < wall 600 s"]
    assert explain(store, catalog, sub.ids["short"]).pilots[0].fits


def test_unknown_pilot_fields_are_said_unknown(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    sub = submitter.submit([el9("j", mem="1G")])
    store.heartbeat("sparse", {}, {"queue": QA})
    e = explain(store, catalog, sub.ids["j"])
    (fit,) = e.pilots
    assert not fit.fits and fit.reasons == ["free cpu unknown", "free mem unknown", "time left unknown"]
    assert "can run it now" not in e.verdict, "a pilot whose room is unknown is never named as able"
    store.heartbeat("anon", {}, {"cpu": 4})
    by = {f.pilot: f for f in explain(store, catalog, sub.ids["j"]).pilots}
    assert by["anon"].reasons == ["its queue is unknown (no queue in its record)"]


def test_only_live_pilots_count(submitter: Submitter, store: Store, catalog: Catalog, clock: FakeClock) -> None:
    sub = submitter.submit([el9("j")])
    pilot(store, "old")
    clock.now += 3 * 60 + 1  # three leases without a heartbeat
    pilot(store, "new", queue=QB)
    pilot(store, "gone", stopped="idle: nothing matched for 60.0 s", draining=True)  # its goodbye heartbeat
    e = explain(store, catalog, sub.ids["j"])
    assert [f.pilot for f in e.pilots] == ["new"] and e.skipped == 2 and e.window == 180
    assert "  (2 pilots not listed: stopped, or no heartbeat within 180 s)" in render_explanation(e, NOW)


def test_fit_is_judged_on_what_the_heartbeat_says_is_free(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    """Issue 20: a 4-core job was said to run now on a 1-core, 2 GB pilot, whose free room showed as
    unknown because the record holds its size and use, not its free room."""
    sub = submitter.submit([el9("wide", cpu=4, mem="7G"), el9("one", cpu=1, mem="1G")])
    pilot(store, "small", cores=1, mem=2000, tmp=10000)
    pilot(store, "busy", cores=8, mem=20000, tmp=10000, used_cpu=6, used_mem=4000)
    wide = explain(store, catalog, sub.ids["wide"])
    by = {f.pilot: f for f in wide.pilots}
    assert by["small"].reasons == ["free cpu 1 < 4 cores needed", "free mem 2000 < 7000 MB memory needed"]
    assert by["busy"].reasons == ["free cpu 2 < 4 cores needed"]
    assert not any(f.fits for f in wide.pilots) and "can run it now" not in wide.verdict
    assert "unknown" not in " ".join(render_explanation(wide, NOW))
    one = explain(store, catalog, sub.ids["one"])
    assert {f.pilot for f in one.pilots if f.fits} == {"small", "busy"}


def test_behind_jobs_of_its_task_queue_and_behind_other_heads(
    submitter: Submitter, store: Store, catalog: Catalog
) -> None:
    first = submitter.submit([el9("first", ete=100)], priority=10)  # same task queue, more urgent
    mine = submitter.submit([el9("mine", ete=100)])
    pilot(store, "p")
    e = explain(store, catalog, mine.ids["mine"])
    assert (e.position, e.queue_length) == (1, 2)
    assert e.pilots[0].reasons == ["waiting behind 1 jobs of its task queue"]
    assert e.verdict == "waiting behind 1 more urgent jobs of its task queue"
    # Once it is the head, a more urgent head of another task queue that fits the pilot goes first.
    (taken,) = store.match(PilotOffer("q", QA, 4, 8000))
    assert taken.id == first.ids["first"]
    other = submitter.submit([el9("other", ete=100, mem="1G")], priority=20)
    e = explain(store, catalog, mine.ids["mine"])
    assert e.position == 0 and e.pilots[0].ahead == 1
    assert e.pilots[0].reasons == ["1 more urgent heads fit first"]
    assert e.verdict.startswith("1 more urgent heads fit first")
    # That head does not fit a pilot with little memory: for that pilot, mine is next.
    pilot(store, "small", used_mem=7500)
    e = explain(store, catalog, mine.ids["mine"])
    assert {f.pilot: f.ahead for f in e.pilots} == {"p": 1, "small": 0}
    assert e.verdict == "pilot small can run it now: it should be matched at its next request"
    assert store.match(PilotOffer("small", QA, 4, 500))[0].id == mine.ids["mine"]  # and match agrees
    assert other.ids["other"] in [j.id for j in store.match(PilotOffer("p", QA, 4, 8000))]


def test_jobs_that_are_not_waiting(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    sub = submitter.submit([el9("a"), JobSpec("b", "true", {"Platform": "EL9"}, deps=("a",))])
    assert explain(store, catalog, sub.ids["b"]).verdict == f"blocked: 1 dependencies unfinished ({sub.ids['a']})"
    (a,) = store.match(PilotOffer("p", QA, 4, 8000))
    store.start(a.id, a.attempt, "p")
    assert explain(store, catalog, a.id).verdict == "not waiting: running on pilot p"
    store.heartbeat("p", {a.id: a.attempt}, usage={a.id: JobUsage(312.4, 7.25)})
    assert (
        explain(store, catalog, a.id).verdict
        == "not waiting: running on pilot p (so far: peak memory 312.4 MB, CPU 7.25 s)"
    )
    store.complete(a.id, a.attempt, "p", RunResult(wall=5))
    assert explain(store, catalog, a.id).verdict == "not waiting: it ended done"
    with pytest.raises(NotFound):
        explain(store, catalog, "999999")


def test_render_and_command(submitter: Submitter, real_redis: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    # The command reads the real clock: a store on it publishes the heartbeat.
    live = Store(real_redis, Keys(vo=VO), lease_seconds=60)
    sub = Submitter(live, Catalog.loads(CATALOG), vo=VO).submit([el9("j", cpu=2)])
    live.heartbeat("p1", {}, {**FULL, "used_cpu": 3})
    lines = render_explanation(explain(live, Catalog.loads(CATALOG), sub.ids["j"]), time.time())
    assert lines[-1].startswith("verdict: no live pilot in an eligible queue has room")
    assert any(line == "  pilot p1 (A/ce/q): free cpu 1 < 2 cores needed" for line in lines)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    env = {"PILOTFISH_REDIS_URL": redis_url, "PILOTFISH_CATALOG": str(catalog), "PILOTFISH_VO": VO}
    result = CliRunner().invoke(explain_command, [sub.ids["j"]], env=env)
    assert result.exit_code == 0, result.output
    assert f"not eligible {QB}: " in result.output and "verdict: no live pilot" in result.output
    result = CliRunner().invoke(explain_command, [sub.ids["j"], "--json"], env=env)
    doc = json.loads(result.output)
    assert doc["pilots"][0]["reasons"] == ["free cpu 1 < 2 cores needed"] and doc["position"] == 0


def test_what_a_pilot_matched_since_its_heartbeat_counts(submitter: Submitter, store: Store, catalog: Catalog) -> None:
    """A heartbeat may be older than the pilot's last match: the leased jobs say what it holds now."""
    sub = submitter.submit([el9("first", cpu=4, ete=100), el9("next", cpu=1, ete=100)])
    pilot(store, "p")  # all 4 cores free, as of this heartbeat
    (taken,) = store.match(PilotOffer("p", QA, 4, 8000))
    assert taken.id == sub.ids["first"]
    e = explain(store, catalog, sub.ids["next"])
    assert e.pilots[0].reasons == ["free cpu 0 < 1 cores needed"] and "can run it now" not in e.verdict
