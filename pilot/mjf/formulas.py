"""The spec's conversion formulas and the pilot's time-left arithmetic, as pure functions of explicit ``now``.

Normalisation direction. The spec's table is explicit: ``cpu_limit_secs_lrms`` / ``wall_limit_secs_lrms``
are normalised and one *divides by cpufactor_lrms to retrieve the real time seconds*. Hence::

    real = normalised / cpufactor        normalised = real * cpufactor

This matches what a CPU factor means: a node twice as fast as the reference (factor 2) does in one real
second the work of two reference seconds. (The prose paragraph of the spec that says "a CPU factor above
1 ... normalized times are smaller than the real time values" contradicts its own table and its own
sentence that jobs on slow nodes "are allowed to run longer"; we follow the table.) So the normalised
time left that the pilot advertises to the matcher is ``real seconds left x cpufactor``: on a fast node a
job whose estimate is in reference seconds fits into fewer real seconds.
"""

from __future__ import annotations


def normalise(real_seconds: float, cpufactor: float) -> float:
    """Reference-machine seconds worth ``real_seconds`` on a node of this CPU factor (real x factor)."""
    return real_seconds * cpufactor


def denormalise(normalised_seconds: float, cpufactor: float) -> float:
    """Real seconds on this node for ``normalised_seconds`` of reference work (spec: divide by the factor)."""
    return normalised_seconds / cpufactor


def earliest_end(
    *,
    jobstart_secs: float | None,
    wall_limit_secs: float | None,
    shutdowntime_job: float | None,
    shutdowntime: float | None,
) -> float | None:
    """The first moment the pilot must be done by: min(jobstart + wall limit, shutdowntime_job, shutdowntime).

    A term whose inputs are unknown is left out; None when nothing bounds the pilot.
    """
    candidates = [t for t in (shutdowntime_job, shutdowntime) if t is not None]
    if jobstart_secs is not None and wall_limit_secs is not None:
        candidates.append(jobstart_secs + wall_limit_secs)
    return min(candidates) if candidates else None


def time_left(end: float | None, now: float, stop_margin: float = 0.0) -> float | None:
    """Seconds from ``now`` to ``end`` less the pilot's ``stop_margin``, never below 0; None if unbounded."""
    if end is None:
        return None
    return max(0.0, end - now - stop_margin)


def remaining_time(last_job_end: float, now: float) -> float:
    """Use case 9: ``$last_exp_job_end - $now`` (good faith) or ``$last_max_job_end - $now`` (enforced).

    The two forms differ only by which end is passed; :func:`remaining_times` gives both.
    """
    return last_job_end - now


def remaining_times(*, last_exp_job_end: float, last_max_job_end: float, now: float) -> tuple[float, float]:
    """Both forms of use case 9: (expected, enforced)."""
    return remaining_time(last_exp_job_end, now), remaining_time(last_max_job_end, now)


def draining_waste(
    *,
    allocated_CPU: float,
    used_CPU: float,
    first_exp_job_end: float,
    add_final_exp_waste: float,
    now: float,
) -> float:
    """Use case 10: ``($allocated_CPU - $used_CPU) * ($first_exp_job_end - $now) + $add_final_exp_waste``.

    CPU seconds lost if the site asked the pilot to drain now: the idle cores stay idle until the first
    payload ends, then the already-published tail (``add_final_exp_waste``) follows.
    """
    return (allocated_CPU - used_CPU) * (first_exp_job_end - now) + add_final_exp_waste


def kill_waste(*, add_uncom_time: float, used_CPU: float, last_job_start: float, now: float) -> float:
    """Use case 11: ``$add_uncom_time + $used_CPU * ($now - $last_job_start)``.

    CPU seconds of payload work lost if the pilot were killed now.
    """
    return add_uncom_time + used_CPU * (now - last_job_start)
