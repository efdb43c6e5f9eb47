"""The heterogeneous part of the scheduling benchmark (scripts/schedule_mix.py, scripts/mixes.py) on the real
store and a real redis-server: reservations keep a chain of wide jobs from starving beside a bag of narrow
ones, and no schedule ends before the bounds."""

from __future__ import annotations

import random

import pytest
import redis

from tests.support.scripts import script

mx = script("mixes")
sm = script("schedule_mix")


def test_reservations_keep_the_wide_links_of_a_chain_from_starving(real_redis: redis.Redis) -> None:
    mix = mx.Mix("chain", (mx.chain_and_bag(random.Random(3), links=6),), 4, 4, 16_000)
    reserved = sm.simulate_mix(real_redis, mix, "pressure")
    strict = sm.simulate_mix(real_redis, mix, "strict")
    lb = mx.mix_bound(mix)
    assert lb <= reserved.makespan <= 1.10 * lb
    assert strict.makespan > 1.3 * lb  # without reservations the 4-core links wait for the bag to drain


def test_no_policy_ends_before_the_bounds(real_redis: redis.Redis) -> None:
    rng = random.Random(5)
    mix = mx.Mix(
        "small",
        (
            mx.layered_mixed(rng, layers=4, width=(3, 8)),
            mx.MixRequest("late", mx.chain_and_bag(rng, links=2, cores=16).tasks, 200.0),
        ),
        2,
        8,
        32_000,
    )
    for policy in sm.MIX_POLICIES:
        result = sm.simulate_mix(real_redis, mix, policy)
        assert result.makespan >= mx.mix_bound(mix) - 1e-6
        assert min(result.stretch.values()) >= 1 - 1e-9


def test_bounded_reservations_keep_the_late_small_request_within_the_strict_match(real_redis: redis.Redis) -> None:
    """Issue 29 parts 1-2 on its staggered mix (a small chain submitted last behind 1-8 core, high-memory
    requests): with bounded reservations no request's stretch is above the strict match's largest, where EASY
    reservations made the small request the worst (4.29 against 2.96); with an owner and group per request and
    the multi-user setting (equal shares), every stretch is within 4 and the makespan within 1.05 x."""
    plain, owners = (m for m in mx.late_small_mixes(1) if m.name.startswith("late small, staggered"))
    reserved = sm.simulate_mix(real_redis, plain, "pressure")
    strict = sm.simulate_mix(real_redis, plain, "strict")
    assert max(reserved.stretch.values()) <= max(strict.stretch.values())
    assert reserved.makespan <= sm.simulate_mix(real_redis, plain, "fifo").makespan
    shares = sm.simulate_mix(real_redis, owners, "shares")
    assert max(shares.stretch.values()) <= sm.SHARES_STRETCH
    assert shares.makespan <= sm.SHARES_MAKESPAN * sm.simulate_mix(real_redis, owners, "pressure").makespan
    assert sm.policies(plain) == (*sm.MIX_POLICIES, "easy", "one-eta") and "shares" in sm.policies(owners)


@pytest.mark.parametrize(("seed", "label"), [(2, "staggered"), (5, "together")])
def test_the_multi_user_setting_keeps_the_makespan_within_105_where_a_600_s_half_life_did_not(
    real_redis: redis.Redis, seed: int, label: str
) -> None:
    """Issue 29 part 2 at the two seeds where the multi-user setting with a 600 s half-life ended the multi-owner
    mix later than 1.05 x the policy-free run (1.053 x, 1.080 x): the first request's group (the layered DAG, the
    longest) had used the most and was served last while its critical path waited. With the documented 300 s
    half-life its past is forgotten sooner: every stretch within 4, the makespan within 1.05 x."""
    owners = next(m for m in mx.late_small_mixes(seed) if m.name == f"late small, {label}, owners")
    shares = sm.simulate_mix(real_redis, owners, "shares")
    assert max(shares.stretch.values()) <= sm.SHARES_STRETCH
    assert shares.makespan <= sm.SHARES_MAKESPAN * sm.simulate_mix(real_redis, owners, "pressure").makespan


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_late_small_mixes_bound_is_within_115_of_a_schedule_the_match_makes(
    real_redis: redis.Redis, seed: int
) -> None:
    """Issue 29 part 3: the late-small mixes' lower bound is within 1.15 x of what the real match (bounded
    reservations) makes when every request shares one ETA (the ``one-eta`` diagnostic), at seeds 1-4 (1.076 to
    1.147): the gap of ``pressure`` beyond that (1.149 to 1.205 x on the staggered mix) is the ETA term of the
    score, not a loose bound (scripts/release_bound.py finds no more in the requests' late arrivals)."""
    for mix in mx.late_small_mixes(seed)[::2]:  # staggered and together, one account
        lb = mx.mix_bound(mix)
        one = sm.simulate_mix(real_redis, mix, "one-eta").makespan
        assert lb <= one <= 1.15 * lb, (mix.name, lb, one)


def test_the_seed_table_counts_what_each_mix_misses(
    real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench_schedule.py --seeds N``: a mix's line says ok where reservations beat the strict match and FIFO,
    and MISS, counted, for each target a schedule misses (a result made worse than both, the same mix); the
    summary per mix says at how many seeds reservations were not worse."""
    mix = mx.Mix("chain", (mx.chain_and_bag(random.Random(3), links=6),), 4, 4, 16_000)
    res = {pol: sm.simulate_mix(real_redis, mix, pol) for pol in ("pressure", "strict", "fifo")}
    assert set(res["pressure"].late) == {r.name for r in mix.requests} and res["fifo"].late == {}  # no ETA
    line, missed = sm.seed_lines(mix, res, 3)
    assert missed == 0 and "MISS" not in line and line.split()[:2] == ["3", "chain"], line
    strict = max(res["strict"].stretch.values())
    worse = sm.MixResult(res["fifo"].makespan * 1.01, {"r": strict * 1.01}, 0)
    line, missed = sm.seed_lines(mix, {**res, "pressure": worse}, 3)
    assert missed == 2 and line.count("MISS") == 2, line
    assert sm.print_seeds([(1, [(mix, res)]), (2, [(mix, {**res, "pressure": worse})])]) == 2
    summary = capsys.readouterr().out.splitlines()[-1].split()
    assert summary[0] == "chain" and summary[-1] == "1/2" and float(summary[-2]) == pytest.approx(1.01, abs=1e-3)


def test_bench_schedule_seeds_runs_each_seed_s_mixes(capsys: pytest.CaptureFixture[str]) -> None:
    """``bench_schedule.py --seeds 2 --only chain1c``: the chain at seeds 1 and 2, one line each, then its summary
    (reservations not worse at both: 1.05 against 1.78)."""
    assert script("bench_schedule").main(["--seeds", "2", "--only", "chain1c"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [r[:2] for r in rows if r[1:2] == ["chain1c/4c+bag"]] == [["1", "chain1c/4c+bag"], ["2", "chain1c/4c+bag"]]
    assert next(r for r in rows if r[:1] == ["chain1c/4c+bag"])[-1] == "2/2"
