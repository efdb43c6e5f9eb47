"""$JOBSTATUS: values after known sequences of payload starts and ends, files, and the used_CPU lock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from pilot.mjf import formulas
from pilot.mjf.jobstatus import (
    JOBSTATUS_KEYS,
    JobStatus,
    JobStatusError,
    JobStatusLockTimeout,
    JobStatusWriter,
    RunningPayload,
    compute_status,
    locked,
    read_jobstatus,
)
from tests.support.clock import FakeClock
from tests.support.paths import ROOT as REPO
from tests.support.polling import wait_until

A = RunningPayload(cores=2, start=1100, expected_end=2100, max_end=3100)
B = RunningPayload(cores=4, start=1300, expected_end=1800, max_end=2300)
C = RunningPayload(cores=1, start=1400, expected_end=2500, max_end=2600)


def test_known_sequence_of_starts_and_ends(tmp_path: Path) -> None:
    """An 8-core pilot started at 1000 runs A, B, C; every value below is computed by hand."""
    writer = JobStatusWriter(tmp_path / "js", allocated_CPU=8, pilot_start=1000, priority_factor=3)
    steps = [
        # now, running, (used, last_start, first_end, last_end, last_max, uncom, final_waste)
        (1000, [], (0, 1000, 1000, 1000, 1000, 0, 0)),
        (1100, [A], (2, 1100, 2100, 2100, 3100, 0, 0)),
        # uncom: A ran 200 s on 2 cores when B started. final: 2 idle x 300 + B's 4 x (2100 - 1800).
        (1300, [A, B], (6, 1300, 1800, 2100, 3100, 400, 1800)),
        # uncom: 2 x 300 + 4 x 100. final: 1 idle x 700 + A 2 x 400 + B 4 x 700 + C 0.
        (1400, [A, B, C], (7, 1400, 1800, 2500, 3100, 1000, 4300)),
        # B ends: uncom 2 x 300; final: 5 idle x 400 + A 2 x 400.
        (1800, [A, C], (3, 1400, 2100, 2500, 3100, 600, 2800)),
        # C ends early; last_job_start stays C's: it is when a payload last started.
        (2000, [A], (2, 1400, 2100, 2100, 3100, 600, 0)),
        (2100, [], (0, 1400, 2100, 2100, 2100, 0, 0)),
    ]
    for now, running, expected in steps:
        status = writer.publish(running, now=now)
        got = (
            status.used_CPU,
            status.last_job_start,
            status.first_exp_job_end,
            status.last_exp_job_end,
            status.last_max_job_end,
            status.add_uncom_time,
            status.add_final_exp_waste,
        )
        assert got == expected, f"at {now}"
        assert read_jobstatus(writer.directory) == status
        assert status.priority_factor == 3 and status.can_postpone_last_job is True


def test_formulas_agree_with_the_integrals_they_stand_for() -> None:
    """kill_waste and draining_waste from the published values equal the integrals computed directly."""
    running = [A, B, C]
    status = compute_status(running, allocated_CPU=8, last_job_start=1000, now=1400)
    for now in (1400, 1500, 1750):
        lost_if_killed = sum(p.cores * (now - p.start) for p in running)
        assert (
            formulas.kill_waste(
                add_uncom_time=status.add_uncom_time,
                used_CPU=status.used_CPU,
                last_job_start=status.last_job_start,
                now=now,
            )
            == lost_if_killed
        )
        last = max(p.expected_end for p in running)
        idle_if_drained = (8 - 7) * (last - now) + sum(p.cores * (last - p.expected_end) for p in running)
        assert (
            formulas.draining_waste(
                allocated_CPU=8,
                used_CPU=status.used_CPU,
                first_exp_job_end=status.first_exp_job_end,
                add_final_exp_waste=status.add_final_exp_waste,
                now=now,
            )
            == idle_if_drained
        )
    assert (
        formulas.draining_waste(allocated_CPU=8, used_CPU=7, first_exp_job_end=1800, add_final_exp_waste=4300, now=1500)
        == 4600
    )
    assert formulas.kill_waste(add_uncom_time=1000, used_CPU=7, last_job_start=1400, now=1500) == 1700


def test_expected_end_is_clamped_to_now_and_to_the_enforced_end() -> None:
    late = RunningPayload(cores=1, start=0, expected_end=50, max_end=500)  # overran its estimate
    wild = RunningPayload(cores=1, start=0, expected_end=9999, max_end=400)  # estimate beyond its limit
    status = compute_status([late, wild], allocated_CPU=2, last_job_start=0, now=100)
    assert (status.first_exp_job_end, status.last_exp_job_end, status.last_max_job_end) == (100, 400, 500)
    assert status.add_final_exp_waste == 300


def test_over_allocation_is_refused(tmp_path: Path) -> None:
    writer = JobStatusWriter(tmp_path, allocated_CPU=4, pilot_start=0)
    with pytest.raises(JobStatusError, match="used_CPU 6 exceeds allocated_CPU 4"):
        writer.publish([A, B], now=1300)
    assert not (tmp_path / "used_CPU").exists()


def test_files_are_the_spec_strings_and_used_cpu_keeps_its_inode(tmp_path: Path) -> None:
    writer = JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000)
    writer.publish([A, B], now=1300)
    inode = (tmp_path / "used_CPU").stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(JOBSTATUS_KEYS)  # no temporary file left
    assert (tmp_path / "used_CPU").read_text() == "6\n"
    assert (tmp_path / "can_postpone_last_job").read_text() == "True\n"
    writer.can_postpone_last_job = False  # the pilot retires: its ends are now final
    writer.publish([A], now=1800)
    assert (tmp_path / "used_CPU").read_text() == "2\n"  # shorter than before: truncated, not padded
    assert (tmp_path / "used_CPU").stat().st_ino == inode
    assert (tmp_path / "can_postpone_last_job").read_text() == "False\n"
    assert oct((tmp_path / "last_job_start").stat().st_mode & 0o777) == "0o644"


def test_a_withdrawn_drain_holds_the_other_values_for_a_while(tmp_path: Path) -> None:
    """Spec 3.8: once can_postpone_last_job reverts from False to True, the other values are not updated for a
    significant time (revert_hold): the site may have planned on the ends published while draining."""
    clock = FakeClock(1000.0)
    writer = JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000, revert_hold=300, clock=clock)
    clock.now = 1100
    writer.publish([A])
    # A shutdown at 1500 is announced: A's ends are cut to it, and the pilot drains.
    drained = RunningPayload(cores=2, start=1100, expected_end=1500, max_end=1500)
    clock.now = 1200
    writer.can_postpone_last_job = False
    final = writer.publish([drained])
    assert (final.first_exp_job_end, final.last_max_job_end, final.can_postpone_last_job) == (1500, 1500, False)
    # Withdrawn at 1300: True again, and in that same write nothing else moves; nor when B starts later.
    writer.can_postpone_last_job = True
    clock.now = 1300
    assert writer.publish([A]) == replace(final, can_postpone_last_job=True)
    assert writer.hold_until == 1600
    clock.now = 1599
    assert writer.publish([A, B]) == replace(final, can_postpone_last_job=True)
    assert read_jobstatus(tmp_path) == replace(final, can_postpone_last_job=True)
    # The hold is over: the values are the real ones again.
    clock.now = 1600
    fresh = writer.publish([A, B])
    assert fresh == compute_status([A, B], allocated_CPU=8, last_job_start=1300, now=1600)
    assert (fresh.first_exp_job_end, fresh.last_max_job_end, writer.hold_until) == (1800, 3100, None)


def test_false_again_ends_the_hold_and_a_zero_hold_holds_nothing(tmp_path: Path) -> None:
    clock = FakeClock(1200.0)
    writer = JobStatusWriter(tmp_path / "a", allocated_CPU=8, pilot_start=1000, revert_hold=300, clock=clock)
    writer.can_postpone_last_job = False
    writer.publish([A])
    writer.can_postpone_last_job = True
    clock.now = 1300
    writer.publish([A, B])
    assert writer.hold_until == 1600
    writer.can_postpone_last_job = False  # drains again during the hold: the real values, at once
    clock.now = 1400
    assert writer.publish([A, B]) == compute_status(
        [A, B], allocated_CPU=8, last_job_start=1300, now=1400, can_postpone_last_job=False
    )
    assert writer.hold_until is None
    unheld = JobStatusWriter(tmp_path / "b", allocated_CPU=8, pilot_start=1000, revert_hold=0, clock=clock)
    unheld.can_postpone_last_job = False
    unheld.publish([A])
    unheld.can_postpone_last_job = True
    assert unheld.publish([A, B]) == compute_status([A, B], allocated_CPU=8, last_job_start=1300, now=1400)
    with pytest.raises(JobStatusError, match="revert_hold must be >= 0"):
        JobStatusWriter(tmp_path / "c", allocated_CPU=1, pilot_start=0, revert_hold=-1)


def test_writer_creates_its_own_directory(tmp_path: Path) -> None:
    writer = JobStatusWriter(allocated_CPU=1, pilot_start=5, workdir=tmp_path)
    assert writer.directory.parent == tmp_path and writer.directory.is_dir()
    assert not any(writer.directory.iterdir())  # initially empty, as the spec says
    assert read_jobstatus(writer.directory) is None
    writer.publish([], now=10)
    assert read_jobstatus(writer.directory) == JobStatus(0, 5, 10, 10, 10, 0, 0, True, 0)


def test_an_idle_pilots_ends_hold_until_its_idle_end_never_in_the_past() -> None:
    """Issue 29 part 6: with nothing running the ends are the idle end the pilot gives (it republishes
    before then), so the spec's remaining_time and draining_waste read later are never negative; an idle
    end before now is now, and without one (a stopping pilot) the ends are now."""
    idle = compute_status([], allocated_CPU=8, last_job_start=1000, now=1500, idle_end=1560)
    assert (idle.first_exp_job_end, idle.last_exp_job_end, idle.last_max_job_end) == (1560, 1560, 1560)
    for later in (1500, 1530, 1560):
        assert formulas.remaining_times(last_exp_job_end=1560, last_max_job_end=1560, now=later) >= (0, 0)
        waste = formulas.draining_waste(
            allocated_CPU=8, used_CPU=0, first_exp_job_end=idle.first_exp_job_end, add_final_exp_waste=0, now=later
        )
        assert 0 <= waste <= 8 * 60
    stale = compute_status([], allocated_CPU=8, last_job_start=1000, now=1500, idle_end=1400)
    assert stale.first_exp_job_end == stale.last_max_job_end == 1500
    assert compute_status([], allocated_CPU=8, last_job_start=1000, now=1500).last_exp_job_end == 1500
    assert compute_status([A], allocated_CPU=8, last_job_start=1000, now=1500, idle_end=9999).last_exp_job_end == 2100


def test_reader_names_missing_and_malformed_files(tmp_path: Path) -> None:
    JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000).publish([A], now=1100)
    (tmp_path / "can_postpone_last_job").write_text("yes")
    with pytest.raises(JobStatusError, match="can_postpone_last_job holds 'yes'"):
        read_jobstatus(tmp_path)
    (tmp_path / "last_job_start").unlink()
    with pytest.raises(JobStatusError, match="last_job_start is missing"):
        read_jobstatus(tmp_path)


def test_a_reader_between_the_first_writers_create_and_lock_sees_nothing_published(tmp_path: Path) -> None:
    """The first writer creates ``used_CPU`` empty, then locks it: a reader that locks it in between
    found no other file and raised "last_job_start is missing" (a flaky test_jobstatus_while_running).
    That moment is the file as the writer's O_CREAT leaves it; the reader takes it for "not yet"."""
    (tmp_path / "used_CPU").touch()
    assert read_jobstatus(tmp_path) is None
    JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000).publish([A], now=1100)
    status = read_jobstatus(tmp_path)
    assert status is not None and status.used_CPU == A.cores


