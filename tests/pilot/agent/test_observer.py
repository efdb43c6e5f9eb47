"""The pilot in this process, watched by a recording observer (our own protocol, implemented here for the test;
the real one is the Celery observer): every call at its moment, operator commands."""

from __future__ import annotations

from pathlib import Path

import pytest

import pilot.agent.payload as payload_module
from pilot.agent.config import Identity, PilotConfig
from pilot.agent.observer import Command, PilotInfo, PilotLoad
from pilot.agent.pilot import Pilot
from pilot.mjf.source import FeatureReader
from taskqueues.store import Store
from taskqueues.store.records import Job, JobState, RunResult
from tests.support.pilots import QUEUE, write_features
from tests.support.store import job


class Recorder:
    """Records every call; hands out commands when the running jobs satisfy a trigger."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.running: set[str] = set()
        self.scripted: list[tuple[str, Command]] = []  # (job that must be running, command)
        self.polls = 0

    def pilot_started(self, info: PilotInfo) -> None:
        self.calls.append(("pilot_started", info))

    def heartbeat(self, info: PilotInfo, load: PilotLoad) -> None:
        self.calls.append(("heartbeat", load))

    def payload_started(self, info: PilotInfo, job: Job) -> None:
        self.running.add(job.id)
        self.calls.append(("payload_started", job.id))

    def payload_ended(self, info: PilotInfo, job: Job, result: RunResult, state: str) -> None:
        self.running.discard(job.id)
        self.calls.append(("payload_ended", (job.id, state, result)))

    def pilot_stopped(self, info: PilotInfo, reason: str) -> None:
        self.calls.append(("pilot_stopped", reason))

    def commands(self) -> list[Command]:
        self.polls += 1
        ready = [c for trigger, c in self.scripted if trigger in self.running]
        self.scripted = [(t, c) for t, c in self.scripted if t not in self.running]
        return ready

    def close(self) -> None:
        self.calls.append(("close", None))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def ended(self) -> dict[str, tuple[str, RunResult]]:
        return {v[0]: (v[1], v[2]) for n, v in self.calls if n == "payload_ended"}  # type: ignore[index]


def make_pilot(tmp_path: Path, store: Store, observer: object, **config: object) -> Pilot:
    mf = write_features(tmp_path / "mf", hs06=10.0)
    jf = write_features(tmp_path / "jf", allocated_CPU=2, mem_limit_MB=4000, disk_limit_GB=10)
    settings: dict[str, object] = {
        "idle_timeout": 0.5,
        "identity": Identity("local", "t1", "node"),
        "jobstatus_dir": tmp_path / "jobstatus",
        **config,
    }
    pilot_config = PilotConfig(queue=QUEUE, workdir=tmp_path / "work", **settings)  # type: ignore[arg-type]
    reader = FeatureReader(str(mf), str(jf), env={}, workdir=tmp_path)
    return Pilot(pilot_config, store, observer=observer, reader=reader)  # type: ignore[arg-type]


def test_observer_sees_every_event_in_order(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    ids = store.submit([job(command="true"), job(command="exit 4")])
    recorder = Recorder()
    pilot = make_pilot(tmp_path, store, recorder)
    assert pilot.run().startswith("idle")
    names = recorder.names()
    assert names[0] == "pilot_started" and names[1] == "heartbeat"
    assert names[-2:] == ["pilot_stopped", "close"]
    for i in ids:
        start = recorder.calls.index(("payload_started", i))
        end = next(n for n, (name, value) in enumerate(recorder.calls) if name == "payload_ended" and value[0] == i)  # type: ignore[index]
        assert start < end
    ended = recorder.ended()
    assert ended[ids[0]][0] == "done" and ended[ids[1]][0] == "failed"
    assert ended[ids[1]][1].reason == "exit code 4"
    info = recorder.calls[0][1]
    assert isinstance(info, PilotInfo)
    assert (info.name, info.cores, info.mem, info.tmp) == ("local-t1@node", 2, 4000, 10000)
    assert recorder.polls >= 3, "commands() is polled every turn"


def test_operator_kill_and_drain(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    victim, survivor, later = store.submit(
        [job(command="sleep 60", score=0), job(command="sleep 1", score=1), job(command="true", score=2)]
    )
    recorder = Recorder()
    recorder.scripted = [(victim, Command("kill", victim)), (survivor, Command("drain"))]
    pilot = make_pilot(tmp_path, store, recorder, idle_timeout=30, kill_grace=1)
    assert pilot.run() == "drain requested by operator"
    assert store.job(victim).state == JobState.FAILED
    assert store.job(victim).reason == "killed by operator"
    assert store.job(survivor).state == JobState.DONE, "a drain lets running payloads finish"
    assert store.job(later).state == JobState.WAITING, "a drain stops taking jobs"


def test_shutdown_gives_running_payloads_back(redis_url: str, tmp_path: Path) -> None:
    """Celery's warm shutdown for a pilot: no new work, and what runs goes back to its task queue now."""
    store = Store.from_url(redis_url)
    [slow] = store.submit([job(command="sleep 60")])
    recorder = Recorder()
    recorder.scripted = [(slow, Command("shutdown"))]
    pilot = make_pilot(tmp_path, store, recorder, idle_timeout=30, kill_grace=1)
    assert pilot.run() == "shutdown requested by operator"
    record = store.job(slow)
    assert record.state == JobState.WAITING and record.reason == "pilot shut down by operator"


class Broken(Recorder):
    """An observer that breaks its promise never to raise."""

    def payload_started(self, info: PilotInfo, job: Job) -> None:
        raise RuntimeError("monitoring is down")

    def heartbeat(self, info: PilotInfo, load: PilotLoad) -> None:
        raise RuntimeError("monitoring is down")

    def commands(self) -> list[Command]:
        raise RuntimeError("monitoring is down")


def test_a_broken_observer_never_stops_payloads(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    ids = store.submit([job(command="true") for _ in range(3)])
    make_pilot(tmp_path, store, Broken()).run()
    assert [store.job(i).state for i in ids] == [JobState.DONE] * 3


@pytest.mark.timeout(120)
def test_without_pidfds_sigchld_wakes_the_loop(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels older than 5.3 have no pidfd_open; we simulate one by making it unavailable (the only stand-in
    in these tests). Exits must still be noticed at once: every periodic wake-up of the loop (operator-command
    poll, memory sample, heartbeat, $JOBSTATUS) is an hour apart here, so 20 payloads noticed by polling alone
    would take hours, and the test's timeout would end it."""
    monkeypatch.setattr(payload_module, "_pidfd_open", lambda pid: None)
    store = Store.from_url(redis_url, lease_seconds=3 * 3600)
    ids = store.submit([job(command="true", score=i) for i in range(20)])
    hour = 3600.0
    pilot = make_pilot(
        tmp_path,
        store,
        Recorder(),
        idle_timeout=0.3,
        lease=3 * hour,
        heartbeat_interval=hour,
        command_poll=hour,
        mem_sample_interval=hour,
        jobstatus_interval=hour,
    )
    assert pilot.run().startswith("idle")
    assert [store.job(i).state for i in ids] == [JobState.DONE] * 20
