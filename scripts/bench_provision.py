#!/usr/bin/env python3
"""Provisioning benchmark: cost per hour of the seed's packing, ours, and the LP lower bound.

    python scripts/bench_provision.py [--seed N] [--scale F] [--backends] [--lp] [--planner-10k]

For each demand mix (generated from a fixed random seed, so runs are comparable) it prints the cost per
hour of the pilots that (a) the Seven Bridges algorithm as written (``plan_seed``) and (b) our planner
(``plan``, no caps, no existing pilots) open, (c) the lower bound of ``pilot.director.bounds``, and the
ratios ours/seed (target <= 1) and ours/bound (target <= 1.10). ``plan`` tries three packers and keeps
the cheapest; the table shows each alone against the seed (``ff``: first-fit with our shape choice,
``bal``: the balanced pilot-centric packer; both consolidated) and which one was kept, so the value of
each improvement stays visible. "ms" is the time of one ``plan`` call.

``--lp`` also prints plan / configuration LP per mix (:mod:`config_lp`: column generation over pilot
configurations, solved with scipy's HiGHS; ``pip install '.[bench]'``), the default catalog's mixes and
memory-skewed and CPU-skewed ones on AWS-like c5/m5/r5 shapes (three to nine shapes). Target plan/LP <= 1.10.

``--planner-10k`` times one ``plan`` call at 10^4 jobs on four of the mixes (load average printed beside).

``--backends`` also times pilot submission through the local, Slurm and Grid Engine backends (pilots
submitted per second; a batch system that is not up is skipped with the reason).

This is a script, not a timed test: the figures depend on the machine only in the "ms" column.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pilot.director.bounds import lower_bound
from pilot.director.planner import Demand, packer_costs, plan, plan_seed, shape_holds
from taskqueues.shapes import Shape

GB = 1000  # MB, as Machine/Job Features count
HOUR = 3600

#: Cloud-like catalog: general purpose at 0.05/core/h with 2-4 GB per core, a big box with a small
#: volume discount missing (it costs more per core), and a memory-optimised shape.
CATALOG = [
    Shape("c2m4", cpu=2, mem=4 * GB, tmp=40 * GB, wall=48 * HOUR, cost=0.10),
    Shape("c4m16", cpu=4, mem=16 * GB, tmp=80 * GB, wall=48 * HOUR, cost=0.20),
    Shape("c8m32", cpu=8, mem=32 * GB, tmp=160 * GB, wall=48 * HOUR, cost=0.40),
    Shape("c16m64", cpu=16, mem=64 * GB, tmp=320 * GB, wall=48 * HOUR, cost=0.80),
    Shape("c32m256", cpu=32, mem=256 * GB, tmp=640 * GB, wall=24 * HOUR, cost=2.00),
    Shape("m8m128", cpu=8, mem=128 * GB, tmp=160 * GB, wall=48 * HOUR, cost=0.70),
]


def _job(rng: random.Random, n: int, cpu: int, mem: int, tmp: int = 0, hint: str | None = None) -> Demand:
    wall = rng.choice([10 * 60, 30 * 60, HOUR, 4 * HOUR, 12 * HOUR])
    return Demand(f"j{n}", cpu, mem, tmp, float(wall), start_by=rng.uniform(0, 86400), shape_hint=hint)


def uniform_small(rng: random.Random, scale: float) -> list[Demand]:
    """Thousands of single-core 2 GB jobs (a parameter sweep)."""
    return [_job(rng, n, 1, 2 * GB) for n in range(int(3000 * scale))]


def mixed(rng: random.Random, scale: float) -> list[Demand]:
    """1/4/16-core jobs with 2-64 GB, memory loosely following cores (an analysis campaign)."""
    jobs = []
    for n in range(int(1500 * scale)):
        cpu = rng.choices([1, 4, 16], weights=[6, 3, 1])[0]
        mem = rng.choice([m for m in (2, 4, 8, 16, 32, 64) if cpu <= m <= 8 * cpu] or [64]) * GB
        jobs.append(_job(rng, n, cpu, mem, tmp=rng.choice([0, 1, 10]) * GB))
    return jobs


def huge_and_tiny(rng: random.Random, scale: float) -> list[Demand]:
    """A few whole-node jobs (32 cores / 200 GB, 8 cores / 120 GB) beside many tiny ones."""
    jobs = [_job(rng, n, 32, 200 * GB) for n in range(6)]
    jobs += [_job(rng, 100 + n, 8, 120 * GB) for n in range(4)]
    jobs += [_job(rng, 1000 + n, 1, rng.choice([500, 1 * GB])) for n in range(int(2000 * scale))]
    for i, job in enumerate(jobs[:6]):  # whole-node jobs are short enough for the 24 h box
        jobs[i] = Demand(job.job, job.cpu, job.mem, job.tmp, 4.0 * HOUR, job.start_by)
    return jobs


def memory_heavy(rng: random.Random, scale: float) -> list[Demand]:
    """Single-core jobs needing 8-64 GB beside ordinary ones (genome assembly next to alignment)."""
    jobs = [_job(rng, n, 1, rng.choice([8, 16, 32, 64]) * GB) for n in range(int(400 * scale))]
    jobs += [_job(rng, 10_000 + n, rng.choice([1, 2, 4]), 2 * GB) for n in range(int(800 * scale))]
    return jobs


def hinted(rng: random.Random, scale: float) -> list[Demand]:
    """The mixed campaign where a fifth of the jobs carry an instance-type hint their tool asked for."""
    jobs = []
    for job in mixed(rng, scale):
        if rng.random() < 0.2:
            fits = [s.name for s in CATALOG if shape_holds(s, job)]
            job = Demand(job.job, job.cpu, job.mem, job.tmp, job.wall, job.start_by, rng.choice(fits))
        jobs.append(job)
    return jobs


MIXES: dict[str, Callable[[random.Random, float], list[Demand]]] = {
    "uniform 1c/2GB": uniform_small,
    "mixed 1/4/16c 2-64GB": mixed,
    "huge + tiny": huge_and_tiny,
    "memory-heavy 1c": memory_heavy,
    "20% hinted": hinted,
}


@dataclass
class Row:
    mix: str
    jobs: int
    seed: float
    ours: float
    first_fit: float
    balanced: float
    bound: float
    kept: str
    ms: float


def measure(name: str, demand: list[Demand]) -> Row:
    seed_cost = sum(p.cost for p in plan_seed(demand, CATALOG))
    start = time.perf_counter()
    result = plan(demand, CATALOG, [], n_max_queued=None)
    ms = (time.perf_counter() - start) * 1000
    assert not result.unplaceable and not result.deferred, (result.unplaceable, result.deferred)
    # Each packer alone, to show what each is worth and which one plan() kept.
    costs = packer_costs(demand, CATALOG)
    kept = next(name for name, cost in costs.items() if abs(cost - result.cost) < 1e-9)
    bound = lower_bound(demand, CATALOG).cost
    return Row(name, len(demand), seed_cost, result.cost, costs["first-fit"], costs["balanced"], bound, kept, ms)


#: Where scripts/slurm.sh and scripts/sge.sh leave the environment their clients need.
SYSTEM_ENV = {"slurm": Path("/var/tmp/pilotfish-slurm/env"), "sge": Path("/var/tmp/pilotfish-sge/env")}


def _system_options(kind: str, log_dir: str) -> dict[str, object] | str:
    """Backend settings for the batch system our scripts started, or why it cannot be measured.

    ``log_dir`` takes the pilots' batch output, which would otherwise land in the current directory."""
    env_file = SYSTEM_ENV[kind]
    if not env_file.is_file():
        return f"not up ({env_file} missing: bash scripts/{kind}.sh up)"
    values = dict(
        line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line and not line.startswith("#")
    )
    if kind == "slurm":
        return {"config": values["SLURM_CONF"], "partition": "debug", "repo_key": "bench:", "log_dir": log_dir}
    return {
        "root": values["SGE_ROOT"],
        "cell": values.get("SGE_CELL", "default"),
        "repo_key": "bench:",
        "log_dir": log_dir,
    }


