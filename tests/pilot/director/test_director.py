"""The site director end to end: demand in Redis -> pilots in a real batch system -> payloads done once.

Issue 5. The same tests run through the local backend, the Slurm of ``scripts/slurm.sh`` and the Grid
Engine of ``scripts/sge.sh`` (a batch system that is not up skips with the reason). Everything is real:
the test's redis-server, ``Submitter``, ``Director.cycle()``, ``sbatch``/``qsub``/processes, and
``pilotfish pilot`` processes that match and run the payloads. Leases are 3 s, pilots leave after 2 s
without work, and the director's backends poll every 0.5 s, so the whole file stays within minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pilot.backends import PilotState, PilotStatus
from pilot.backends.slurm import parse_time_origin
from taskqueues.store.records import JobState
from tests.support.catalogs import NICE_FACTOR, PRIO_SECONDS, TIME_ORIGIN
from tests.support.directors import KINDS, Rig, all_final, states_of
from tests.support.polling import wait_until


def _marks(kind: str) -> list[pytest.MarkDecorator]:
    return [getattr(pytest.mark, kind)] if kind != "local" else []


ALL = [pytest.param(kind, marks=_marks(kind), id=kind) for kind in KINDS]


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    # Pilots start in the submitter's directory (sbatch, qsub -cwd, Popen): keep their work dirs in tmp_path.
    monkeypatch.chdir(tmp_path)
    made = Rig(request.param, redis_url, tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_demand_becomes_pilots_of_the_cheapest_shapes_that_run_every_job_once(rig: Rig) -> None:
    sub = rig.submit([rig.job("two-cores", cpu=2), rig.job("one-core", cpu=1)])
    ids = list(sub.ids.values())

    first = rig.cycle()
    assert first.demand == 2 and not first.errors and not first.unplaceable, first
    # Two cores fit only c2; the one-core job then takes the cheapest shape that holds it, c1 (1.0 < 1.5).
    shapes = {batch_id: str(rig.provisioned()[batch_id]["shape"]) for batch_id in first.submitted}
    assert sorted(shapes.values()) == ["c1", "c2"], shapes
    if rig.kind != "local":  # what the batch system itself granted each pilot
        assert {b: rig.granted_cpus(b) for b in shapes} == {b: int(s[1]) for b, s in shapes.items()}

    rig.drive(lambda: all_final(rig.jobs(ids)) and not rig.provisioned(), 90, "all jobs done and pilots gone")

    assert states_of(rig.jobs(ids)) == [JobState.DONE] * 2
    assert sorted(rig.completions()) == sorted((i, 1) for i in ids), "a payload ran twice or not at all"
    assert all(j.pilot and j.pilot.startswith(f"{rig.kind}-") for j in rig.jobs(ids)), rig.jobs(ids)
    # Later cycles may add a pilot while one that is RUNNING has not sent its first heartbeat (the director
    # then counts it as full); every pilot, planned or extra, ends by itself with exit 0 or is cancelled
    # while still queued once the demand has gone.
    ended = rig.ended()
    assert set(first.submitted) <= set(ended)
    assert set(ended) | rig.cancelled() == set(rig.submitted()), (ended, rig.cancelled(), rig.submitted())
    assert all(why.startswith("DONE") for why in ended.values()), ended
    # They left by idle timeout, or released by the director while the other pilot waited for their room
    # (a 2-core host holds c1 or c2, not both): the reason each pilot gave in its last heartbeat.
    records = [r for r in rig.ctx.store.pilot_records().values() if r["queue"] == rig.queue.id]
    assert len(records) == len(ended), records
    assert all(str(r.get("stopped", "")).startswith(("idle", "released by the director")) for r in records), records


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_n_max_queued_caps_queued_pilots_per_shape_across_cycles(rig: Rig) -> None:
    rig.fill()
    rig.submit([rig.job(f"j{i}") for i in range(5)])

    first = rig.cycle()
    assert first.demand == 5 and first.submitted and not first.errors, first
    records = rig.provisioned()
    per_shape = [str(r["shape"]) for r in records.values()]
    assert len(per_shape) == len(set(per_shape)), f"more than one queued pilot of a shape: {records}"
    states = rig.wait_states(first.submitted, lambda s: all(x.state is PilotState.QUEUED for x in s.values()))
    assert set(states) == set(first.submitted)

    for _ in range(2):
        time.sleep(0.6)  # past poll_interval: the director sees the batch system's answer, not its cache
        again = rig.cycle()
        assert again.submitted == [] and again.cancelled == [] and not again.errors, again
    assert rig.provisioned().keys() == records.keys()
    states = rig.states(first.submitted)
    assert all(s.state is PilotState.QUEUED for s in states.values()), states


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_queued_pilots_are_cancelled_in_the_batch_system_when_their_demand_goes(rig: Rig) -> None:
    rig.fill()
    sub = rig.submit([rig.job("a"), rig.job("b", cpu=2)])
    first = rig.cycle()
    assert len(first.submitted) == 2, first
    rig.wait_states(first.submitted, lambda s: all(x.state is PilotState.QUEUED for x in s.values()))

    for job in sub.ids.values():
        assert rig.ctx.store.cancel(job) in ("ended", "final")
    after = rig.cycle()
    assert sorted(after.cancelled) == sorted(first.submitted) and after.submitted == [], after
    assert rig.provisioned() == {}
    states = rig.wait_states(first.submitted, lambda s: all(x.state.final for x in s.values()))
    assert all(s.state is PilotState.CANCELLED for s in states.values()), states
    if rig.kind == "slurm":
        assert {b: rig.scontrol(b)["JobState"] for b in first.submitted} == dict.fromkeys(first.submitted, "CANCELLED")
    elif rig.kind == "sge":
        listed = rig.run("qstat", "-u", "*")
        assert not [b for b in first.submitted if f" {b} " in f" {listed} "], listed


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_a_pilot_that_takes_its_job_while_the_director_polls_gets_no_twin(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded batch system answers a status query late (seen: seconds). The director reads the demand, then
    polls: a pilot that started meanwhile, took the waiting job and said so in a heartbeat must not make the
    job look unserved (a second pilot for one job, and the busy one asked to release itself)."""
    [job] = rig.submit([rig.job("one", seconds=2)]).ids.values()
    backend = rig.director.backend(rig.queue)
    poll = backend.states
    late: list[str] = []

    def heartbeat_shows_it() -> bool:
        return any(int(r.get("used_cpu", 0)) >= 1 for r in rig.ctx.store.pilot_records().values())

    def states_answered_late(ids: Sequence[str]) -> dict[str, PilotStatus]:
        answer = poll(ids)
        if not late and any(s.state is PilotState.RUNNING for s in answer.values()):
            # The poll's answer is as old as the poll: hold it until the pilot has taken the job and beaten.
            late.append(f"held until the heartbeat showed job {job} taken")
            wait_until(heartbeat_shows_it, timeout=60, what=f"{rig.kind}: a heartbeat of the pilot running {job}")
        return answer

    monkeypatch.setattr(backend, "states", states_answered_late)
    first = rig.cycle()
    assert len(first.submitted) == 1, first
    rig.drive(lambda: all_final(rig.jobs([job])), 90, "the job done")
    assert late, f"the pilot was never seen running before the job ended; {rig.timeline()}"
    assert rig.submitted() == first.submitted, f"a second pilot for one job; {rig.timeline()}"
    assert not any(r.queues[rig.queue.id].released for r in rig.reports), f"a busy pilot released; {rig.timeline()}"


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_a_running_pilot_a_stale_poll_calls_queued_is_not_cancelled(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll's answer can be older than a pilot's first heartbeat (a loaded batch system, a cached poll). A
    pilot that runs its job while the poll still calls it queued is not one that no job needs: cancelling it
    would send the job back and run it a second time."""
    [job] = rig.submit([rig.job("one", seconds=3)]).ids.values()
    first = rig.cycle()
    [pilot] = first.submitted
    rig.drive(lambda: states_of(rig.jobs([job])) == [JobState.RUNNING], 60, "the job running")
    backend = rig.director.backend(rig.queue)
    monkeypatch.setattr(
        backend, "states", lambda ids: {i: PilotStatus(PilotState.QUEUED, "as the last poll said") for i in ids}
    )
    stale = rig.cycle()
    assert stale.cancelled == [] and not stale.ended, f"a running pilot cancelled; {stale}; {rig.timeline()}"
    monkeypatch.undo()
    rig.drive(lambda: all_final(rig.jobs([job])), 90, "the job done")
    [done] = rig.jobs([job])
    assert (done.state, done.attempt) == (JobState.DONE, 1), f"{done.reason}; {rig.timeline()}"
    assert rig.submitted() == [pilot]


# A pilot held at a gate once started: its Python and the pilot's modules loaded, no store contact (no heartbeat)
# until the file named by its first argument exists. The rest of the argv is `pilotfish`'s.
GATED = """import os, sys, time
import pilot.agent.command
from matcher.cli.main import main
gate = sys.argv.pop(1)
while not os.path.exists(gate):
    time.sleep(0.01)
main(sys.argv[1:], prog_name="pilotfish")
"""


def gated(command: list[str], gate: Path) -> list[str]:
    """``command`` (the director's ``python -m matcher.cli pilot ...``) run behind ``gate``."""
    assert command[1:3] == ["-m", "matcher.cli"], command
    return [command[0], "-c", GATED, str(gate), *command[3:]]


#: One head of the demand (``Store.waiting_heads``): task queue, job, cpu, mem, tmp, wall, score.
Head = tuple[str, str, int, int, int, float, float]

# What a poll answers for a pilot it is behind on: a stale "queued", or nothing it knows of (a batch system that
# answers UNKNOWN has the pilot adopted, which is "queued" until polled; the local backend adopts its own pilot
# as what it is, running, so the case is not one there).
BEHIND = [
    *(pytest.param(kind, PilotState.QUEUED, marks=_marks(kind), id=f"{kind}-queued") for kind in KINDS),
    *(pytest.param(kind, PilotState.UNKNOWN, marks=_marks(kind), id=f"{kind}-unknown") for kind in ("slurm", "sge")),
]


@pytest.mark.parametrize(("rig", "behind"), BEHIND, indirect=["rig"])
def test_a_pilot_that_beats_after_the_heartbeat_read_and_a_poll_is_behind_is_not_cancelled(
    rig: Rig, behind: PilotState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The director reads the heartbeats, then the demand, then polls. A pilot that starts, beats and takes its
    job between the heartbeat read and the demand read is missing from both: no beat of it in the first read,
    its job gone from the demand. A poll that is behind (a loaded batch system) calls it queued: a queued pilot
    that no job needs, to be cancelled, unless the heartbeats are read again after the poll (the second read of
    ``Director._existing``). Cancelled, its job would go back and run a second time."""
    gate = rig.tmp / "gate"
    command = rig.director.pilot_command
    monkeypatch.setattr(rig.director, "pilot_command", lambda *args: gated(command(*args), gate))
    [job] = rig.submit([rig.job("one", seconds=2)]).ids.values()
    first = rig.cycle()
    [pilot] = first.submitted
    # Started by the batch system, held at the gate: the next cycle's first heartbeat read has nothing of it.
    rig.wait_states([pilot], lambda s: s[pilot].state is PilotState.RUNNING, timeout=60)
    store, backend = rig.ctx.store, rig.director.backend(rig.queue)
    read_demand, poll = store.waiting_heads, backend.states
    held: list[str] = []

    def beats() -> list[dict[str, object]]:
        return [r for r in store.pilot_records().values() if r.get("queue") == rig.queue.id]

    def demand_read_once_the_pilot_took_its_job(queue: str, per_tq: int = 200) -> list[Head]:
        if queue == rig.queue.id and not held:
            assert not beats(), "the pilot beat before its gate opened"
            gate.touch()  # the director has read the heartbeats (just before the demand): the pilot starts now
            opened = time.monotonic()
            wait_until(lambda: rig.jobs([job])[0].pilot, timeout=60, what=f"{rig.kind}: the pilot to take {job}")
            held.append(f"demand read {time.monotonic() - opened:.2f} s after the gate, the pilot beat, {job} taken")
        return read_demand(queue, per_tq)

    def poll_behind(ids: Sequence[str]) -> dict[str, PilotStatus]:
        answer = poll(ids)
        if len(held) != 1:
            return answer
        assert [r["batch_id"] for r in beats()], "no heartbeat of the pilot before the poll's answer"
        held.append(f"poll answered {behind} for {list(ids)} (the batch system said {answer})")
        return {i: PilotStatus(behind, "a poll behind the pilot") for i in ids}

    monkeypatch.setattr(store, "waiting_heads", demand_read_once_the_pilot_took_its_job)
    monkeypatch.setattr(backend, "states", poll_behind)
    behind_cycle = rig.cycle()
    assert len(held) == 2, f"the interleaving did not happen: {held}; {rig.timeline()}"
    assert behind_cycle.demand == 0, behind_cycle
    assert behind_cycle.cancelled == [] and not behind_cycle.ended, f"a busy pilot cancelled; {behind_cycle}; {held}"
    assert behind_cycle.submitted == [], f"a twin for a taken job; {behind_cycle}"
    rig.drive(lambda: all_final(rig.jobs([job])), 90, "the job done")
    [done] = rig.jobs([job])
    assert (done.state, done.attempt) == (JobState.DONE, 1), f"{done.reason}; {rig.timeline()}"
    assert rig.completions() == [(job, 1)], rig.timeline()
    assert rig.submitted() == [pilot], rig.timeline()


# Payloads run in sessions of their own (pilot.agent.payload), which a batch system that kills the pilot's
# process group (the local backend, Grid Engine without ENABLE_ADDGRP_KILL) or loses re-parented processes
# (Slurm's proctrack/linuxproc) does not reach: the pilot's guardian (pilot.agent.guardian, in a session of
# its own) kills them when the pilot dies, so attempt 1 never finishes beside the re-run attempt 2.
KILLED = [pytest.param(kind, id=kind, marks=_marks(kind)) for kind in KINDS]


@pytest.mark.parametrize("rig", KILLED, indirect=True)
def test_a_pilot_killed_by_the_batch_system_is_lost_and_its_jobs_run_again_once(rig: Rig) -> None:
    sub = rig.submit([rig.job("a", seconds=4), rig.job("b", seconds=4)])
    ids = list(sub.ids.values())
    first = rig.cycle()
    [victim] = first.submitted  # two one-core jobs: one c2 (1.5) is cheaper than two c1 (2.0)
    rig.drive(lambda: states_of(rig.jobs(ids)) == [JobState.RUNNING] * 2, 60, "both jobs running")
    assert {j.pilot for j in rig.jobs(ids)} == {rig.jobs(ids)[0].pilot}

    rig.kill(victim)
    rig.drive(lambda: all_final(rig.jobs(ids)), 90, "every job done after the kill")

    jobs = rig.jobs(ids)
    seen = f"{[(j.state, j.attempt, j.retries, j.pilot, j.reason) for j in jobs]}\n{rig.timeline()}"
    assert states_of(jobs) == [JobState.DONE] * 2, seen
    # The jobs came back through lease expiry and the reaper only: every attempt after the first follows a
    # lease the reaper found expired, none a job handed back or a pilot cancelled under it. That is attempt 2
    # on a quiet host; on a loaded one the pilot that took them may stall past its 3 s lease before its first
    # heartbeat, and its jobs go back once more the same way (a lease doing its work: the stalled attempt is
    # stopped unreported at that pilot's next heartbeat, and its report would be refused).
    attempts = [j.attempt for j in jobs]
    assert min(attempts) >= 2 and sum(a - 1 for a in attempts) == rig.requeued, f"{rig.requeued} requeued: {seen}"
    assert rig.ended()[victim].startswith("LOST"), rig.ended()
    assert len(rig.submitted()) >= 2 and rig.submitted()[0] == victim
    done = rig.completions()
    expected = sorted((j.id, j.attempt) for j in jobs)
    assert sorted(done) == expected, f"payload completions {done}: a job ran to its end twice; {seen}"


@pytest.mark.slurm
@pytest.mark.parametrize("rig", ["slurm"], indirect=True)
def test_slurm_nice_is_start_by_since_time_origin_times_nice_factor(rig: Rig) -> None:
    rig.fill()  # keep the pilot pending, so its job record is certainly still there to read
    rig.submit([rig.job("urgent")], priority=0.0)
    rig.submit([rig.job("later")], priority=-3600.0)  # asks to start an hour later
    first = rig.cycle()
    assert len(first.submitted) == 1, first  # both on one c2 pilot: its start-by is the more urgent job's
    [batch_id] = first.submitted
    record = rig.provisioned()[batch_id]
    expected = round((float(record["start_by"]) - parse_time_origin(TIME_ORIGIN)) * NICE_FACTOR)  # type: ignore[arg-type]
    assert expected > 0
    assert int(rig.scontrol(batch_id)["Nice"]) == expected


@pytest.mark.sge
@pytest.mark.parametrize("rig", ["sge"], indirect=True)
def test_sge_priority_follows_how_far_ahead_start_by_is(rig: Rig) -> None:
    rig.fill()
    rig.submit([rig.job("not-yet")], priority=-600.0)  # should start ten minutes from now
    before = time.time()
    first = rig.cycle()
    after = time.time()
    [batch_id] = first.submitted
    start_by = float(rig.provisioned()[batch_id]["start_by"])  # type: ignore[arg-type]
    expected = {max(-1023, min(0, -round((start_by - now) / PRIO_SECONDS))) for now in (before, after)}
    assert min(expected) <= -9, expected  # not the default 0: the priority really comes from start_by
    prio = rig.sge_priority(batch_id)
    assert prio in expected, (prio, expected)


# A job's -b string: Slurm's -w (nodelist) shows as ReqNodeList; Grid Engine's -p beats the start-by priority.
JOB_OPTIONS = {"slurm": ("-w localhost", "ReqNodeList", "localhost"), "sge": ("-p -7", "priority", "-7")}


@pytest.mark.parametrize("rig", [pytest.param(k, id=k, marks=_marks(k)) for k in JOB_OPTIONS], indirect=True)
def test_a_jobs_backend_options_and_wall_go_with_the_pilots_planned_for_it_only(rig: Rig) -> None:
    options, field, value = JOB_OPTIONS[rig.kind]
    rig.fill()  # the pilots stay queued: what the batch system holds for them can be read
    rig.submit([rig.job("plain"), rig.job("opted", options=options), rig.job("opted-too", options=options)])
    first = rig.cycle()
    assert not first.errors, first
    # Two one-core jobs pack onto one c2 pilot; the plain job does not join them (its pilot has no options).
    records = rig.provisioned()
    planned = sorted((str(r["options"]), str(r["shape"]), int(r["jobs"])) for r in records.values())  # type: ignore[call-overload]
    assert planned == [("", "c1", 1), (options, "c2", 2)], records
    by_options = {str(r["options"]): b for b, r in records.items()}

    def shown(batch_id: str) -> str:
        return rig.scontrol(batch_id)[field] if rig.kind == "slurm" else str(rig.sge_priority(batch_id))

    assert shown(by_options[options]) == value
    assert shown(by_options[""]) != value
    # The wall asked: what the jobs need, their wall of 2 minutes (not their 1 s estimate), rounded up to
    # wall_granularity (60 s), plus one step of headroom.
    assert {int(r["wall"]) for r in records.values()} == {180}, records  # type: ignore[call-overload]
    for batch_id in records:
        if rig.kind == "slurm":
            assert rig.scontrol(batch_id)["TimeLimit"] == "00:03:00"
        else:
            assert "h_rt=180" in rig.run("qstat", "-j", batch_id)

    time.sleep(0.6)  # past poll_interval
    again = rig.cycle()  # each group keeps its queued pilot: nothing new, nothing cancelled
    assert again.submitted == [] and again.cancelled == [] and not again.errors, again


@pytest.mark.parametrize("rig", ALL, indirect=True)
def test_a_pilot_that_exits_non_zero_is_failed_not_lost(rig: Rig) -> None:
    # The pilot itself cannot start: Redis unreachable is its documented exit 1 (pilot.agent.command).
    rig.director.env["PILOTFISH_REDIS_URL"] = "redis://127.0.0.1:9/0"
    rig.submit([rig.job("stays")])
    first = rig.cycle()
    [batch_id] = first.submitted
    rig.drive(lambda: batch_id in rig.ended(), 60, "the pilot ended")
    assert rig.ended()[batch_id].startswith("FAILED"), rig.ended()
    assert "exit 1" in rig.ended()[batch_id], rig.ended()
