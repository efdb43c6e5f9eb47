"""The spec's conversion formulas and the time-left arithmetic, on hand-computed values."""

from __future__ import annotations

from pilot.mjf import formulas


def test_remaining_time_both_forms() -> None:
    assert formulas.remaining_time(5000, now=4000) == 1000
    assert formulas.remaining_times(last_exp_job_end=5000, last_max_job_end=8000, now=4000) == (1000, 4000)


def test_draining_waste() -> None:
    # 16 cores, 10 used, first payload ends in 600 s, 12000 CPU s already expected after it.
    assert (
        formulas.draining_waste(
            allocated_CPU=16, used_CPU=10, first_exp_job_end=1600, add_final_exp_waste=12000, now=1000
        )
        == 6 * 600 + 12000
    )
    # A full pilot wastes nothing until its first payload ends.
    assert (
        formulas.draining_waste(allocated_CPU=4, used_CPU=4, first_exp_job_end=2000, add_final_exp_waste=50, now=1000)
        == 50
    )


def test_kill_waste() -> None:
    assert formulas.kill_waste(add_uncom_time=300, used_CPU=4, last_job_start=1000, now=1250) == 300 + 1000
    assert formulas.kill_waste(add_uncom_time=0, used_CPU=0, last_job_start=1000, now=9000) == 0


def test_normalisation_direction_follows_the_spec_table() -> None:
    # cpu_limit_secs_lrms: "Divide by cpufactor_lrms to retrieve the real time seconds".
    assert formulas.denormalise(7200, cpufactor=2.0) == 3600
    assert formulas.normalise(3600, cpufactor=2.0) == 7200
    assert formulas.normalise(formulas.denormalise(1234, 0.8), 0.8) == 1234
    # A slower node (factor < 1): a job may run longer in real time than its normalised limit.
    assert formulas.denormalise(3600, cpufactor=0.5) == 7200


def test_earliest_end_and_time_left() -> None:
    assert (
        formulas.earliest_end(jobstart_secs=1000, wall_limit_secs=3600, shutdowntime_job=None, shutdowntime=None)
        == 4600
    )
    assert (
        formulas.earliest_end(jobstart_secs=1000, wall_limit_secs=3600, shutdowntime_job=4000, shutdowntime=4500)
        == 4000
    )
    assert (
        formulas.earliest_end(jobstart_secs=None, wall_limit_secs=3600, shutdowntime_job=None, shutdowntime=3000)
        == 3000
    )
    assert (
        formulas.earliest_end(jobstart_secs=1000, wall_limit_secs=None, shutdowntime_job=None, shutdowntime=None)
        is None
    )
    assert formulas.time_left(4600, now=4000, stop_margin=100) == 500
    assert formulas.time_left(4600, now=4550, stop_margin=100) == 0
    assert formulas.time_left(None, now=4000) is None