def backends_section(enabled: bool, n: int = 50) -> list[str]:
    """Pilots submitted per second per backend (:func:`pilot.backends.base.submit_rate`: ``n`` one-core
    ``sleep`` pilots one after the other, timed, then all cancelled). A batch system that is not up or
    does not answer is skipped with the reason: a converted local backend would measure the wrong thing."""
    if not enabled:
        return []
    from pilot.backends.base import submit_rate
    from pilot.backends.local import LocalBackend, LocalSettings
    from pilot.backends.sge import SgeBackend, SgeSettings
    from pilot.backends.slurm import SlurmBackend, SlurmSettings
    from taskqueues.errors import PilotfishError

    lines = [
        "",
        f"pilot submission, {n} pilots each (pilot.backends.base.submit_rate)",
        f"{'backend':<10} {'pilots/s':>10}  note",
    ]
    # Batch output goes to a directory of its own, removed at the end, never to the current one.
    with tempfile.TemporaryDirectory(prefix="pilotfish-bench-", ignore_cleanup_errors=True) as log_dir:
        for kind in ("local", "slurm", "sge"):
            note = ""
            backend: LocalBackend | SlurmBackend | SgeBackend
            if kind == "local":
                backend = LocalBackend(LocalSettings(log_dir=log_dir))
                note = "spawns up to the host's cores, queues the rest"
            else:
                options = _system_options(kind, log_dir)
                if isinstance(options, str):
                    lines.append(f"{kind:<10} {'skipped':>10}  {options}")
                    continue
                backend = (
                    SlurmBackend(SlurmSettings.from_options(options))
                    if kind == "slurm"
                    else SgeBackend(SgeSettings.from_options(options))
                )
                note = "sbatch round trips" if kind == "slurm" else "qsub round trips"
            try:
                if not isinstance(backend, LocalBackend):
                    backend.check()
                rate = submit_rate(backend, n)
            except PilotfishError as exc:
                lines.append(f"{kind:<10} {'skipped':>10}  {exc}")
                continue
            finally:
                if isinstance(backend, LocalBackend):
                    backend.shutdown(wait=10)
            lines.append(f"{kind:<10} {rate:>10.1f}  {note}")
    return lines


