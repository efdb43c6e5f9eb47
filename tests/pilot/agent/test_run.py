"""The pilot end to end: a real ``python -m pilot.agent.command`` process, real payload subprocesses, a real
redis-server (the ``redis_url`` fixture), jobs submitted through the store."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pilot.mjf.jobstatus import read_jobstatus
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer
from tests.support.paths import ROOT
from tests.support.pilots import (
    QUEUE,
    finish,
    kill_with_payloads,
    peak_cores,
    pilot_argv,
    pilot_env,
    read_timeline,
    running_pilot,
    stamped,
    write_features,
)
from tests.support.polling import wait_until
from tests.support.store import job

pytestmark = pytest.mark.store(clock=time.time)  # the pilots run on the real clock


def states(store: Store, ids: list[str]) -> list[JobState]:
    return [store.job(i).state for i in ids]


def time_left_at_most(store: Store, pid: int, seconds: float) -> bool:
    """The last heartbeat of the pilot ``pid`` says it has at most ``seconds`` left (it read a shutdown time)."""
    return any(
        r.get("pid") == pid and r.get("time_left") is not None and float(r["time_left"]) <= seconds  # type: ignore[arg-type]
        for r in store.pilot_records().values()
    )


def test_packs_payloads_of_different_sizes_without_overcommitting(store: Store, redis_url: str, tmp_path: Path) -> None:
    timeline = tmp_path / "timeline"
    sizes = [3, 1, 2, 1, 1, 2, 1, 3, 1, 2, 1, 1]
    ids = store.submit(
        [job(cpu=c, mem=100, command=stamped("sleep 0.3", timeline, c), score=i) for i, c in enumerate(sizes)]
    )
    env = pilot_env(tmp_path, cores=3, mem=4000)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        log = finish(proc, tmp_path, 60)
    assert states(store, ids) == [JobState.DONE] * len(ids), log
    events = read_timeline(timeline)
    assert len(events) == 2 * len(ids)
    cores, payloads = peak_cores(events)
    assert cores <= 3, f"more than 3 cores in use at once: {events}"
    assert payloads >= 2, "the pilot never ran two payloads at once"
    assert cores == 3, "the pilot never filled its three cores"


def test_memory_is_reserved_too(store: Store, redis_url: str, tmp_path: Path) -> None:
    timeline = tmp_path / "timeline"
    ids = store.submit([job(cpu=1, mem=600, command=stamped("sleep 0.2", timeline, 1)) for _ in range(4)])
    env = pilot_env(tmp_path, cores=2, mem=1000)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        log = finish(proc, tmp_path, 60)
    assert states(store, ids) == [JobState.DONE] * 4, log
    assert peak_cores(read_timeline(timeline))[1] == 1, "two 600 MB payloads ran in a 1000 MB pilot"


def test_scratch_is_reserved_too(store: Store, redis_url: str, tmp_path: Path) -> None:
    timeline = tmp_path / "timeline"
    ids = store.submit([job(cpu=1, mem=100, tmp=600, command=stamped("sleep 0.2", timeline, 1)) for _ in range(4)])
    env = pilot_env(tmp_path, cores=2, mem=4000, disk_gb=1)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        log = finish(proc, tmp_path, 60)
    assert states(store, ids) == [JobState.DONE] * 4, log
    assert peak_cores(read_timeline(timeline))[1] == 1, "two 600 MB scratch payloads ran in a 1 GB pilot"


def test_payload_over_its_memory_limit_is_killed(store: Store, redis_url: str, tmp_path: Path) -> None:
    hog = (
        f'{sys.executable} -c \'import time; b = bytearray(300 * 10**6); b[::4096] = b"x" * len(b[::4096]); '
        "time.sleep(60)'"
    )
    [hog_id] = store.submit([job(mem=100, command=hog)])
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--kill-grace", "1") as proc:
        log = finish(proc, tmp_path, 30)
    record = store.job(hog_id)
    assert record.state == JobState.FAILED, log
    assert record.reason is not None and record.reason.startswith("memory ")
    assert "over the limit 100 MB (+10%)" in record.reason
    assert record.peak_mem is not None and record.peak_mem > 110


def test_a_payload_that_asked_for_no_memory_is_held_to_the_pilots(store: Store, redis_url: str, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    hog = (
        f"cat $JOBFEATURES/mem_limit_MB > {seen}; {sys.executable} -c 'import time; b = bytearray(400 * 10**6); "
        'b[::4096] = b"x" * len(b[::4096]); time.sleep(60)\''
    )
    [hog_id] = store.submit([job(mem=0, command=hog)])
    env = pilot_env(tmp_path, cores=1, mem=250)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--kill-grace", "1", env=env) as proc:
        log = finish(proc, tmp_path, 30)
    assert seen.read_text().strip() == "250"
    record = store.job(hog_id)
    assert record.state == JobState.FAILED, log
    assert record.reason is not None and "over the limit 250 MB (+10%)" in record.reason


def test_kill_request_from_the_store(store: Store, redis_url: str, tmp_path: Path) -> None:
    [victim, other] = store.submit([job(command="sleep 60"), job(command="sleep 0.5")])
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--lease", "3", "--heartbeat", "0.3") as proc:
        wait_until(lambda: store.job(victim).state == JobState.RUNNING, timeout=10, what="the job to run")
        assert store.kill(victim) == "requested"
        wait_until(lambda: store.job(victim).state.final, timeout=10, what="the killed job to end")
        log = finish(proc, tmp_path, 30)
    record = store.job(victim)
    assert record.state == JobState.FAILED, log
    assert record.reason == "killed by operator"
    assert store.job(other).state == JobState.DONE


def test_heartbeat_reports_the_usage_of_a_running_payload(store: Store, redis_url: str, tmp_path: Path) -> None:
    # Grows by 40 MB (written, so resident) and burns CPU every step, for about 6 s; the store must see both
    # rise while it runs.
    grower = (
        f"{sys.executable} -c 'import time\nkeep = []\nfor _ in range(12):\n"
        '    keep.append(b"x" * (40 * 10**6))\n    end = time.process_time() + 0.25\n'
        "    while time.process_time() < end: pass\n    time.sleep(0.25)'"
    )
    [jid] = store.submit([job(mem=1000, command=grower)])
    seen: list[tuple[float, float]] = []

    def usage_rose() -> bool:
        record = store.job(jid)
        usage = (record.peak_mem, record.cpu_time)
        if record.state == JobState.RUNNING and None not in usage and (not seen or seen[-1] != usage):
            seen.append((float(record.peak_mem or 0), float(record.cpu_time or 0)))
        return len(seen) >= 2 and seen[-1][0] > seen[0][0] and seen[-1][1] > seen[0][1]

    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--lease", "3", "--heartbeat", "0.3") as proc:
        wait_until(usage_rose, timeout=20, what="usage reports of the running job that rise", interval=0.1)
        log = finish(proc, tmp_path, 30)
    mems, cpus = [m for m, _ in seen], [c for _, c in seen]
    assert mems == sorted(mems) and cpus == sorted(cpus), seen
    assert mems[-1] > mems[0] and cpus[-1] > cpus[0], seen
    assert store.job(jid).state == JobState.DONE, log
    final = store.job(jid)
    assert final.peak_mem is not None and final.peak_mem >= max(mems) and final.peak_mem > 400
    assert final.cpu_time is not None and final.cpu_time >= max(cpus) and 2.5 <= final.cpu_time < 10


def test_a_payload_that_ignores_sigterm_is_killed_after_the_grace(store: Store, redis_url: str, tmp_path: Path) -> None:
    termed = tmp_path / "termed"
    stubborn = f"trap 'echo TERM >> {termed}' TERM; while true; do sleep 0.1; done"
    [victim] = store.submit([job(command=stubborn)])
    with running_pilot(
        redis_url, tmp_path, "--idle-timeout", "1", "--lease", "3", "--heartbeat", "0.3", "--kill-grace", "2"
    ) as proc:
        wait_until(lambda: store.job(victim).state == JobState.RUNNING, timeout=10, what="the job to run")
        asked = time.time()
        assert store.kill(victim) == "requested"
        wait_until(termed.exists, timeout=5, what="SIGTERM to reach the payload")
        termed_at = time.time()
        assert store.job(victim).state == JobState.RUNNING, "the payload ignored SIGTERM but did not run on"
        wait_until(lambda: store.job(victim).state.final, timeout=10, what="the payload to be killed")
        log = finish(proc, tmp_path, 30)
    record = store.job(victim)
    assert record.state == JobState.FAILED and record.reason == "killed by operator", log
    assert record.ended is not None and record.ended - asked >= 2.0 and record.ended - termed_at < 3.5
    assert "did not stop within 2 s of SIGTERM: SIGKILL" in log


def test_drains_when_a_shutdown_time_appears(store: Store, redis_url: str, tmp_path: Path) -> None:
    ids = store.submit([job(command="sleep 0.3", ete=4, score=i) for i in range(200)])
    env = pilot_env(tmp_path, cores=1)
    mf = Path(env["MACHINEFEATURES"])
    jobstatus = Path(env["JOBSTATUS"])
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", "--heartbeat", "0.3", env=env) as proc:
        wait_until(lambda: sum(s == JobState.DONE for s in states(store, ids)) >= 2, timeout=15, what="two jobs done")
        shutdown = time.time() + 3
        write_features(mf, shutdowntime=int(shutdown))
        # From the heartbeat that reads it on, 4 s estimates no longer fit: nothing new starts.
        wait_until(lambda: time_left_at_most(store, proc.pid, 3), what="a heartbeat with the shutdown time read")
        done_then = sum(s.final for s in states(store, ids))
        log = finish(proc, tmp_path, 15)
    assert "time is up" in log
    finals = sum(s.final for s in states(store, ids))
    assert finals <= done_then + 1, "the pilot started 4 s jobs after a shutdown 3 s away was announced"
    assert sum(s == JobState.WAITING for s in states(store, ids)) >= 190
    status = read_jobstatus(jobstatus)
    assert status is not None and status.used_CPU == 0
    assert status.can_postpone_last_job is False


def test_an_idle_pilots_jobstatus_ends_are_not_in_the_past(store: Store, redis_url: str, tmp_path: Path) -> None:
    """Issue 29 part 6: a pilot idle after its one job publishes ends ahead of now (its idle horizon), so a
    site computing the spec's remaining_time and draining_waste later reads no negative figure."""
    [jid] = store.submit([job(command="true", ete=1)])
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", "--heartbeat", "0.3", env=env) as proc:
        wait_until(lambda: store.job(jid).state == JobState.DONE, timeout=15, what="the job done")
        time.sleep(2)  # idle for a while: what it published when the job ended must still hold
        status = read_jobstatus(env["JOBSTATUS"])
        now = time.time()
        assert status is not None and status.used_CPU == 0 and status.can_postpone_last_job
        assert status.first_exp_job_end >= now and status.last_exp_job_end >= now and status.last_max_job_end >= now
        waste = (2 - status.used_CPU) * (status.first_exp_job_end - now) + status.add_final_exp_waste
        assert 0 <= waste <= 2 * 60
        assert proc.poll() is None, "the pilot stopped while it should idle"


