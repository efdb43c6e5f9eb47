"""The provisioning planner and its lower bound: pure Python, so every test runs the real code."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pilot.director.bounds import lower_bound, solve_covering_lp
from pilot.director.planner import (
    Demand,
    ExistingPilot,
    Plan,
    check_hint,
    estimate_wall,
    packer_costs,
    pilot_wall,
    plan,
    plan_seed,
    shape_holds,
)
from taskqueues.errors import ConfigError, ValidationError
from taskqueues.shapes import Shape

GB = 1000
CATALOG = [
    Shape("c2m4", 2, 4 * GB, 40 * GB, 48 * 3600, 0.10),
    Shape("c4m16", 4, 16 * GB, 80 * GB, 48 * 3600, 0.20),
    Shape("c8m32", 8, 32 * GB, 160 * GB, 48 * 3600, 0.40),
    Shape("c16m64", 16, 64 * GB, 320 * GB, 48 * 3600, 0.80),
    Shape("c32m256", 32, 256 * GB, 640 * GB, 24 * 3600, 2.00),
    Shape("m8m128", 8, 128 * GB, 160 * GB, 48 * 3600, 0.70),
]
BY_NAME = {s.name: s for s in CATALOG}


def job(name: str, cpu: int = 1, mem: int = 2 * GB, **kw: object) -> Demand:
    return Demand(name, cpu, mem, **kw)  # type: ignore[arg-type]


def running(
    pid: str, shape: str, cpu: int, mem: int, *, queued: bool = False, time_left: float = 3600.0
) -> ExistingPilot:
    return ExistingPilot(pid, BY_NAME[shape], queued, cpu, mem, BY_NAME[shape].tmp, time_left)


def assert_valid(result: Plan, demand: list[Demand], existing: list[ExistingPilot]) -> None:
    """No pilot overfilled, every job accounted for exactly once, hints and walls respected."""
    seen = Counter(list(result.placed))
    for planned in result.new:
        shape = planned.shape
        assert planned.jobs, "a pilot with nothing planned must not be submitted"
        assert sum(j.cpu for j in planned.jobs) <= shape.cpu
        assert sum(j.mem for j in planned.jobs) <= shape.mem
        assert sum(j.tmp for j in planned.jobs) <= shape.tmp
        assert all(shape_holds(shape, j) for j in planned.jobs)
        assert max(j.wall for j in planned.jobs) <= planned.wall <= shape.wall
        assert planned.start_by == min(j.start_by for j in planned.jobs)
        seen.update(j.job for j in planned.jobs)
    seen.update(list(result.unplaceable))
    seen.update(list(result.deferred))
    assert seen == Counter(j.job for j in demand), "every job exactly once"
    by_job = {j.job: j for j in demand}
    for pilot in existing:
        mine = [by_job[name] for name, pid in result.placed.items() if pid == pilot.id]
        assert sum(j.cpu for j in mine) <= pilot.free_cpu
        assert sum(j.mem for j in mine) <= pilot.free_mem
        assert sum(j.tmp for j in mine) <= pilot.free_tmp
        assert all(j.wall <= pilot.time_left and j.shape_hint in (None, pilot.shape.name) for j in mine)
        assert (pilot.id in result.cancel) == (pilot.queued and not mine)


# ------------------------------------------------------------------------------------------------
# Hints
# ------------------------------------------------------------------------------------------------


def test_hint_forces_the_shape_even_when_a_cheaper_one_holds_the_job() -> None:
    demand = [job("a", shape_hint="c16m64"), job("b"), job("c")]
    result = plan(demand, CATALOG, [])
    assert_valid(result, demand, [])
    hinted = next(p for p in result.new if any(j.job == "a" for j in p.jobs))
    assert hinted.shape.name == "c16m64"


def test_hinted_job_goes_only_to_an_existing_pilot_of_its_shape() -> None:
    existing = [running("big", "c32m256", 32, 256 * GB), running("small", "c2m4", 2, 4 * GB)]
    demand = [job("a", shape_hint="c2m4")]
    result = plan(demand, CATALOG, existing)
    assert result.placed == {"a": "small"}


def test_check_hint_refuses_unknown_and_too_small_shapes() -> None:
    check_hint(job("ok", 2, 4 * GB, shape_hint="c2m4"), CATALOG)
    check_hint(job("nohint"), CATALOG)
    with pytest.raises(ValidationError, match=r"job 'x', field 'shape_hint'.*'gpu1' is not a shape.*c2m4"):
        check_hint(job("x", shape_hint="gpu1"), CATALOG)
    with pytest.raises(ValidationError, match=r"job 'y'.*'c2m4' cannot hold the job \(cpu 4 > 2, mem 8000 > 4000\)"):
        check_hint(job("y", 4, 8 * GB, shape_hint="c2m4"), CATALOG)
    with pytest.raises(ValidationError, match=r"wall 90000 > 86400"):
        check_hint(job("z", wall=90000.0, shape_hint="c32m256"), CATALOG)


def test_bad_hints_and_oversized_jobs_are_reported_unplaceable_with_the_reason() -> None:
    demand = [job("bad", shape_hint="gpu1"), job("huge", 64, 8 * GB), job("fine")]
    result = plan(demand, CATALOG, [])
    assert_valid(result, demand, [])
    assert "not a shape of this queue" in result.unplaceable["bad"]
    assert "no shape holds it" in result.unplaceable["huge"] and "c32m256: cpu 64 > 32" in result.unplaceable["huge"]
    assert "fine" not in result.unplaceable
    with pytest.raises(ValidationError, match="'gpu1'"):
        plan_seed(demand, CATALOG)  # the seed raises, as written


# ------------------------------------------------------------------------------------------------
# Existing pilots
# ------------------------------------------------------------------------------------------------


def test_existing_pilots_are_filled_least_free_room_first() -> None:
    existing = [
        running("roomy", "c16m64", 12, 48 * GB),
        running("tight", "c8m32", 2, 8 * GB),
        running("middle", "c8m32", 4, 16 * GB),
    ]
    demand = [job("a", start_by=1), job("b", start_by=2), job("c", start_by=3)]
    result = plan(demand, CATALOG, existing)
    assert_valid(result, demand, existing)
    # a and b fill "tight" (2 cores); c goes to the next least free one, "middle".
    assert result.placed == {"a": "tight", "b": "tight", "c": "middle"}
    assert result.new == []


def test_a_job_longer_than_a_pilots_time_left_does_not_go_there() -> None:
    existing = [running("ending", "c8m32", 8, 32 * GB, time_left=600.0)]
    demand = [job("long", wall=3600.0), job("short", wall=300.0)]
    result = plan(demand, CATALOG, existing)
    assert_valid(result, demand, existing)
    assert result.placed == {"short": "ending"}
    assert [j.job for p in result.new for j in p.jobs] == ["long"]


def test_queued_pilots_without_demand_are_cancelled_running_ones_are_not() -> None:
    existing = [
        running("q-used", "c2m4", 2, 4 * GB, queued=True),
        running("q-idle", "c16m64", 16, 64 * GB, queued=True),
        running("r-idle", "c8m32", 8, 32 * GB),
    ]
    demand = [job("a", 2, 3 * GB, shape_hint="c2m4")]
    result = plan(demand, CATALOG, existing)
    assert_valid(result, demand, existing)
    assert result.placed == {"a": "q-used"}
    assert result.cancel == ["q-idle"]
    assert plan([], CATALOG, existing).cancel == ["q-used", "q-idle"]


# ------------------------------------------------------------------------------------------------
# Caps
# ------------------------------------------------------------------------------------------------


def whole_pilot_jobs(n: int, shape: str) -> list[Demand]:
    """Jobs that each fill one pilot of ``shape`` (and fit no cheaper shape), urgency = index."""
    s = BY_NAME[shape]
    return [Demand(f"j{i:02}", s.cpu, s.mem, start_by=float((i * 7) % n)) for i in range(n)]


def test_n_max_queued_keeps_the_most_urgent_and_defers_the_rest() -> None:
    demand = whole_pilot_jobs(15, "c32m256")
    result = plan(demand, CATALOG, [], n_max_queued=10)
    assert_valid(result, demand, [])
    assert len(result.new) == 10
    assert sorted(p.start_by for p in result.new) == [float(i) for i in range(10)]
    assert len(result.deferred) == 5
    assert all("n_max_queued=10" in why and "c32m256" in why for why in result.deferred.values())


def test_n_max_queued_counts_existing_queued_pilots_but_not_running_ones() -> None:
    demand = whole_pilot_jobs(15, "c32m256")
    existing = [
        running("q1", "c32m256", 32, 256 * GB, queued=True),
        running("r1", "c32m256", 0, 0),  # running and full: not counted, takes nothing
    ]
    result = plan(demand, CATALOG, existing, n_max_queued=4)
    assert_valid(result, demand, existing)
    assert len(result.placed) == 1 and list(result.placed.values()) == ["q1"]
    assert len(result.new) == 3  # 4 queued per shape, one of them existing


def test_when_a_shape_is_capped_other_shapes_take_the_rest() -> None:
    # 1-core 2 GB jobs: any shape holds them; the cap on one shape must not stop the others.
    demand = [job(f"j{i:03}", start_by=float(i)) for i in range(200)]
    result = plan(demand, CATALOG, [], n_max_queued=2)
    assert_valid(result, demand, [])
    per_shape = Counter(p.shape.name for p in result.new)
    assert per_shape and max(per_shape.values()) <= 2
    # Every shape could hold 2 pilots: 2 * (2 + 4 + 8 + 16 + 32 + 8) = 140 cores, and memory limits
    # c2m4 to 2 jobs, c4m16 to 4 ... so 140 jobs are placed and the 60 least urgent are deferred.
    assert len(result.deferred) == 60
    # The kept ones are the 140 most urgent.
    assert sorted(int(x.job[1:]) for p in result.new for x in p.jobs) == list(range(140))


def test_max_running_counts_running_queued_and_new() -> None:
    demand = whole_pilot_jobs(8, "c16m64")
    existing = [running("r1", "c2m4", 0, 0), running("r2", "c2m4", 0, 0), running("q", "c2m4", 2, 4 * GB, queued=True)]
    demand.append(job("small", start_by=-1.0))
    result = plan(demand, CATALOG, existing, max_running=5)
    assert_valid(result, demand, existing)
    assert result.placed == {"small": "q"}
    assert len(result.new) == 2  # 2 running + 1 queued + 2 new = 5
    assert sorted(p.start_by for p in result.new) == [0.0, 1.0]
    assert all("max_running=5" in why for why in result.deferred.values())
    assert plan(demand, CATALOG, existing, max_running=2).new == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="n_max_queued"):
        plan([job("a")], CATALOG, [], n_max_queued=-1)
    with pytest.raises(ConfigError, match="wall_granularity"):
        plan([job("a")], CATALOG, [], wall_granularity=0)
    with pytest.raises(ConfigError, match="'c2m4' appears twice"):
        plan([job("a")], [*CATALOG, CATALOG[0]], [])
    with pytest.raises(ValidationError, match="job 'a': job appears twice"):
        plan([job("a"), job("a")], CATALOG, [])
    with pytest.raises(ValidationError, match="job 'a', field 'cpu'"):
        plan([job("a", -1)], CATALOG, [])


# ------------------------------------------------------------------------------------------------
# Walls
# ------------------------------------------------------------------------------------------------


def test_pilot_wall_rounds_up_to_granularity_and_caps_at_the_shape_wall() -> None:
    shape = Shape("s", 4, 8 * GB, wall=3600, cost=1.0)
    assert pilot_wall([job("a", wall=61.0)], shape, 60) == 120
    assert pilot_wall([job("a", wall=120.0)], shape, 60) == 120
    assert pilot_wall([job("a", wall=0.0)], shape, 60) == 60  # at least one step
    assert pilot_wall([job("a", wall=3590.0)], shape, 300) == 3600  # capped by the shape
    # Four 1-core 100 s jobs on 2 cores run two after two: 200 s. Longest first: x on one core, the
    # 2-core w waits for it (100..150), then y (150..160).
    stacked = [job(str(i), wall=100.0) for i in range(4)]
    assert estimate_wall(stacked, 2) == 200.0
    assert estimate_wall([job("w", 2, wall=50.0), job("x", wall=100.0), job("y", wall=10.0)], 2) == 160.0
    assert estimate_wall([job("a", 4, wall=30.0), job("b", wall=20.0)], 8) == 30.0  # side by side


def test_planned_pilots_ask_for_their_longest_job_and_avoid_short_wall_shapes() -> None:
    catalog = [
        Shape("cheap-short", 8, 32 * GB, wall=3600, cost=0.1),
        Shape("dear-long", 8, 32 * GB, wall=86400, cost=0.5),
    ]
    demand = [job("long", wall=7200.0), job("short", wall=1000.0)]
    result = plan(demand, catalog, [], wall_granularity=600)
    assert_valid(result, demand, [])
    walls = {p.shape.name: (p.wall, sorted(j.job for j in p.jobs)) for p in result.new}
    # "long" cannot go on the 1-hour shape; "short" shares its pilot, which asks for 2 h.
    assert walls == {"dear-long": (7200, ["long", "short"])}


# ------------------------------------------------------------------------------------------------
# Cost: better than the seed, never below the bound
# ------------------------------------------------------------------------------------------------


def test_our_shape_choice_beats_the_seed_on_a_known_case() -> None:
    # Eight 1-core 8 GB jobs: the seed opens c4m16 (cheapest for one) and fits 2 per pilot: 4 x 0.20.
    # One c8m32... holds only 4 (memory); m8m128 holds all 8 for 0.70.
    demand = [job(f"j{i}", 1, 8 * GB) for i in range(8)]
    seed = sum(p.cost for p in plan_seed(demand, CATALOG))
    ours = plan(demand, CATALOG, [], n_max_queued=None)
    assert seed == pytest.approx(0.80)
    assert ours.cost == pytest.approx(0.70)
    assert [p.shape.name for p in ours.new] == ["m8m128"]


def test_consolidation_shrinks_and_merges_underfilled_pilots() -> None:
    # Built by hand (plan() would not open these pilots), to test the consolidation step itself.
    from pilot.director.planner.bins import Bin
    from pilot.director.planner.consolidate import consolidate

    catalog = [
        Shape("a4", 4, 8 * GB, cost=0.30),
        Shape("b8", 8, 16 * GB, cost=0.40),
        Shape("c16", 16, 32 * GB, cost=1.0),
    ]
    bins = []
    for name in ("x", "y"):
        bin_ = Bin.fresh(catalog[2])
        bin_.add(job(name, 3, 4 * GB))
        bins.append(bin_)
    merged = consolidate(bins, catalog)
    # Each shrinks to a4 (0.30), then the pair fits one b8 (0.40 < 0.60).
    assert [(b.shape.name, sorted(j.job for j in b.jobs)) for b in merged] == [("b8", ["x", "y"])]
    hinted = Bin.fresh(catalog[2])
    hinted.add(job("h", 1, 1 * GB, shape_hint="c16"))
    assert [b.shape.name for b in consolidate([hinted], catalog)] == ["c16"]  # a hint pins the shape


demand_strategy = st.lists(
    st.builds(
        lambda cpu, mem, tmp, wall, start, hint: (cpu, mem, tmp, wall, start, hint),
        st.sampled_from([1, 1, 1, 2, 4, 8, 16, 32]),
        st.sampled_from([500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 120000, 250000]),
        st.sampled_from([0, 0, 1000, 50000]),
        st.sampled_from([0.0, 600.0, 3600.0, 30 * 3600.0]),
        st.integers(0, 100),
        st.sampled_from([None, None, None, None, "c4m16", "c16m64", "c32m256", "m8m128"]),
    ),
    min_size=1,
    max_size=60,
)


def to_demand(raw: list[tuple[int, int, int, float, int, str | None]]) -> list[Demand]:
    """Random jobs, keeping only those some shape holds (hints that cannot hold the job are dropped)."""
    out = []
    for i, (cpu, mem, tmp, wall, start, hint) in enumerate(raw):
        d = Demand(f"j{i}", cpu, mem, tmp, wall, float(start), hint)
        if hint is not None and not shape_holds(BY_NAME[hint], d):
            d = Demand(f"j{i}", cpu, mem, tmp, wall, float(start))
        if any(shape_holds(s, d) for s in CATALOG):
            out.append(d)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(demand_strategy)
def test_ours_never_costs_more_than_the_seed_and_never_less_than_the_bound(
    raw: list[tuple[int, int, int, float, int, str | None]],
) -> None:
    demand = to_demand(raw)
    result = plan(demand, CATALOG, [], n_max_queued=None)
    assert_valid(result, demand, [])
    assert not result.unplaceable and not result.deferred
    seed = sum(p.cost for p in plan_seed(demand, CATALOG))
    bound = lower_bound(demand, CATALOG)
    assert result.cost <= seed + 1e-9
    assert bound.cost <= result.cost + 1e-9
    costs = packer_costs(demand, CATALOG)
    assert result.cost == pytest.approx(min(costs.values()))
    assert costs["seed"] <= seed + 1e-9  # consolidation never adds cost


existing_strategy = st.lists(
    st.tuples(st.sampled_from(sorted(BY_NAME)), st.booleans(), st.floats(0, 1), st.sampled_from([300.0, 7200.0])),
    max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(demand_strategy, existing_strategy, st.sampled_from([None, 0, 1, 3]), st.sampled_from([None, 0, 2, 6]))
def test_plans_are_valid_with_existing_pilots_and_caps(
    raw: list[tuple[int, int, int, float, int, str | None]],
    pilots: list[tuple[str, bool, float, float]],
    n_max_queued: int | None,
    max_running: int | None,
) -> None:
    demand = to_demand(raw)
    existing = []
    for i, (name, queued, used, left) in enumerate(pilots):
        s = BY_NAME[name]
        existing.append(
            ExistingPilot(f"p{i}", s, queued, int(s.cpu * used), int(s.mem * used), int(s.tmp * used), left)
        )
    result = plan(demand, CATALOG, existing, n_max_queued=n_max_queued, max_running=max_running)
    assert_valid(result, demand, existing)
    if n_max_queued is not None:
        waiting = Counter(p.shape.name for p in existing if p.queued and p.id not in result.cancel)
        for shape, count in Counter(p.shape.name for p in result.new).items():
            assert count + waiting[shape] <= n_max_queued
    if max_running is not None:
        kept = sum(1 for p in existing if p.id not in result.cancel)
        assert len(result.new) <= max(0, max_running - kept)
    if result.deferred:
        # Something was held back: a cap must actually bind.
        assert n_max_queued is not None or max_running is not None


# ------------------------------------------------------------------------------------------------
# The LP solver and the bound
# ------------------------------------------------------------------------------------------------


def brute_force_lp(cost: list[Fraction], rows: list[list[Fraction]], rhs: list[Fraction]) -> Fraction:
    """min cost·x, rows·x >= rhs, x >= 0 by enumerating every vertex (independent of the simplex)."""
    n = len(cost)
    planes = [(r, b) for r, b in zip(rows, rhs, strict=True)]
    planes += [([Fraction(int(i == k)) for i in range(n)], Fraction(0)) for k in range(n)]
    best: Fraction | None = None
    for chosen in itertools.combinations(planes, n):
        x = solve_square([list(r) for r, _ in chosen], [b for _, b in chosen])
        if x is None or any(v < 0 for v in x):
            continue
        if all(sum(a * v for a, v in zip(r, x, strict=True)) >= b for r, b in zip(rows, rhs, strict=True)):
            value = Fraction(sum(c * v for c, v in zip(cost, x, strict=True)))
            best = value if best is None else min(best, value)
    assert best is not None
    return best


def solve_square(a: list[list[Fraction]], b: list[Fraction]) -> list[Fraction] | None:
    n = len(b)
    m = [[*row, v] for row, v in zip(a, b, strict=True)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if m[r][col] != 0), None)
        if pivot is None:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[r][col] != 0:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 9), min_size=n, max_size=n),
            st.lists(st.lists(st.integers(1, 6), min_size=n, max_size=n), min_size=1, max_size=4),
            st.lists(st.integers(0, 20), min_size=4, max_size=4),
        )
    )
)
def test_simplex_matches_vertex_enumeration(case: tuple[list[int], list[list[int]], list[int]]) -> None:
    cost_i, rows_i, rhs_i = case
    cost = [Fraction(c) for c in cost_i]
    rows = [[Fraction(v) for v in row] for row in rows_i]
    rhs = [Fraction(v) for v in rhs_i[: len(rows)]]
    value, x = solve_covering_lp(cost, rows, rhs)
    assert value == brute_force_lp(cost, rows, rhs)
    assert all(v >= 0 for v in x)
    assert all(sum(a * v for a, v in zip(r, x, strict=True)) >= b for r, b in zip(rows, rhs, strict=True))
    assert sum(c * v for c, v in zip(cost, x, strict=True)) == value


def test_bound_is_exact_when_jobs_divide_shapes_and_counts_holding_classes() -> None:
    demand = [job(f"j{i}") for i in range(100)]  # 1 core 2 GB: 50 c2m4 = 5.00, which is optimal
    assert lower_bound(demand, CATALOG).cost == pytest.approx(5.0)
    # Jobs only m8m128 or c32m256 can hold must be paid there even if cheap cores abound elsewhere.
    heavy = [job("h1", 1, 100 * GB), job("h2", 1, 100 * GB)]
    bound = lower_bound(heavy, CATALOG)
    assert bound.cost == pytest.approx(2 * 100 / 128 * 0.70)
    assert set(k for k, v in bound.pilots.items() if v > 0) == {"m8m128"}
    # A single job still needs one whole pilot.
    assert lower_bound([job("one")], CATALOG).cost == pytest.approx(0.10)
    assert lower_bound([], CATALOG).cost == 0.0
    with pytest.raises(ConfigError, match="costs must be >= 0"):
        solve_covering_lp([Fraction(-1)], [[Fraction(1)]], [Fraction(1)])


def test_headroom_keeps_jobs_off_new_pilots_whose_whole_wall_they_need() -> None:
    """A pilot's time left is below its wall once it runs: with a headroom, a new pilot of a shape takes only
    jobs that leave it that much, keeps its real shape, and asks at most that shape's wall."""
    hour = Shape("hour", cpu=2, mem=4 * GB, wall=3600, cost=1.0)
    whole, most = Demand("whole", 1, GB, wall=3600), Demand("most", 1, GB, wall=3000)
    result = plan([whole, most], [hour], [], wall_granularity=600, headroom=600)
    assert "wall 3600 > 3000" in result.unplaceable["whole"] and "new pilot's start" in result.unplaceable["whole"]
    [pilot] = result.new
    assert (pilot.shape, [j.job for j in pilot.jobs], pilot.wall) == (hour, ["most"], 3000)
    assert plan([whole], [hour], [], wall_granularity=600).new[0].jobs == [whole]  # no headroom: planned
    with pytest.raises(ConfigError, match="headroom must be >= 0"):
        plan([most], [hour], [], headroom=-1)