# -- memory-skewed mixes on AWS-like c/m/r shapes, against the configuration LP (issue 17 part 3) ---------

#: On-demand prices per hour of AWS's c5 (2 GB per core), m5 (4 GB) and r5 (8 GB) families, us-east-1.
AWS_PRICE_PER_CORE = {"c5": (2, 0.0425), "m5": (4, 0.048), "r5": (8, 0.063)}
AWS_SIZES = {4: "xlarge", 8: "2xlarge", 16: "4xlarge"}


def cmr(*cores: int) -> list[Shape]:
    """The c5/m5/r5 shapes of the given sizes (cores), priced as AWS prices them."""
    return [
        Shape(
            f"{family}.{AWS_SIZES[n]}",
            cpu=n,
            mem=n * per_core * GB,
            tmp=n * 40 * GB,
            wall=48 * HOUR,
            cost=round(n * price, 4),
        )
        for n in cores
        for family, (per_core, price) in AWS_PRICE_PER_CORE.items()
    ]


def memory_skewed(
    heavy: int, light: int, mem_gb: tuple[int, int], light_shape: tuple[int, int]
) -> Callable[[random.Random, float], list[Demand]]:
    """``heavy`` single-core jobs of ``mem_gb`` GB (assembly) beside ``light`` jobs of
    ``light_shape`` = (cores, GB) (alignment): the light ones belong in the heavy pilots' idle cores."""

    def make(rng: random.Random, scale: float) -> list[Demand]:
        jobs = [_job(rng, n, 1, rng.randint(*mem_gb) * GB) for n in range(int(heavy * scale))]
        jobs += [_job(rng, 10_000 + n, light_shape[0], light_shape[1] * GB) for n in range(int(light * scale))]
        return jobs

    return make