def test_can_postpone_last_job_announces_a_drain_while_running(store: Store, redis_url: str, tmp_path: Path) -> None:
    [jid] = store.submit([job(command="sleep 6", ete=20)])
    env = pilot_env(tmp_path, cores=1)
    mf = Path(env["MACHINEFEATURES"])

    def postpone(expected: bool) -> object:
        status = read_jobstatus(env["JOBSTATUS"])
        return status is not None and status.used_CPU == 1 and status.can_postpone_last_job is expected

    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--heartbeat", "0.3") as proc:
        wait_until(lambda: postpone(True), timeout=10, what="the payload running, can_postpone_last_job True")
        write_features(mf, shutdowntime=int(time.time() + 300))  # its payload (20 s expected) ends before
        wait_until(lambda: time_left_at_most(store, proc.pid, 300), what="a heartbeat with the shutdown time read")
        assert postpone(True), "a shutdown time every payload finishes before is no drain"
        write_features(mf, shutdowntime=int(time.time() + 10))  # it cannot: the pilot drains
        wait_until(lambda: postpone(False), timeout=3, what="can_postpone_last_job False while the payload runs")
        assert proc.poll() is None and store.job(jid).state == JobState.RUNNING
        write_features(mf, shutdowntime=None)  # withdrawn
        wait_until(lambda: postpone(True), timeout=3, what="can_postpone_last_job True again")
        log = finish(proc, tmp_path, 30)
    assert store.job(jid).state == JobState.DONE, log


