"""The scheduling benchmark's workload generators (structure) and a small end-to-end simulation run.

The simulation runs on the real store and a real redis-server (the ``real_redis`` fixture), so a change
in the store, the submitter or the match that breaks the benchmark fails here instead of rotting unseen.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter

import pytest
import redis

from taskqueues.dag import check_dag
from taskqueues.settings import Settings
from taskqueues.store import Store
from tests.support import schedules
from tests.support.scripts import script

bench = script("bench_schedule")
wl = script("workloads")


def kinds(tasks: list[wl.Task]) -> Counter[str]:
    return Counter(t.kind for t in tasks)


def by_name(tasks: list[wl.Task] | tuple[wl.Task, ...]) -> dict[str, wl.Task]:
    return {t.name: t for t in tasks}


# -- measures -------------------------------------------------------------------------------------


def test_bounds_on_a_hand_computed_dag() -> None:
    # four 10 s jobs, then a 5 s job on all of them, on 2 cores: the best schedule takes 2 x 10 + 5 = 25 s
    tasks = [wl.Task(f"f{i}", "fan", 10.0) for i in range(4)] + [wl.Task("sink", "sink", 5.0, ("f0", "f1", "f2", "f3"))]
    assert wl.critical_path(tasks) == 15.0
    assert wl.total_work(tasks) == 45.0
    assert wl.lower_bound(tasks, 2) == 22.5
    assert wl.ancestor_bound(tasks, 2) == 25.0
    assert wl.greedy_bound(tasks, 2) == 22.5 + 7.5


def test_ancestor_bound_never_below_the_simple_bound() -> None:
    for seed in range(5):
        tasks = wl.random_layered(random.Random(seed), layers=5, width=(2, 9)).tasks
        for cores in (1, 3, 16):
            assert wl.ancestor_bound(tasks, cores) >= wl.lower_bound(tasks, cores)
        # on one core nothing runs in parallel: the bound is exactly the total work
        assert wl.ancestor_bound(tasks, 1) == pytest.approx(wl.total_work(tasks))


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([wl.Task("a", "k", 1.0), wl.Task("a", "k", 1.0)], "duplicate"),
        ([wl.Task("a", "k", 1.0, ("b",)), wl.Task("b", "k", 1.0)], "not listed before"),
        ([wl.Task("a", "k", 0.0)], "run time"),
    ],
)
def test_check_rejects_what_the_benchmark_relies_on(tasks: list[wl.Task], message: str) -> None:
    with pytest.raises(wl.WorkloadError, match=message):
        wl.check(tasks)


# -- generators -----------------------------------------------------------------------------------


def test_standard_set_sizes_and_order() -> None:
    for workload in wl.standard(1):
        tasks = workload.tasks
        assert 50 <= len(tasks) <= 1000, workload.name
        for request in workload.requests:
            # stage order is a topological order, and the store's DAG check accepts it unchanged
            order = check_dag([t.name for t in request.tasks], {t.name: t.deps for t in request.tasks})
            assert order == [t.name for t in request.tasks]


def test_generators_are_deterministic_per_seed() -> None:
    assert wl.standard(3) == wl.standard(3)
    assert wl.standard(3) != wl.standard(4)


def test_montage_structure() -> None:
    tasks = list(wl.montage(random.Random(0), rows=4, cols=5).tasks)
    pairs = 4 * 4 + 3 * 5 + 3 * 4  # right, below, diagonal neighbours
    assert kinds(tasks) == {
        "mProjectPP": 20,
        "mDiffFit": pairs,
        "mConcatFit": 1,
        "mBgModel": 1,
        "mBackground": 20,
        "mImgtbl": 1,
        "mAdd": 1,
        "mShrink": 1,
        "mJPEG": 1,
    }
    named = by_name(tasks)
    for t in tasks:
        parents = Counter(named[d].kind for d in t.deps)
        if t.kind == "mDiffFit":
            assert parents == {"mProjectPP": 2}
        if t.kind == "mBackground":
            assert parents == {"mBgModel": 1, "mProjectPP": 1}
            assert f"mProjectPP_{t.name.split('_', 1)[1]}" in t.deps  # its own image
    assert Counter(named[d].kind for d in named["mConcatFit"].deps) == {"mDiffFit": pairs}
    assert named["mJPEG"].deps == ("mShrink",) and named["mShrink"].deps == ("mAdd",)
    assert named["mAdd"].deps == ("mImgtbl",)
    assert [t.name for t in tasks if not any(t.name in u.deps for u in tasks)] == ["mJPEG"]


def test_cybershake_structure() -> None:
    tasks = list(wl.cybershake(random.Random(0), sgts=3, synth=30).tasks)
    assert kinds(tasks) == {
        "ExtractSGT": 3,
        "SeismogramSynthesis": 30,
        "PeakValCalcOkaya": 30,
        "ZipSeis": 1,
        "ZipPSA": 1,
    }
    named = by_name(tasks)
    per_sgt = Counter(t.deps[0] for t in tasks if t.kind == "SeismogramSynthesis")
    assert per_sgt == {"ExtractSGT_0": 10, "ExtractSGT_1": 10, "ExtractSGT_2": 10}
    for t in tasks:
        if t.kind == "PeakValCalcOkaya":
            assert len(t.deps) == 1 and named[t.deps[0]].kind == "SeismogramSynthesis"
    assert Counter(named[d].kind for d in named["ZipSeis"].deps) == {"SeismogramSynthesis": 30}
    assert Counter(named[d].kind for d in named["ZipPSA"].deps) == {"PeakValCalcOkaya": 30}
    assert len(wl.cybershake(random.Random(0)).tasks) == 1000


def test_epigenomics_structure() -> None:
    tasks = list(wl.epigenomics(random.Random(0), lanes=3, chunks=5).tasks)
    assert kinds(tasks) == {
        "fastqSplit": 3,
        "filterContams": 15,
        "sol2sanger": 15,
        "fastq2bfq": 15,
        "map": 15,
        "mapMerge": 4,
        "maqIndex": 1,
        "pileup": 1,
    }
    named = by_name(tasks)
    # each chunk is a line fastqSplit -> filterContams -> sol2sanger -> fastq2bfq -> map of its own lane
    for lane in range(3):
        for k in range(5):
            line = [named[f"map_{lane}_{k}"]]
            while line[-1].deps:
                assert len(line[-1].deps) == 1
                line.append(named[line[-1].deps[0]])
            assert [t.kind for t in reversed(line)] == ["fastqSplit", "filterContams", "sol2sanger", "fastq2bfq", "map"]
            assert line[-1].name == f"fastqSplit_{lane}"
        assert named[f"mapMerge_{lane}"].deps == tuple(f"map_{lane}_{k}" for k in range(5))
    assert named["mapMerge_all"].deps == ("mapMerge_0", "mapMerge_1", "mapMerge_2")
    assert named["pileup"].deps == ("maqIndex",) and named["maqIndex"].deps == ("mapMerge_all",)


def test_ligo_blocks_are_independent_two_phase_pipelines() -> None:
    groups = (3, 5)
    tasks = list(wl.ligo(random.Random(0), groups=groups).tasks)
    assert kinds(tasks) == {"TmpltBank": 8, "Inspiral": 16, "Thinca": 4, "TrigBank": 8}
    named = by_name(tasks)
    for g, n in enumerate(groups):
        assert named[f"Thinca_{g}_a"].deps == tuple(f"Inspiral_{g}_{i}_a" for i in range(n))
        assert named[f"Thinca_{g}_b"].deps == tuple(f"Inspiral_{g}_{i}_b" for i in range(n))
        for i in range(n):
            assert named[f"Inspiral_{g}_{i}_a"].deps == (f"TmpltBank_{g}_{i}",)
            assert named[f"TrigBank_{g}_{i}"].deps == (f"Thinca_{g}_a",)
            assert named[f"Inspiral_{g}_{i}_b"].deps == (f"TrigBank_{g}_{i}",)
    for t in tasks:  # no edge crosses blocks: block index is the first label field
        assert all(d.split("_")[1] == t.name.split("_")[1] for d in t.deps), t.name


def test_runtimes_follow_the_published_means() -> None:
    tasks = wl.cybershake(random.Random(7)).tasks
    synth = [t.runtime for t in tasks if t.kind == "SeismogramSynthesis"]
    assert statistics.mean(synth) == pytest.approx(wl.CYBERSHAKE_RUNTIME["SeismogramSynthesis"], rel=0.05)
    assert 0.15 < statistics.stdev(synth) / statistics.mean(synth) < 0.35  # spread, not a constant


def test_random_layered_deps_come_from_layers_above() -> None:
    workload = wl.random_layered(random.Random(5), layers=8, width=(3, 10), max_deps=3)
    layer = {t.name: int(t.name[1:].split("_")[0]) for t in workload.tasks}
    assert len(set(layer.values())) == 8
    for t in workload.tasks:
        assert (len(t.deps) >= 1) == (layer[t.name] > 0)
        assert len(t.deps) <= 3
        assert all(layer[t.name] - 3 <= layer[d] < layer[t.name] for d in t.deps)


def test_chains_and_fans_split_into_two_requests() -> None:
    one = wl.chains_and_fans(random.Random(2), n_chains=2, length=4, fan=6)
    two = wl.chains_and_fans(random.Random(2), n_chains=2, length=4, fan=6, split=True)
    assert [r.name for r in two.requests] == ["fan", "chains"]
    assert sorted(t.name for t in one.tasks) == sorted(t.name for t in two.tasks)
    assert by_name(one.tasks)["chain1_3"].deps == ("chain1_2",)
    assert wl.critical_path(one.tasks) == pytest.approx(
        max(sum(t.runtime for t in one.tasks if t.name.startswith(f"chain{c}_")) for c in range(2))
    )


# -- the simulation, end to end on a real redis-server --------------------------------------------


def _chains_beside_fan() -> wl.Workload:
    """Two 100 s chains of 5 beside 30 jobs of 20-30 s, on 4 cores: only a chain-first order reaches the CP."""
    return wl.chains_and_fans(random.Random(11), n_chains=2, length=5, link=100.0, fan=30, fan_runtime=(20.0, 30.0))


def test_pressure_runs_the_critical_path_first_and_fifo_does_not(real_redis: redis.Redis) -> None:
    workload = _chains_beside_fan()
    tasks = workload.tasks
    assert wl.critical_path(tasks) > 1.1 * wl.total_work(tasks) / 4  # the bound is the critical path, with slack
    pressure = bench.simulate(real_redis, workload, "pressure", pilots=2, cores=2)
    fifo = bench.simulate(real_redis, workload, "fifo", pilots=2, cores=2)
    assert pressure.makespan == pytest.approx(wl.critical_path(tasks))
    # FIFO lists the whole fan before the chains' second links: they wait for it
    assert fifo.makespan > 1.2 * pressure.makespan
    assert fifo.makespan <= wl.greedy_bound(tasks, 4) + 1e-6


@pytest.mark.parametrize("policy", ["pressure", "fifo", "random"])
def test_every_policy_respects_the_bounds(real_redis: redis.Redis, policy: str) -> None:
    workload = wl.scientific("montage", wl.montage(random.Random(1), rows=3, cols=3), "3x3")
    result = bench.simulate(real_redis, workload, policy, pilots=2, cores=3, seed=4)
    tasks = workload.tasks
    assert wl.energetic_bound(tasks, 6) - 1e-6 <= result.makespan <= wl.greedy_bound(tasks, 6) + 1e-6
    assert result.request_ends == {"montage": result.makespan}


def test_the_scored_path_matches_the_submitter(real_redis: redis.Redis) -> None:
    """FIFO and random go through submit_scored; with pressure scores it must schedule as the Submitter does."""
    workload = wl.random_layered(random.Random(9), layers=6, width=(3, 12), name="small")
    real = bench.simulate(real_redis, workload, "pressure", pilots=3, cores=2)
    scored = bench.simulate(real_redis, workload, "pressure", pilots=3, cores=2, submit="scored")
    assert scored == real


def test_script_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The script end to end on its smallest standard workload, with its own redis-server."""
    assert bench.main(["--only", "ligo", "--no-noise"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("ligo"))
    cells = row.split()
    lb, lb_e, press, fifo = (float(c) for c in cells[4:8])
    assert lb <= lb_e <= press <= fifo * 1.5
    # Pressure schedules ligo within the lower-bound target, and the table's verdict says so.
    assert press / lb <= bench.LB_TARGET, row
    assert "LB ok" in row and "LB MISS" not in row, row


# -- the energetic bound ----------------------------------------------------------------------------


def _tiny(seed: int) -> list[wl.Task]:
    """A random DAG of 5-7 jobs with whole-second run times, listed in a topological order."""
    rng = random.Random(seed)
    tasks: list[wl.Task] = []
    for i in range(rng.randint(5, 7)):
        deps = tuple(sorted({t.name for t in tasks if rng.random() < 0.35}))
        tasks.append(wl.Task(f"j{i}", "k", float(rng.randint(1, 6)), deps))
    return tasks


def test_energetic_bound_never_exceeds_the_optimum() -> None:
    tighter = 0
    for seed in range(120):
        tasks = _tiny(seed)
        for cores in (2, 3):
            best = schedules.optimal_makespan(tasks, cores)
            bound = wl.energetic_bound(tasks, cores)
            assert wl.ancestor_bound(tasks, cores) <= bound <= best + 1e-9, (seed, cores)
            tighter += bound > wl.ancestor_bound(tasks, cores) + 1e-9
    assert tighter >= 2  # it does see what the ancestor bound misses, on some of them


def _overload(values: list[float], cores: int, x: float) -> float:
    """How much more work a window of length x must hold than its cores can do."""
    return sum(min(x, v) for v in values) - cores * x


def test_overload_root_is_where_the_window_first_holds_its_work() -> None:
    rng = random.Random(3)
    for _ in range(200):
        values = [rng.uniform(0.1, 10.0) for _ in range(rng.randint(1, 12))]
        cores = rng.randint(1, 5)
        root = wl._overload_root(values, cores)
        if len(values) <= cores:
            assert root == 0.0
        else:
            assert _overload(values, cores, root) == pytest.approx(0.0, abs=1e-9)
            assert _overload(values, cores, root * 0.999) > 0 >= _overload(values, cores, root * 1.001) - 1e-9


def test_energetic_bound_sees_a_long_job_beside_a_fan_before_a_join() -> None:
    # 2 cores: an 8 s job alone, and a 3 s job releasing four 2 s jobs that a 4 s job joins. CP 9,
    # work 23 / 2 = 11.5, and the join's ancestors (11 s of work) fit by 5.5 < 7: every other bound says
    # 11.5. But the four 2 s jobs must run inside [3, T - 4], and the 8 s job spends at least 4 s there
    # (5 s if it starts at 0, 4 s if it ends at T): 8 + 4 <= 2 x (T - 7), so T >= 13, which is the optimum.
    tasks = [wl.Task("long", "l", 8.0), wl.Task("r", "r", 3.0)]
    tasks += [wl.Task(f"f{i}", "f", 2.0, ("r",)) for i in range(4)]
    tasks.append(wl.Task("z", "z", 4.0, tuple(f"f{i}" for i in range(4))))
    assert wl.lower_bound(tasks, 2) == wl.ancestor_bound(tasks, 2) == 11.5
    assert wl.energetic_bound(tasks, 2) == pytest.approx(13.0)
    assert schedules.optimal_makespan(tasks, 2) == 13.0


def test_a_montage_chain_is_not_held_up_by_a_cybershake_fan(real_redis: redis.Redis) -> None:
    """Submitted together on 8 cores: CyberShake's ETA must count that ZipSeis waits for the whole fan.

    With an ETA of max(critical path, load) only, CyberShake's seismograms scored ahead of Montage's
    serial chain (its ETA was a date it could not keep) and Montage ended ~17 % past the bound.
    """
    rng = random.Random(0)
    workload = wl.Workload(
        "m+c", (wl.montage(rng, rows=4, cols=4, prefix="m."), wl.cybershake(rng, sgts=2, synth=40, prefix="c."))
    )
    result = bench.simulate(real_redis, workload, "pressure", pilots=2, cores=4)
    assert result.makespan <= 1.02 * wl.energetic_bound(workload.tasks, 8)


def test_learning_runs_the_product_s_re_pressure_at_the_beat(real_redis: redis.Redis) -> None:
    """With ``learn`` every job names its rule and re-pressure runs every beat of simulated time."""
    workload = wl.scientific("montage", wl.montage(random.Random(1), rows=3, cols=3), "3x3")
    result = bench.simulate(real_redis, workload, "pressure", pilots=2, cores=3, noise=0.3, seed=4, learn=True)
    tasks = workload.tasks
    assert wl.energetic_bound(tasks, 6) - 1e-6 <= result.makespan <= wl.greedy_bound(tasks, 6) + 1e-6
    store = Store(real_redis)
    _, stats = store.ete_stats([], kinds(tasks))
    assert {rule: s.n for rule, s in stats.items()} == dict(kinds(tasks))  # every success taught its rule
    # the last beat before the end read every completion logged until then, and none after
    every = Settings().repressure_interval
    last_beat = bench.T0 + every * math.floor(result.makespan / every)
    logged = real_redis.zrangebyscore(store.keys.donelog, "-inf", last_beat, withscores=True)
    assert float(real_redis.hget(store.keys.cursor, "repressure") or 0) == max(t for _, t in logged)


def test_the_recovery_share_pools_draws_and_seeds_and_says_when_nothing_was_lost() -> None:
    row = bench.WrongRow
    # seed a: wrong hints lost 100 s over two draws, learning won back 50; seed b: lost 20, won 30
    a = row("mix", 1000.0, 1000.0, ((1080.0, 1040.0), (1020.0, 1010.0)))
    b = row("mix", 1000.0, 1000.0, ((1020.0, 990.0), (1000.0, 1000.0)))
    assert bench.recovered([a, b]) == pytest.approx((50 + 30) / (100 + 20))
    # wrong hints that cost less than half a per cent on average: nothing to recover
    assert bench.recovered([row("mix", 1000.0, 1000.0, ((1004.0, 1000.0), (1000.0, 1000.0)))]) is None
    low, high = bench.interval([a, b], random.Random(1))
    assert low == pytest.approx(0.5) and high == pytest.approx(1.5)  # a alone, b alone