HOLDER = """
import sys
from pilot.mjf.jobstatus import locked
with locked(sys.argv[1], exclusive=sys.argv[2] == "ex", create=True):
    print("held", flush=True)
    sys.stdin.readline()
"""


def hold_lock(directory: Path, mode: str) -> subprocess.Popen[str]:
    """A real second process holding the used_CPU lock until its stdin gets a line."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), mode],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=10) == 0


def test_reader_blocks_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    writer = JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000)
    writer.publish([A], now=1100)
    holder = hold_lock(tmp_path, "ex")
    try:
        with pytest.raises(JobStatusLockTimeout, match="used_CPU"):
            read_jobstatus(tmp_path, timeout=0.3)
        with pytest.raises(JobStatusLockTimeout):
            writer.lock_timeout = 0.3
            writer.publish([A, B], now=1300)
        result: list[JobStatus | None] = []
        reader = threading.Thread(target=lambda: result.append(read_jobstatus(tmp_path)))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and not result  # still waiting for the lock
    finally:
        release(holder)
    reader.join(5)
    assert result and result[0] is not None and result[0].used_CPU == 2


def test_shared_holders_do_not_block_readers_but_block_writers(tmp_path: Path) -> None:
    writer = JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000, lock_timeout=0.3)
    writer.publish([A], now=1100)
    holder = hold_lock(tmp_path, "sh")
    try:
        assert read_jobstatus(tmp_path, timeout=0.3) is not None
        with pytest.raises(JobStatusLockTimeout):
            writer.publish([A, B], now=1300)
    finally:
        release(holder)
    assert writer.publish([A, B], now=1300).used_CPU == 6


def blocked_on_a_lock(pid: int) -> bool:
    """The kernel lists a process waiting for a lock on a line of /proc/locks marked "->"."""
    waiting = [line.split() for line in Path("/proc/locks").read_text().splitlines() if " -> " in line]
    return any(str(pid) in fields for fields in waiting)


def test_a_reader_process_waits_for_the_writer(tmp_path: Path) -> None:
    JobStatusWriter(tmp_path, allocated_CPU=8, pilot_start=1000).publish([A, B], now=1300)
    code = "import sys; from pilot.mjf.jobstatus import read_jobstatus; print(read_jobstatus(sys.argv[1]).used_CPU)"
    with locked(tmp_path, exclusive=True):
        reader = subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        wait_until(lambda: blocked_on_a_lock(reader.pid), what="the reader blocked on the lock")
        assert reader.poll() is None
    out, _ = reader.communicate(timeout=10)
    assert out.split() == ["6"]
    assert os.path.exists(tmp_path / "used_CPU")