def test_after_a_withdrawn_drain_jobstatus_holds_its_values_then_publishes_them_fresh(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """The pilot drives the hold (spec 3.8): the write that reverts can_postpone_last_job to True keeps the ends
    published while draining, and once --jobstatus-hold has passed the pilot publishes the real values by
    itself, with no payload starting or ending meanwhile."""
    store.submit([job(command="sleep 30", ete=20)])
    env = pilot_env(tmp_path, cores=1)
    mf = Path(env["MACHINEFEATURES"])

    def status(postpone: bool) -> object:
        now = read_jobstatus(env["JOBSTATUS"])
        return now is not None and now.used_CPU == 1 and now.can_postpone_last_job is postpone and now

    with running_pilot(
        redis_url, tmp_path, "--idle-timeout", "1", "--heartbeat", "0.3", "--jobstatus-hold", "6", env=env
    ) as proc:
        before = wait_until(lambda: status(True), timeout=10, what="the payload running")
        shutdown = int(time.time() + 12)  # its payload (20 s expected) cannot end before: the pilot drains
        write_features(mf, shutdowntime=shutdown)
        drained = wait_until(lambda: status(False), timeout=5, what="can_postpone_last_job False")
        assert drained.last_max_job_end == shutdown and drained.last_max_job_end < before.last_max_job_end
        write_features(mf, shutdowntime=None)  # withdrawn
        reverted = wait_until(lambda: status(True), timeout=5, what="can_postpone_last_job True again")
        assert (reverted.first_exp_job_end, reverted.last_max_job_end) == (
            drained.first_exp_job_end,
            drained.last_max_job_end,
        )
        fresh = wait_until(
            lambda: (s := status(True)) and s.last_max_job_end != drained.last_max_job_end and s,
            timeout=20,
            what="the values published fresh after the hold",
        )
        assert fresh.first_exp_job_end == before.first_exp_job_end
        assert fresh.last_max_job_end == before.last_max_job_end
        proc.send_signal(signal.SIGTERM)
        finish(proc, tmp_path, 30)


def test_sigterm_gives_every_payload_back_at_once(store: Store, redis_url: str, tmp_path: Path) -> None:
    ids = store.submit([job(command="sleep 60") for _ in range(2)])
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", env=env) as proc:
        wait_until(lambda: states(store, ids) == [JobState.RUNNING] * 2, timeout=10, what="both jobs running")
        status = wait_until(
            lambda: (s := read_jobstatus(env["JOBSTATUS"])) and s.used_CPU == 2 and s,
            timeout=2,
            what="used_CPU 2 in $JOBSTATUS",
        )
        assert status.can_postpone_last_job is True
        proc.send_signal(signal.SIGTERM)
        log = finish(proc, tmp_path, 15)
    for record in store.jobs(ids):
        assert record.state == JobState.WAITING, log
        assert record.retries == 1
        assert record.reason == "pilot preempted (SIGTERM)"
    status = read_jobstatus(env["JOBSTATUS"])
    assert status is not None and status.used_CPU == 0 and status.can_postpone_last_job is False
    again = store.match(PilotOffer("other@node", QUEUE, 2, 1000), max_jobs=2)
    assert sorted(j.id for j in again) == sorted(ids)
    assert all(j.attempt == 2 for j in again)


def test_a_payload_killed_from_outside_is_given_back(store: Store, redis_url: str, tmp_path: Path) -> None:
    # A batch system's scancel/qdel signals every process of the job: the payload may die before the pilot
    # hears of it. That is not the job's failure.
    # Nor is a kill -9 by an operator or the OOM killer (its retry limit ends a job every attempt of which dies).
    (signalled, killed, crashed) = store.submit(
        [job(command="kill -TERM $$"), job(command="kill -KILL $$"), job(command="exit 3")]
    )
    env = pilot_env(tmp_path, cores=3)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--max-jobs", "3", env=env) as proc:
        log = finish(proc, tmp_path, 15)
    given_back, given_back_too, failed = store.jobs([signalled, killed, crashed])
    for job_back in (given_back, given_back_too):
        assert job_back.state == JobState.WAITING and job_back.retries == 1, log
        assert "killed from outside the pilot" in (job_back.reason or "")
    assert failed.state == JobState.FAILED and failed.reason and failed.reason.startswith("exit code 3")


def test_sigkill_loses_nothing(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url, lease_seconds=1, backoff=0.0)
    done_file = tmp_path / "done"
    ids = store.submit([job(command=f"sleep 1.5 && echo $PILOTFISH_JOB_ID >> {done_file}") for _ in range(4)])
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(
        redis_url, tmp_path, "--lease", "1", "--heartbeat", "0.3", "--idle-timeout", "30", env=env, name="first"
    ) as first:
        wait_until(
            lambda: sum(s == JobState.RUNNING for s in states(store, ids)) == 2, timeout=10, what="two jobs running"
        )
        kill_with_payloads(first)  # the batch system kills the whole job: the pilot and its payloads
    lost = [i for i, s in zip(ids, states(store, ids), strict=True) if s == JobState.RUNNING]
    assert len(lost) == 2
    reaper = Store(store.client, store.keys, clock=lambda: time.time() + 1.2)  # once the 1 s leases expired
    assert reaper.requeue_expired() == (2, 0, 2)  # a first expiry: restored into the task queue at once
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env, name="second") as second:
        log = finish(second, tmp_path, 60, name="second")
    assert states(store, ids) == [JobState.DONE] * 4, log
    assert sorted(done_file.read_text().split()) == sorted(ids), "a job completed twice or not at all"
    for i in lost:
        assert store.job(i).attempt == 2


