"""Estimates that keep per-job knowledge: a job's hint, its key's last success and its rule's statistics,
each by its worth (unit and property tests of :func:`taskqueues.ete.estimate`, then against a real Redis)."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from matcher.repressure import repressure
from matcher.submission import JobSpec, Submitter
from taskqueues.catalog import Catalog
from taskqueues.context import Context
from taskqueues.errors import ValidationError
from taskqueues.ete import DEFAULT_SPREAD, RuleStats, estimate
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import PilotOffer, RunResult
from tests.support.catalogs import QA, TWO_SITES
from tests.support.clock import FakeClock


def learnt(runs: list[tuple[float, float | None]]) -> RuleStats:
    stats = RuleStats()
    for run, hint in runs:
        stats = stats.update(run, hint)
    return stats


#: One rule, two kinds of job: short alignments of ~2 s and long ones of ~3000 s (SIPHT's Blast family).
WIDE = learnt([(2.0, 2.0), (3000.0, 3000.0), (2.5, 2.5), (2900.0, 2900.0)])


def test_the_spread_is_learnt_exactly_for_the_first_hundred_runs() -> None:
    rnd = random.Random(3)
    pairs = [(rnd.uniform(1, 500), rnd.uniform(1, 500)) for _ in range(100)]
    stats = learnt(pairs)
    assert stats.var == pytest.approx(statistics.pvariance([r for r, _ in pairs]), rel=1e-9)
    ratios = [math.log(r / h) for r, h in pairs]
    assert (stats.hn, stats.hlog) == (100, pytest.approx(statistics.fmean(ratios), rel=1e-9))
    assert stats.hvar == pytest.approx(statistics.pvariance(ratios), rel=1e-9)


def test_runs_without_a_hint_teach_the_run_times_only() -> None:
    stats = learnt([(10.0, None), (20.0, 0.0), (0.0, 5.0)])  # no hint, a 0 s hint, a 0 s run: no ratio
    assert (stats.n, stats.hn, stats.hint_factor) == (3, 0, 1.0)


def test_a_wide_rule_does_not_override_a_job_s_hint() -> None:
    assert WIDE.cv is not None and WIDE.cv > DEFAULT_SPREAD
    assert estimate(None, WIDE, 3100.0, 60.0) == (pytest.approx(3100.0), "hint")
    assert estimate(None, WIDE, 1.5, 60.0) == (pytest.approx(1.5), "hint")
    # the threshold is a setting: a looser one lets the rule speak again (hints were exact: they weigh most)
    assert estimate(None, WIDE, 3100.0, 60.0, spread=10.0)[0] == pytest.approx(3100.0, rel=0.01)


def test_a_key_s_last_success_still_wins() -> None:
    assert estimate(42.0, WIDE, 3100.0, 60.0) == (42.0, "key")


def test_without_a_hint_the_rule_s_mean_is_taken_as_in_the_seed() -> None:
    assert estimate(None, WIDE, None, 60.0) == (WIDE.mean, "rule")


def test_after_one_run_a_hinted_job_keeps_its_own_hint_corrected_by_that_run_s_ratio() -> None:
    # one run, hinted 10 s, took 100 s: the spread is unknown, but the hints are 10x short; a job hinted
    # 50 s is then expected at 500 s, not at the one run's 100 s (which would erase what tells the jobs apart)
    one = learnt([(100.0, 10.0)])
    assert one.cv is None
    assert estimate(None, one, 50.0, 60.0) == (pytest.approx(500.0), "hint")
    assert estimate(None, one, None, 60.0) == (100.0, "rule")


def test_until_the_spread_is_known_a_rule_whose_run_had_no_hint_gives_its_mean() -> None:
    one = learnt([(100.0, None)])
    assert one.cv is None and estimate(None, one, 10.0, 60.0) == (100.0, "rule")


def test_hints_wrong_by_the_same_factor_are_corrected_by_the_learnt_factor() -> None:
    # every hint was 3x too short: the factor says so, and it keeps the jobs' own differences
    stats = learnt([(30.0, 10.0), (3000.0, 1000.0), (600.0, 200.0)])
    assert stats.hint_factor == pytest.approx(3.0)
    assert estimate(None, stats, 50.0, 60.0) == (pytest.approx(150.0), "hint")


def test_a_narrow_rule_with_unreliable_hints_weighs_its_mean_most() -> None:
    # run times within ±5 %, hints off by factors of 1/4 to 4: the rule knows better
    stats = learnt([(100.0, 400.0), (105.0, 26.0), (95.0, 90.0), (100.0, 25.0)])
    value, source = estimate(None, stats, 400.0, 60.0)
    assert source == "rule" and abs(value - stats.mean) < 0.05 * stats.mean


def test_stored_text_round_trips_and_reads_the_old_two_numbers() -> None:
    assert RuleStats.from_text(WIDE.to_text()) == WIDE
    assert RuleStats.from_text(b"3 12.5") == RuleStats(3, 12.5)
    for bad in ("3", "3 1 2", "x 1 0 0 0 0", "3 1 -1 0 0 0"):
        with pytest.raises(ValidationError, match=r"rule statistics|variance"):
            RuleStats.from_text(bad)


times = st.floats(min_value=0.01, max_value=1e5, allow_nan=False, allow_infinity=False)
runs = st.lists(st.tuples(times, st.one_of(st.none(), times)), min_size=0, max_size=30)


@given(runs, times, st.floats(min_value=0.0, max_value=5.0))
def test_an_estimate_lies_between_what_its_sources_say(
    history: list[tuple[float, float | None]], hint: float, spread: float
) -> None:
    """Never outside the rule's mean and the corrected hint: a blend, not an extrapolation."""
    stats = learnt(history)
    value, source = estimate(None, stats, hint, 60.0, spread=spread)
    corrected = hint * stats.hint_factor
    low, high = (min(hint, stats.mean), max(hint, stats.mean)) if stats.n else (hint, hint)
    if stats.n:
        low, high = min(low, corrected), max(high, corrected)
    assert low * (1 - 1e-9) <= value <= high * (1 + 1e-9)
    assert source in ("rule", "hint")


