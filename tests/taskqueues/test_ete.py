"""ETE statistics: cumulative mean for the first 100 successful runs, then an EMA; the estimate order."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from taskqueues.errors import ValidationError
from taskqueues.ete import CUMULATIVE_RUNS, EMA_ALPHA, RuleStats, estimate, last_success


def test_first_hundred_runs_give_the_exact_mean() -> None:
    rnd = random.Random(7)
    runs = [rnd.uniform(1, 500) for _ in range(CUMULATIVE_RUNS)]
    stats = RuleStats()
    for count, run in enumerate(runs, start=1):
        stats = stats.update(run)
        assert stats.n == count
        assert math.isclose(stats.mean, statistics.fmean(runs[:count]), rel_tol=1e-12)


def test_small_integer_runs_are_exact() -> None:
    stats = RuleStats()
    for run in (10, 20, 30, 40):
        stats = stats.update(run)
    assert (stats.n, stats.mean) == (4, 25.0)
    assert stats.var == pytest.approx(125.0, rel=1e-12)  # population variance of 10, 20, 30, 40


def test_after_a_hundred_runs_it_is_an_ema_with_alpha_one_hundredth() -> None:
    stats = RuleStats()
    for _ in range(CUMULATIVE_RUNS):
        stats = stats.update(100.0)
    assert stats == RuleStats(100, 100.0)
    stats = stats.update(200.0)
    # cumulative would give 100 + 100/101 = 100.990...; the EMA gives exactly 100 + 100/100
    assert stats.n == 101
    assert stats.mean == pytest.approx(101.0, abs=1e-12)
    expected = 101.0
    for run in (0.0, 300.0, 50.0):
        stats = stats.update(run)
        expected += EMA_ALPHA * (run - expected)
        assert stats.mean == pytest.approx(expected, rel=1e-12)
    assert stats.n == 104


def test_the_ema_follows_a_drift_that_a_cumulative_mean_would_not() -> None:
    stats = RuleStats()
    for _ in range(1000):
        stats = stats.update(10.0)
    for _ in range(500):
        stats = stats.update(110.0)
    # EMA after 500 steps: 110 - 100 * 0.99**500 = 109.34...; a cumulative mean would be 43.3
    assert stats.mean == pytest.approx(110 - 100 * 0.99**500, rel=1e-9)


def test_only_successful_runs_count() -> None:
    stats = RuleStats().update(10.0)
    assert stats.record(1000.0, succeeded=False) is stats
    assert stats.record(30.0, succeeded=True) == RuleStats(2, 20.0, 100.0)
    assert last_success(12.0, 99.0, succeeded=False) == 12.0
    assert last_success(None, 2.0, succeeded=False) is None
    assert last_success(12.0, 99.0, succeeded=True) == 99.0


@pytest.mark.parametrize(
    ("key_last", "rule", "hint", "expected"),
    [
        (42.0, RuleStats(5, 10.0), 7.0, (42.0, "key")),
        (0.0, RuleStats(5, 10.0), 7.0, (0.0, "key")),  # a last run of 0 s is information, not absence
        (None, RuleStats(5, 10.0), 7.0, (10.0, "rule")),
        (None, RuleStats(0, 0.0), 7.0, (7.0, "hint")),  # a rule with no run says nothing
        (None, None, 7.0, (7.0, "hint")),
        (None, None, None, (60.0, "default")),
    ],
)
def test_estimate_order(
    key_last: float | None, rule: RuleStats | None, hint: float | None, expected: tuple[float, str]
) -> None:
    assert estimate(key_last, rule, hint, 60.0) == expected


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_times_are_refused(bad: float) -> None:
    with pytest.raises(ValidationError, match="finite number of seconds"):
        RuleStats().update(bad)
    with pytest.raises(ValidationError, match="ETE hint"):
        estimate(None, None, bad, 60.0)
    with pytest.raises(ValidationError, match="default ETE"):
        estimate(None, None, None, bad)
    with pytest.raises(ValidationError, match="last run time"):
        estimate(bad, None, None, 60.0)


def test_bad_stats_are_refused() -> None:
    with pytest.raises(ValidationError, match="run count"):
        RuleStats(-1, 0.0)
    with pytest.raises(ValidationError, match="run count"):
        RuleStats(True, 0.0)
    with pytest.raises(ValidationError, match="not str"):
        RuleStats().update("3")  # type: ignore[arg-type]


def test_fields_round_trip_exactly_and_accept_bytes() -> None:
    stats = RuleStats().update(1 / 3).update(2 / 7)
    assert RuleStats.from_fields(stats.to_fields()) == stats
    raw = {k.encode(): v.encode() for k, v in stats.to_fields().items()}
    assert RuleStats.from_fields(raw) == stats
    with pytest.raises(ValidationError, match="bad stored rule statistics"):
        RuleStats.from_fields({"n": "x", "mean": "1"})
    with pytest.raises(ValidationError, match="bad stored rule statistics"):
        RuleStats.from_fields({"mean": "1"})
