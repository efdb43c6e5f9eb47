"""The lower bounds of the heterogeneous mixes (scripts/mixes.py) against the brute force of tiny instances:
no schedule at all ends before :func:`mixes.mix_bound`, and the packing bound (a configuration LP over one
pilot) is what makes it tight where area bounds see one pool of cores and memory.

The brute force is the serial schedule-generation scheme over every order of the jobs and every choice of
pilot: each job in turn starts at the earliest time its request has arrived, its dependencies have ended and
its pilot has its cores and memory free for its whole run. Those schedules are the active schedules of each
assignment of jobs to pilots, and an optimal schedule is among them (a makespan is a regular objective)."""

from __future__ import annotations

import itertools
import random

import pytest

from tests.support.scripts import script

mx = script("mixes")

pytest.importorskip("scipy")  # the packing bound's LP (the bench extra)


def earliest(busy: list[tuple[float, float, int, int]], ready: float, task: object, cores: int, mem: int) -> float:
    """The earliest start at or after ``ready`` when ``task`` fits its pilot for its whole run."""
    for t in sorted({ready} | {end for _, end, _, _ in busy if end > ready}):
        end = t + task.runtime  # type: ignore[attr-defined]
        overlap = [b for b in busy if b[0] < end and b[1] > t]
        points = {t} | {b[0] for b in overlap if b[0] > t}
        if all(
            sum(c for s, e, c, _ in overlap if s <= p < e) + task.cpu <= cores  # type: ignore[attr-defined]
            and sum(m for s, e, _, m in overlap if s <= p < e) + task.mem <= mem  # type: ignore[attr-defined]
            for p in points
        ):
            return t
    raise AssertionError("unreachable: a job that fits an empty pilot starts after the last end")


def optimum(mix: object) -> float:
    """The shortest makespan of ``mix``, by brute force (see the module doc)."""
    jobs = [(r, t) for r in mix.requests for t in r.tasks]  # type: ignore[attr-defined]
    best = float("inf")
    for order in itertools.permutations(range(len(jobs))):
        for pilots in itertools.product(range(mix.pilots), repeat=len(jobs)):  # type: ignore[attr-defined]
            busy: list[list[tuple[float, float, int, int]]] = [[] for _ in range(mix.pilots)]  # type: ignore[attr-defined]
            end: dict[str, float] = {}
            for i in order:
                r, t = jobs[i]
                if any(r.name + d not in end for d in t.deps):
                    break  # a dependency comes later in this order
                ready = max([r.arrival] + [end[r.name + d] for d in t.deps])
                start = earliest(busy[pilots[i]], ready, t, mix.cores, mix.mem)  # type: ignore[attr-defined]
                busy[pilots[i]].append((start, start + t.runtime, t.cpu, t.mem))
                end[r.name + t.name] = start + t.runtime
            else:
                best = min(best, max(end.values()))
    return best


def tiny(rng: random.Random) -> object:
    """Two requests of at most five jobs in all, on two pilots of 2 cores and 4000 MB."""
    requests = []
    for k, arrival in enumerate((0.0, float(rng.choice((0, 1, 2))))):
        tasks: list[object] = []
        for i in range(rng.randint(1, 3 - k)):
            deps = tuple(sorted({f"j{rng.randrange(i)}" for _ in range(rng.randint(0, 1))})) if i else ()
            cpu, mem = rng.choice(((1, 1000), (1, 2500), (2, 1000), (1, 3500), (2, 4000)))
            tasks.append(mx.MixTask(f"j{i}", "k", float(rng.choice((1, 2, 3))), deps, cpu, mem))
        requests.append(mx.MixRequest(f"r{k}", tuple(tasks), arrival))  # type: ignore[arg-type]
    return mx.Mix("tiny", tuple(requests), 2, 2, 4000)


def test_no_tiny_instance_ends_before_the_bound() -> None:
    rng = random.Random(29)
    tight = 0
    for _ in range(60):
        mix = tiny(rng)
        bound, best = mx.mix_bound(mix), optimum(mix)
        assert bound <= best + 1e-9, (mix, bound, best)
        tight += abs(bound - best) < 1e-9
    assert tight >= 10  # the bound is not vacuous: it is the optimum on many of them


def test_the_packing_bound_sees_jobs_that_cannot_share_a_pilot() -> None:
    """Four 1-core 2500 MB jobs on two pilots of 2 cores and 4000 MB: the cores and the memory as one pool say
    1 and 1.25 time units; no pilot holds two of them, so two units, which the packing bound finds."""
    request = mx.MixRequest("r", tuple(mx.MixTask(f"j{i}", "k", 1.0, (), 1, 2500) for i in range(4)))
    mix = mx.Mix("pairs", (request,), 2, 2, 4000)
    cores, mem = mix.pilots * mix.cores, mix.pilots * mix.mem
    assert max(mx._bound(mix.requests, cores, mem), mx._energy(mix.requests, cores, mem)) == pytest.approx(1.25)
    assert mx.mix_bound(mix) == pytest.approx(2.0) == optimum(mix)


def test_a_job_that_fits_no_pilot_is_refused_by_name() -> None:
    request = mx.MixRequest("r", (mx.MixTask("big", "k", 1.0, (), 4, 1000),))
    with pytest.raises(ValueError, match=r"a job of \(4, 1000\) \(cores, MB\) fits no pilot of 2 cores and 4000 MB"):
        mx.mix_bound(mx.Mix("big", (request,), 2, 2, 4000))


rb = script("release_bound")


def test_the_release_bound_is_a_lower_bound_and_sees_late_arrivals() -> None:
    """scripts/release_bound.py (issue 29 part 3: is the late-small mixes' bound loose because requests arrive
    late?): never above the optimum of the tiny instances, and above the mix's bound where a late request's
    jobs cannot use the pilot-time before its arrival: r0's 2-core job runs 3 units, its 3500 MB job after it 2;
    r1's two 2500 MB jobs (never together on a 4000 MB pilot) arrive at 2. The pilot-time spread from zero says
    5.5; before 2, only r0's first job can run, which the windows at the heads see: 6 (the optimum is 7)."""
    rng = random.Random(29)
    for _ in range(60):
        mix = tiny(rng)
        bound, best = rb.release_bound(mix.requests, mix.pilots, mix.cores, mix.mem), optimum(mix)
        assert bound <= best + 1e-9, (mix, bound, best)
    r0 = mx.MixRequest("r0", (mx.MixTask("j0", "k", 3.0, (), 2, 1000), mx.MixTask("j1", "k", 2.0, ("j0",), 1, 3500)))
    r1 = mx.MixRequest("r1", tuple(mx.MixTask(f"j{i}", "k", 3.0, (), 1, 2500) for i in range(2)), 2.0)
    mix = mx.Mix("late", (r0, r1), 2, 2, 4000)
    assert mx.mix_bound(mix) == pytest.approx(5.5)
    assert rb.release_bound(mix.requests, 2, 2, 4000) == pytest.approx(6.0)
    assert optimum(mix) == pytest.approx(7.0)