@given(runs, times)
def test_over_the_threshold_the_estimate_is_the_corrected_hint(
    history: list[tuple[float, float | None]], hint: float
) -> None:
    stats = learnt(history)
    cv = stats.cv
    value, _ = estimate(None, stats, hint, 60.0)
    if cv is not None and cv > DEFAULT_SPREAD:
        assert value == pytest.approx(hint * stats.hint_factor, rel=1e-12)


@given(runs, times)
def test_python_and_stored_text_agree(history: list[tuple[float, float | None]], hint: float) -> None:
    stats = learnt(history)
    assert RuleStats.from_text(stats.to_text()) == stats


# -- against a real Redis: complete.lua learns what RuleStats.update does --------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def store(real_redis: redis.Redis, clock: FakeClock) -> Store:
    return Store(real_redis, lease_seconds=30, clock=clock)


@pytest.fixture
def submitter(store: Store, clock: FakeClock) -> Submitter:
    return Submitter(store, Catalog.loads(TWO_SITES), clock=clock)


def run_all(store: Store, walls: dict[str, float]) -> None:
    """Match and complete everything waiting, each job taking the wall its name says."""
    while got := store.match(PilotOffer("p", QA, 16, 64000), max_jobs=16):
        for job in got:
            store.complete(job.id, job.attempt, "p", RunResult(wall=walls[job.name]))


def test_a_learnt_wide_rule_keeps_the_jobs_hints(submitter: Submitter, store: Store) -> None:
    walls = {"short0": 2.0, "long0": 3000.0, "short1": 2.5, "long1": 2900.0}
    submitter.submit([JobSpec(n, "true", rule="blast", ete=w) for n, w in walls.items()], name="first")
    run_all(store, walls)
    _, rules = store.ete_stats([], ["blast"])
    expected = learnt([(w, w) for w in walls.values()])
    assert rules["blast"].to_text() == expected.to_text()  # complete.lua and RuleStats agree to the bit
    sub = submitter.submit(
        [JobSpec("short", "true", rule="blast", ete=2.2), JobSpec("long", "true", rule="blast", ete=3100.0)],
        name="again",
    )
    ete = {j.name: j.ete for j in store.jobs(list(sub.ids.values()))}
    assert ete == {"short": pytest.approx(2.2), "long": pytest.approx(3100.0)}
    assert store.job(sub.ids["long"]).score < store.job(sub.ids["short"]).score  # the long one first


def test_re_pressure_corrects_hints_wrong_by_one_factor_and_keeps_the_wide_rule_s_hints(
    submitter: Submitter, store: Store, clock: FakeClock
) -> None:
    # every hint of "align" is 3x too long; its runs still differ widely, so its mean must not be taken
    # (at site B only: they wait while the teaching jobs run at site A)
    waiting = submitter.submit(
        [
            JobSpec("w_short", "true", {"Platform": "EL8"}, rule="align", ete=6.0),
            JobSpec("w_long", "true", {"Platform": "EL8"}, rule="align", ete=9000.0),
        ],
        name="later",
    )
    walls = {"t_short": 2.0, "t_long": 3000.0, "t_mid": 300.0}
    submitter.submit([JobSpec(n, "true", rule="align", ete=3 * w) for n, w in walls.items()], name="teach")
    run_all(store, walls)
    clock.now += 10
    report = repressure(store)
    assert report.rules_moved == ["align"]
    ete = {j.name: j.ete for j in store.jobs(list(waiting.ids.values()))}
    assert ete == {"w_short": pytest.approx(2.0, rel=1e-3), "w_long": pytest.approx(3000.0, rel=1e-3)}


def test_the_spread_setting_reaches_the_submitter(redis_url: str, tmp_path: Path) -> None:
    assert Settings.load(env={"PILOTFISH_ETE_SPREAD": "3"}).ete_spread == 3
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(TWO_SITES)
    ctx = Context(Settings(redis_url=redis_url, catalog=str(catalog), ete_spread=10.0))
    walls = {"short0": 2.0, "long0": 3000.0, "short1": 2.5, "long1": 2900.0}
    Submitter.of(ctx).submit([JobSpec(n, "true", rule="blast", ete=w) for n, w in walls.items()])
    run_all(ctx.store, walls)
    # a threshold of 10 lets the wide rule speak; the exact hints still weigh most, but not all
    sub = Submitter.of(ctx).submit([JobSpec("long", "true", rule="blast", ete=3100.0)])
    ete = ctx.store.job(sub.ids["long"]).ete
    assert ete != pytest.approx(3100.0, abs=1e-6) and ete == pytest.approx(3100.0, rel=0.05)