def cpu_skewed(
    wide: int, heavy: int, wide_cores: tuple[int, int], heavy_gb: tuple[int, int]
) -> Callable[[random.Random, float], list[Demand]]:
    """``wide`` jobs of ``wide_cores`` cores with 1 GB per core (simulation) beside ``heavy`` single-core jobs
    of ``heavy_gb`` GB (reduction): the compute-optimised pilots the wide ones fill leave memory idle, the
    heavy ones leave cores idle on memory pilots; mixing them saves both."""

    def make(rng: random.Random, scale: float) -> list[Demand]:
        jobs = []
        for n in range(int(wide * scale)):
            cores = rng.randint(*wide_cores)
            jobs.append(_job(rng, n, cores, cores * GB))
        jobs += [_job(rng, 10_000 + n, 1, rng.randint(*heavy_gb) * GB) for n in range(int(heavy * scale))]
        return jobs

    return make


def two_core_heavy(rng: random.Random, scale: float) -> list[Demand]:
    """Issue 29's own memory-skewed mix: 2-core jobs of 20-44 GB (more than an r5 core's 8 GB each) beside
    single-core 1 GB jobs and 4-core 3 GB ones, on c5/m5/r5 of 4, 8 and 16 cores: the light jobs belong
    on the heavy pilots' idle cores, whichever family those are."""
    jobs = [_job(rng, n, 2, rng.randint(20, 44) * GB) for n in range(int(300 * scale))]
    jobs += [_job(rng, 10_000 + n, 1, 1 * GB) for n in range(int(500 * scale))]
    jobs += [_job(rng, 20_000 + n, 4, 3 * GB) for n in range(int(100 * scale))]
    return jobs


#: Mixes with a catalog of their own: name -> (demand generator, shapes).
SKEWED: dict[str, tuple[Callable[[random.Random, float], list[Demand]], list[Shape]]] = {
    "12-30GB+2c/4GB cmr x3": (memory_skewed(400, 400, (12, 30), (2, 4)), cmr(8)),
    "12-30GB+2c/4GB cmr x6": (memory_skewed(400, 400, (12, 30), (2, 4)), cmr(4, 8)),
    "16-30GB+2c/2GB cmr x3": (memory_skewed(200, 100, (16, 30), (2, 2)), cmr(8)),
    "6-14GB+1c/2GB cmr x6": (memory_skewed(200, 100, (6, 14), (1, 2)), cmr(4, 16)),
    "2c/20-44GB+light x9": (two_core_heavy, cmr(4, 8, 16)),
    "cpu 2-8c/1GB+10-20GB x3": (cpu_skewed(400, 150, (2, 8), (10, 20)), cmr(8)),
    "cpu 1-4c/1GB+6-12GB x6": (cpu_skewed(600, 300, (1, 4), (6, 12)), cmr(4, 16)),
}


def lp_section(seed: int, scale: float) -> list[str]:
    """plan / configuration LP per mix (the default catalog's mixes, then the memory-skewed ones)."""
    from config_lp import config_lp_bound

    lines = [
        "",
        "configuration LP (scripts/config_lp.py: column generation, HiGHS); target plan/LP <= 1.10",
        f"{'mix':<22} {'shapes':>6} {'jobs':>5} {'plan $/h':>9} {'LP $/h':>9} {'plan/LP':>8} {'bound':>9} "
        f"{'bnd/LP':>7} {'cols':>5}",
    ]
    worst = 0.0
    mixes = [(name, make, CATALOG) for name, make in MIXES.items()]
    mixes += [(name, make, shapes) for name, (make, shapes) in SKEWED.items()]
    for name, make, shapes in mixes:
        demand = make(random.Random(seed), scale)
        result = plan(demand, shapes, [], n_max_queued=None)
        lp = config_lp_bound(demand, shapes)
        bound = lower_bound(demand, shapes).cost
        worst = max(worst, result.cost / lp.cost)
        lines.append(
            f"{name:<22} {len(shapes):>6} {len(demand):>5} {result.cost:>9.2f} {lp.cost:>9.2f} "
            f"{result.cost / lp.cost:>8.3f} {bound:>9.2f} {bound / lp.cost:>7.3f} {lp.columns:>5}"
        )
    lines.append(f"worst plan/LP: {worst:.3f} (target <= 1.10)")
    return lines