def test_payloads_die_with_a_sigkilled_pilot(store: Store, redis_url: str, tmp_path: Path) -> None:
    """The guardian kills each payload's whole group (a background child too) when the pilot dies by SIGKILL.

    The pilot tells its guardian about a payload just after spawning it; a payload already running is not
    yet one the guardian knows (at load average 10 the pilot was killed in between, 1 run in 5: the
    guardian's docstring names that window). Its reported start comes after, so the kill waits for it."""
    pids = tmp_path / "pids"
    late = tmp_path / "late"
    ids = store.submit(
        [job(command=f"sleep 30 & echo $! $$ >> {pids}; sleep 10; touch {late}; wait") for _ in range(2)]
    )
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", env=env) as proc:
        wait_until(
            lambda: (
                pids.exists() and len(pids.read_text().split()) == 4 and states(store, ids) == [JobState.RUNNING] * 2
            ),
            timeout=10,
            what="both payloads started, and their starts reported",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    payload_pids = [int(p) for p in pids.read_text().split()]
    wait_until(
        lambda: (
            not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in payload_pids)
        ),
        timeout=5,
        what="the payloads of the dead pilot killed",
    )
    assert not late.exists(), "a payload went on after its pilot died"
    # Still leased to the dead pilot (started or not yet reported so) until the reaper requeues them.
    assert set(states(store, ids)) <= {JobState.MATCHED, JobState.RUNNING}


