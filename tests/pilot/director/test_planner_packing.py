"""Packing near the configuration-LP bound: memory pilots take the light jobs in their idle cores, and the
LP bound itself (scripts/config_lp.py, which needs the ``bench`` extra: scipy)."""

from __future__ import annotations

import random

import pytest

from pilot.director.bounds import lower_bound
from pilot.director.planner import Demand, plan
from taskqueues.shapes import Shape
from tests.support.scripts import script

GB = 1000
HOUR = 3600.0
#: AWS's c5/m5/r5.2xlarge: 8 cores with 16, 32 or 64 GB.
CMR = [
    Shape("c5.2xlarge", cpu=8, mem=16 * GB, tmp=0, wall=48 * HOUR, cost=0.34),
    Shape("m5.2xlarge", cpu=8, mem=32 * GB, tmp=0, wall=48 * HOUR, cost=0.384),
    Shape("r5.2xlarge", cpu=8, mem=64 * GB, tmp=0, wall=48 * HOUR, cost=0.504),
]


def test_memory_pilots_are_packed_tight_and_their_idle_cores_take_the_light_jobs() -> None:
    # 114 GB of single-core jobs and four 2-core/2 GB ones fill two r5.2xlarge exactly ({30, 24} and
    # {24, 20, 16} GB, two light jobs each); the urgency-first packers left a 30 GB job with a 24 GB one and
    # opened a third pilot. Nothing cheaper exists: 114 GB need two r5 or more than two smaller ones.
    heavy = [Demand(f"m{i}", 1, gb * GB, 0, HOUR, start_by=float(i)) for i, gb in enumerate((16, 20, 30, 24, 24))]
    light = [Demand(f"c{i}", 2, 2 * GB, 0, HOUR, start_by=10.0 + i) for i in range(4)]
    result = plan(heavy + light, CMR, [], n_max_queued=None)
    assert [p.shape.name for p in result.new] == ["r5.2xlarge", "r5.2xlarge"]
    assert result.cost == pytest.approx(1.008)
    assert all(any(j.cpu == 1 for j in p.jobs) for p in result.new)  # the light jobs are in memory pilots


def test_the_configuration_lp_is_a_bound_tighter_than_the_per_resource_one() -> None:
    pytest.importorskip("scipy")
    config_lp_bound = script("config_lp").config_lp_bound

    rng = random.Random(4)
    demand = [Demand(f"j{i}", rng.choice([1, 2]), rng.randint(2, 30) * GB, 0, HOUR) for i in range(60)]
    lp = config_lp_bound(demand, CMR)
    assert lower_bound(demand, CMR).cost <= lp.cost + 1e-9
    assert lp.cost <= plan(demand, CMR, [], n_max_queued=None).cost + 1e-9
    # exact where the optimum is known: eight 1-core/8 GB jobs fill one r5.2xlarge
    assert config_lp_bound([Demand(f"e{i}", 1, 8 * GB, 0, HOUR) for i in range(8)], CMR).cost == pytest.approx(0.504)


# The old planner was at 1.097 and 1.110 on the last memory-skewed mix; issue 29 part 4 added its own
# memory-skewed mix (2-core jobs of 20-44 GB beside light ones, nine c/m/r shapes) and two CPU-skewed ones
# (wide 1 GB/core jobs beside single-core 6-20 GB ones).
SKEWED_CASES = [
    *(
        (mix, seed)
        for seed in (1, 5)
        for mix in ("12-30GB+2c/4GB cmr x3", "12-30GB+2c/4GB cmr x6", "16-30GB+2c/2GB cmr x3", "6-14GB+1c/2GB cmr x6")
    ),
    *(
        (mix, seed)
        for seed in (1, 2)
        for mix in ("2c/20-44GB+light x9", "cpu 2-8c/1GB+10-20GB x3", "cpu 1-4c/1GB+6-12GB x6")
    ),
]


@pytest.mark.parametrize(("mix", "seed"), SKEWED_CASES)
def test_memory_and_cpu_skewed_plans_stay_within_ten_per_cent_of_the_lp(mix: str, seed: int) -> None:
    pytest.importorskip("scipy")
    bench_provision = script("bench_provision")
    config_lp_bound = script("config_lp").config_lp_bound
    make, shapes = bench_provision.SKEWED[mix]
    demand = make(random.Random(seed), 1.0)
    assert plan(demand, shapes, [], n_max_queued=None).cost <= 1.10 * config_lp_bound(demand, shapes).cost