def planner_timing(seed: int, jobs: int = 10_000) -> list[str]:
    """One ``plan`` call at ``jobs`` jobs per mix (the mix scaled up), in ms, with the load average beside it:
    the director plans each queue's demand every cycle, so this is its cost at 10^4 waiting jobs."""
    load = os.getloadavg()[0]
    lines = [
        "",
        f"planner at {jobs} jobs (one plan call; load average {load:.2f})",
        f"{'mix':<24} {'jobs':>6} {'ms':>7}",
    ]
    chosen = [("mixed 1/4/16c 2-64GB", mixed, CATALOG), ("memory-heavy 1c", memory_heavy, CATALOG)]
    chosen += [(name, SKEWED[name][0], SKEWED[name][1]) for name in ("2c/20-44GB+light x9", "cpu 2-8c/1GB+10-20GB x3")]
    for name, make, shapes in chosen:
        probe = make(random.Random(seed), 1.0)
        demand = make(random.Random(seed), jobs / len(probe))
        start = time.perf_counter()
        plan(demand, shapes, [], n_max_queued=None)
        lines.append(f"{name:<24} {len(demand):>6} {(time.perf_counter() - start) * 1000:>7.0f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="random seed of the demand mixes")
    parser.add_argument("--repeat", type=int, default=1, help="run seeds seed..seed+repeat-1, one table each")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the number of jobs per mix")
    parser.add_argument("--backends", action="store_true", help="also time pilot submission per backend")
    parser.add_argument(
        "--lp",
        action="store_true",
        help="also compare the plan with the configuration LP "
        "(needs scipy: pip install '.[bench]'), memory-skewed c/m/r mixes included",
    )
    parser.add_argument("--planner-10k", action="store_true", help="also time one plan call at 10^4 jobs per mix")
    args = parser.parse_args(argv)

    print(f"catalog: {', '.join(f'{s.name} {s.cost:.2f}/h' for s in CATALOG)}")
    head = (
        f"{'mix':<22} {'jobs':>5} {'seed $/h':>9} {'ours $/h':>9} {'bound':>9} {'ours/seed':>9} "
        f"{'ours/bnd':>8} {'ff/seed':>8} {'bal/seed':>8} {'kept':>9} {'ms':>6}"
    )
    worst_bound, worst_seed = 0.0, 0.0
    for seed in range(args.seed, args.seed + args.repeat):
        print(f"\nseed {seed}")
        print(head)
        print("-" * len(head))
        for name, make in MIXES.items():
            row = measure(name, make(random.Random(seed), args.scale))
            worst_bound = max(worst_bound, row.ours / row.bound)
            worst_seed = max(worst_seed, row.ours / row.seed)
            print(
                f"{row.mix:<22} {row.jobs:>5} {row.seed:>9.2f} {row.ours:>9.2f} {row.bound:>9.2f} "
                f"{row.ours / row.seed:>9.3f} {row.ours / row.bound:>8.3f} {row.first_fit / row.seed:>8.3f} "
                f"{row.balanced / row.seed:>8.3f} {row.kept:>9} {row.ms:>6.0f}"
            )
    print(f"\nworst ours/seed: {worst_seed:.3f} (target <= 1)")
    print(f"worst ours/bound: {worst_bound:.3f} (target <= 1.10)")
    for seed in range(args.seed, args.seed + args.repeat) if args.lp else ():
        print(f"\nseed {seed}", *lp_section(seed, args.scale), sep="\n")
    for line in planner_timing(args.seed) if args.planner_10k else ():
        print(line)
    for line in backends_section(args.backends):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