def test_a_sigkilled_pilots_guardian_removes_its_scratch_directory(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """A pilot without --workdir works in a scratch directory of its own, which its teardown removes; killed
    by SIGKILL (or by a launcher whose grace ran out before the teardown did, as a loaded host made `run`'s
    local backend do) it cannot: its guardian removes it once the payloads are killed. A normal end leaves
    the removal to the pilot (the guardian is told), which the other tests of this file see."""
    temp = tmp_path / "temp"
    temp.mkdir()
    (jid,) = store.submit([job(command="sleep 30")])
    argv = pilot_argv(redis_url, tmp_path / "unused", "--idle-timeout", "30")
    at = argv.index("--workdir")
    del argv[at : at + 2]
    env = {**pilot_env(tmp_path, cores=1), "TMPDIR": str(temp)}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: store.job(jid).state == JobState.RUNNING,
            timeout=20,
            what="the payload running",
        )
        [scratch] = temp.glob("pilotfish-pilot-*")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_until(lambda: not scratch.exists(), timeout=10, what="the scratch directory removed by the guardian")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_guardian_is_replaced_and_the_payloads_still_die_with_their_pilot(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """kill -9 of the guardian alone: at its next heartbeat the pilot starts a new one watching the same
    payloads, so a later SIGKILL of the pilot still takes its payloads with it."""
    pids = tmp_path / "pids"
    (jid,) = store.submit([job(command=f"echo $$ >> {pids}; sleep 30")])
    env = pilot_env(tmp_path, cores=1)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", "--heartbeat", "0.5", env=env) as proc:
        wait_until(lambda: pids.exists() and pids.read_text().strip() != "", timeout=10, what="the payload started")

        def guardians() -> list[psutil.Process]:
            found = []
            for child in psutil.Process(proc.pid).children():
                with contextlib.suppress(psutil.Error):  # a zombie (the killed one, not reaped yet)
                    if "pilot.agent.guardian" in " ".join(child.cmdline()):
                        found.append(child)
            return found

        [old] = guardians()
        old.kill()
        wait_until(lambda: [g.pid for g in guardians()] not in ([], [old.pid]), timeout=10, what="a new guardian")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    payload = int(pids.read_text().split()[0])
    wait_until(
        lambda: not psutil.pid_exists(payload) or psutil.Process(payload).status() == psutil.STATUS_ZOMBIE,
        timeout=5,
        what="the payload of the dead pilot killed by the new guardian",
    )
    assert store.job(jid).state is JobState.RUNNING  # its lease expires; the reaper requeues it


def test_outputs_sandbox_and_jobstatus(store: Store, redis_url: str, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    command = (
        f'echo "$TMPDIR $PWD $(cat $JOBFEATURES/allocated_CPU) $PILOTFISH_CPU $OMP_NUM_THREADS '
        f'$(cat $JOBFEATURES/mem_limit_MB)" > {seen}; touch $TMPDIR/scratch; '
        'printf "A=1.5\\nB=text\\nN=42\\n# comment\\n" >> $PILOTFISH_OUTPUTS; echo to-stdout'
    )
    [first] = store.submit([job(cpu=2, mem=300, command=command)])
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        finish(proc, tmp_path, 30)
    record = store.job(first)
    assert record.state == JobState.DONE
    assert record.outputs == {"A": 1.5, "B": "text", "N": 42}
    assert record.exit_code == 0 and record.wall is not None and record.wall > 0
    tmpdir, cwd, allocated, cpu_env, omp, mem = seen.read_text().split()
    assert not Path(tmpdir).exists(), "the payload's $TMPDIR was left behind"
    assert not Path(cwd).exists(), "the payload's work directory was left behind"
    assert (allocated, cpu_env, omp, mem) == ("2", "2", "2", "300")
    out = tmp_path / "pilot-work" / "logs" / f"{first}.1.out"
    assert out.read_text() == "to-stdout\n"
    status = read_jobstatus(env["JOBSTATUS"])
    assert status is not None and status.used_CPU == 0 and status.last_job_start >= int(record.started or 0)


def test_last_job_start_counts_a_payload_that_ended_between_two_publications(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """Issue 32 part 9: $JOBSTATUS is rewritten at most every 0.5 s, so a short payload that starts just
    after a publication and ends before the next one was never seen running, and ``last_job_start`` stayed
    the earlier start: a second before the job's ``started`` now and then. Here "after" starts when "first"
    ends (the publication of that end), 1.5 s after "first" started, and ends at once."""
    first, after = store.submit([job(command="sleep 1.5", dependents=(1,)), job(command="true", pending=1)])
    env = pilot_env(tmp_path, cores=2)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", env=env) as proc:
        finish(proc, tmp_path, 30)
    records = store.jobs([first, after])
    assert [r.state for r in records] == [JobState.DONE, JobState.DONE]
    started = records[1].started
    assert started is not None and started >= (records[0].started or 0) + 1.5
    status = read_jobstatus(env["JOBSTATUS"])
    assert status is not None and status.used_CPU == 0
    assert status.last_job_start == int(started)  # one clock: the payload's own start, as the store has it


def test_jobstatus_while_running(store: Store, redis_url: str, tmp_path: Path) -> None:
    store.submit([job(cpu=1, ete=30, command="sleep 2")])
    env = pilot_env(tmp_path, cores=2, job={"wall_limit_secs": 600, "jobstart_secs": int(time.time())})
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--priority-factor", "7", env=env) as proc:

        def published() -> object:
            status = read_jobstatus(env["JOBSTATUS"])
            return status if status is not None and status.used_CPU == 1 else None

        status = wait_until(published, timeout=10, what="used_CPU 1 in $JOBSTATUS")
        now = time.time()
        assert status.can_postpone_last_job is True
        assert abs(status.last_exp_job_end - (status.last_job_start + 30)) <= 1
        assert now + 500 < status.last_max_job_end <= now + 600
        assert status.priority_factor == 7
        finish(proc, tmp_path, 30)


def test_idle_exit(redis_url: str, tmp_path: Path) -> None:
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1") as proc:
        log = finish(proc, tmp_path, 15)
    idle = re.search(r"idle: nothing matched for (\d+\.\d) s", log)
    assert idle is not None, log
    assert float(idle.group(1)) >= 1.0, "the pilot left before its idle timeout"


def test_max_jobs(store: Store, redis_url: str, tmp_path: Path) -> None:
    ids = store.submit([job(command="true", score=i) for i in range(5)])
    with running_pilot(redis_url, tmp_path, "--max-jobs", "2", "--idle-timeout", "30") as proc:
        log = finish(proc, tmp_path, 15)
    assert states(store, ids) == [JobState.DONE] * 2 + [JobState.WAITING] * 3, log
    assert "maximum of 2 jobs" in log


def test_wall_limit_of_a_job(store: Store, redis_url: str, tmp_path: Path) -> None:
    spec = job(command="sleep 60")
    [slow] = store.submit(
        [spec.__class__(**{**spec.__dict__, "requirements": json.dumps({"cpu": 1, "mem": 100, "tmp": 0, "wall": 1})})]
    )
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--kill-grace", "1") as proc:
        finish(proc, tmp_path, 30)
    record = store.job(slow)
    assert record.state == JobState.FAILED
    assert record.reason == "wall time limit 1 s exceeded"


def test_a_pilot_takes_the_jobs_whose_wall_fits_its_time_left_not_their_estimate(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """Issue 19: a pilot with --wall 60 took a job of wall 600 s estimated at 5 s, to give it 59 s in
    $JOBFEATURES, and refused one of wall 30 s estimated at 100 s. Now the wall decides; a payload's
    wall_limit_secs stays the smaller of its wall and the pilot's end."""
    seen = tmp_path / "seen"
    record = f"cat $JOBFEATURES/wall_limit_secs >> {seen}"
    long_wall, short_wall = store.submit(
        [job(wall=600, ete=5, score=1, command=record), job("tqB", wall=30, ete=100, score=2, command=record)]
    )
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--wall", "60") as proc:
        log = finish(proc, tmp_path, 30)
    assert states(store, [long_wall, short_wall]) == [JobState.WAITING, JobState.DONE], log
    assert seen.read_text().split() == ["30"]


def test_wall_requirement_is_normalised_seconds(store: Store, redis_url: str, tmp_path: Path) -> None:
    # On a node twice as fast as the reference, 4 normalised seconds are 2 real ones: the payload's
    # $JOBFEATURES, the pilot's $JOBSTATUS and the kill all say so.
    seen = tmp_path / "seen"
    spec = job(
        command=f'echo "$(cat $JOBFEATURES/wall_limit_secs) $(cat $JOBFEATURES/wall_limit_secs_lrms)" '
        f"> {seen}; sleep 60"
    )
    [slow] = store.submit(
        [spec.__class__(**{**spec.__dict__, "requirements": json.dumps({"cpu": 1, "mem": 100, "tmp": 0, "wall": 4})})]
    )
    env = pilot_env(tmp_path, cores=1, job={"cpufactor_lrms": 2})
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "1", "--kill-grace", "1", env=env) as proc:
        status = wait_until(
            lambda: (s := read_jobstatus(env["JOBSTATUS"])) and s.used_CPU == 1 and s,
            timeout=10,
            what="used_CPU 1 in $JOBSTATUS",
        )
        assert status.last_max_job_end - status.last_job_start in (1, 2, 3)  # 2 s, floored on both sides
        log = finish(proc, tmp_path, 30)
    assert seen.read_text().split() == ["2", "4"]
    record = store.job(slow)
    assert record.state == JobState.FAILED, log
    assert record.reason == "wall time limit 4 s normalised (2 s at CPU factor 2) exceeded"
    assert record.started is not None and record.ended is not None
    assert 1.9 <= record.ended - record.started < 3.5


def test_own_machine_runs_the_shutdown_command(redis_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "machine-down"
    script = tmp_path / "shutdown.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    env = pilot_env(tmp_path, machine={"shutdown_command": script})
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "0.5", env=env) as proc:
        finish(proc, tmp_path, 15)
    assert not marker.exists(), "shutdown_command ran without --own-machine"
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "0.5", "--own-machine", env=env) as proc:
        finish(proc, tmp_path, 15)
    assert marker.exists()


def test_pilot_record_and_name(store: Store, redis_url: str, tmp_path: Path) -> None:
    env = {**pilot_env(tmp_path), "SLURM_JOB_ID": "4242"}
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "0.5", env=env) as proc:
        finish(proc, tmp_path, 15)
    raw: dict[bytes, bytes] = store.client.hgetall(store.keys.pilots)  # type: ignore[assignment]
    records = {k.decode(): json.loads(v) for k, v in raw.items()}
    [(name, record)] = records.items()
    assert name.startswith("slurm-4242@")
    assert record["cores"] == 2 and record["queue"] == QUEUE and record["stopped"].startswith("idle")


def test_unreachable_redis_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pilot.agent.command",
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "--queue",
            QUEUE,
            "--workdir",
            str(tmp_path / "w"),
        ],
        cwd=ROOT,
        env=pilot_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "redis://127.0.0.1:1/0" in lines[0] and "not reachable" in lines[0]


def test_a_pilot_reads_its_store_url_from_the_file_its_file_variable_names(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """``$PILOTFISH_REDIS_URL_FILE`` (a Secret mounted as a file: the Helm chart's pilot pods) gives the store;
    without it the pilot would look for 127.0.0.1:6379 and the job would wait. Set both ways: refused."""
    ids = store.submit([job(cpu=1, mem=100, command="true")])
    url_file = tmp_path / "redis_url"
    url_file.write_text(redis_url + "\n")
    url_file.chmod(0o400)
    env = {**pilot_env(tmp_path), "PILOTFISH_REDIS_URL_FILE": str(url_file)}
    env.pop("PILOTFISH_REDIS_URL", None)
    argv = [sys.executable, "-m", "pilot.agent.command", "--queue", QUEUE, "--idle-timeout", "1"]
    argv += ["--workdir", str(tmp_path / "work")]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert states(store, ids) == [JobState.DONE], done.stderr
    env["PILOTFISH_REDIS_URL"] = redis_url
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "both $PILOTFISH_REDIS_URL and $PILOTFISH_REDIS_URL_FILE are set" in done.stderr
    del env["PILOTFISH_REDIS_URL"]
    done = subprocess.run(
        [*argv, "--redis-url", redis_url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "both --redis-url and $PILOTFISH_REDIS_URL_FILE are given" in done.stderr


def test_a_payload_run_without_the_shell_dies_with_a_sigkilled_pilot(
    store: Store, redis_url: str, tmp_path: Path
) -> None:
    """A plain command is the payload's process itself (pilot.agent.launch), the leader of its own session
    with no shell above it: the guardian still kills it when the pilot dies by SIGKILL, and the job stays
    leased to the dead pilot until the reaper requeues it."""
    (job_id,) = store.submit([job(command="sleep 30")])
    env = pilot_env(tmp_path, cores=1)
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", env=env) as proc:
        wait_until(lambda: states(store, [job_id]) == [JobState.RUNNING], timeout=10, what="the payload's start")
        # the pilot's own child, not a shell's: no shell stands between them
        (payload,) = [c for c in psutil.Process(proc.pid).children() if c.name() == "sleep"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wait_until(
        lambda: not payload.is_running() or payload.status() == psutil.STATUS_ZOMBIE,
        timeout=5,
        what="the payload of the dead pilot killed",
    )
    assert states(store, [job_id]) == [JobState.RUNNING]
