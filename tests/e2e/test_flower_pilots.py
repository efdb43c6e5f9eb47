"""Flower watching and steering REAL pilots (issue 6): two ``pilotfish pilot --events`` processes run real
payloads submitted with the Submitter, and everything is observed and done through Flower's HTTP API.

A shutdown from Flower is Celery's warm shutdown for a pilot: it terminates the running payloads (SIGTERM,
then SIGKILL after ``--kill-grace``), gives their jobs back to their task queue (a retry, shown as Celery's
RETRY) and exits within a heartbeat; the requeued job then runs again on the surviving pilot. A drain is
its own action, Celery's cancel-consumer of the pilot's queue: the survivor lets its payload finish, takes
nothing new, and exits.

The long payloads ask for both cores of a 2-core pilot, so each pilot runs exactly one of them: which
pilot holds which job is then known from the store, not guessed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from matcher.submission import JobSpec, Submitter
from pilot.agent.config import identity_from_environment
from pilot.celery_events import task_uuid
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from taskqueues.store.records import Job, JobState
from tests.support.flower import FlowerServer
from tests.support.pilots import pilot_env
from tests.support.polling import wait_until

QUEUE = "local/localhost/local"  # the one queue of Catalog.local_default()
VO = "default"
CORES = 2
HEARTBEAT = 2.0  # the pilot's --heartbeat (lease renewal)
LEASE = 6.0
KILL_GRACE = 2.0
#: Long enough for the idle gaps of the scenario (start-up, between the two submissions) on a busy
#: 2-core machine; it is also how long the test waits at the end for the survivor to stop by itself.
IDLE_TIMEOUT = 12.0
REVOKE_REASON = "revoked from Celery/Flower (SIGTERM)"


@dataclass
class PilotProcess:
    """One ``python -m matcher.cli pilot --events`` subprocess and what the test knows of it."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def payloads(self, job_id: str) -> list[psutil.Process]:
        """The live processes of a job's payload: the pilot's descendants that carry its PILOTFISH_JOB_ID."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                if child.environ().get("PILOTFISH_JOB_ID") == job_id and _alive(child):
                    found.append(child)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (a killed payload the pilot has not reaped yet is gone for our purpose)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_pilot(redis_url: str, tmp_path: Path, batch_id: str) -> PilotProcess:
    """A real pilot named ``local-<batch_id>@<node>``, with its own MJF directories and no foreign settings."""
    home = tmp_path / batch_id
    env = {k: v for k, v in pilot_env(home, cores=CORES, mem=4000).items() if not k.startswith("PILOTFISH_")}
    env["PILOTFISH_BATCH_ID"] = batch_id
    name = identity_from_environment({"PILOTFISH_BATCH_ID": batch_id}).name
    log_path = home / "pilot.err"
    with open(log_path, "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "matcher.cli",
                "pilot",
                "--queue",
                QUEUE,
                "--redis-url",
                redis_url,
                "--events",
                "--cores",
                str(CORES),
                "--idle-timeout",
                str(IDLE_TIMEOUT),
                "--lease",
                str(LEASE),
                "--heartbeat",
                str(HEARTBEAT),
                "--kill-grace",
                str(KILL_GRACE),
                "--workdir",
                str(home / "work"),
                "-v",
            ],
            cwd=home,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return PilotProcess(name, proc, log_path)


@contextmanager
def two_pilots(redis_url: str, tmp_path: Path) -> Iterator[tuple[PilotProcess, PilotProcess]]:
    """Two pilots; whatever is left of them and their payloads is killed when the block ends."""
    pilots = [start_pilot(redis_url, tmp_path, batch_id) for batch_id in ("flower-a", "flower-b")]
    try:
        yield pilots[0], pilots[1]
    finally:
        for pilot in pilots:
            if pilot.proc.poll() is None:
                try:
                    leftovers = psutil.Process(pilot.proc.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    leftovers = []
                pilot.proc.send_signal(signal.SIGKILL)
                pilot.proc.wait()
                for child in leftovers:  # payloads run in their own sessions: they outlive a SIGKILLed pilot
                    with suppress(psutil.NoSuchProcess):
                        child.kill()


def flower_task(flower: FlowerServer, tid: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
    """The task as /api/tasks shows it, once it is in ``state``."""

    def found() -> dict[str, Any] | None:
        task: dict[str, Any] | None = flower.get("/api/tasks").get(tid)
        return task if task is not None and task.get("state") == state else None

    result: dict[str, Any] = wait_until(found, timeout=timeout, what=f"task {tid} in state {state} in Flower")
    return result


def alive(flower: FlowerServer, name: str) -> bool | None:
    status: bool | None = flower.get("/api/workers?status=1").get(name)
    return status


def test_flower_shows_and_steers_real_pilots_running_real_payloads(
    flower: FlowerServer, redis_url: str, tmp_path: Path
) -> None:
    store = Store.from_url(redis_url)
    submitter = Submitter(store, Catalog.local_default(), vo=VO)

    with two_pilots(redis_url, tmp_path) as (a, b):
        pilots = {a.name: a, b.name: b}

        def context() -> str:
            """The pilots' logs, for failure messages."""
            return "\n".join(f"--- {p.name}:\n{p.log()[-3000:]}" for p in pilots.values())

        # Both pilots are workers. Their heartbeats also prove Flower is subscribed: events sent before
        # that would be lost (fanout is pub/sub), so nothing is submitted until then.
        def all_alive() -> bool:
            return all(alive(flower, name) is True for name in pilots)

        wait_until(all_alive, timeout=30, what=f"Flower to see {' and '.join(pilots)} alive")

        def inspected() -> dict[str, Any] | None:
            workers: dict[str, Any] = flower.get("/api/workers?refresh=1")
            complete = all({"stats", "conf", "active_queues"} <= set(workers.get(n) or {}) for n in pilots)
            return workers if complete else None

        workers = wait_until(inspected, timeout=15, what="both pilots, inspected, in /api/workers?refresh=1")
        for name in pilots:
            assert workers[name]["conf"]["queue"] == QUEUE
            assert workers[name]["stats"]["pool"]["max-concurrency"] == CORES
            assert workers[name]["active_queues"][0]["name"] == QUEUE
        freq = float(workers[a.name]["conf"]["heartbeat_freq"])  # Celery-event heartbeat period of the pilots

        # Quick payloads: four successes and one failure (exit 3 fails at once: only give-backs are retried).
        quick = submitter.submit(
            [JobSpec(f"quick-{i}", "true", {"cpu": 1}, ete=1) for i in range(4)]
            + [JobSpec("exit-three", "exit 3", {"cpu": 1}, ete=1)],
            name="quick",
        )
        wait_until(
            lambda: all(j.state.final for j in store.jobs(list(quick.ids.values()))),
            timeout=20,
            what="the quick jobs to end",
        )
        for name, job_id in quick.ids.items():
            job = store.job(job_id)
            failing = name == "exit-three"
            assert job.state == (JobState.FAILED if failing else JobState.DONE), (job, context())
            task = flower_task(flower, task_uuid(VO, job_id, job.attempt), "FAILURE" if failing else "SUCCESS")
            assert task["name"] == name and task["worker"] == job.pilot and task["worker"] in pilots
            assert task["args"] == repr([job.command])
            assert f"'job': '{job_id}'" in task["kwargs"] and f"'attempt': {job.attempt}" in task["kwargs"]
            assert 0 < task["runtime"] < 5
            if failing:
                assert task["exception"] == "exit code 3" and job.reason == "exit code 3"
        found = flower.get("/api/tasks?search=" + urllib.parse.quote(f"kwargs:job={quick.ids['exit-three']}"))
        assert list(found) == [task_uuid(VO, quick.ids["exit-three"], store.job(quick.ids["exit-three"]).attempt)]

        # Two long payloads, each taking both cores of a pilot: one runs on each pilot.
        long = submitter.submit([JobSpec(f"long-{i}", "sleep 30", {"cpu": 2}, ete=30) for i in (1, 2)], name="long")
        victim, evicted = long.ids["long-1"], long.ids["long-2"]

        def both_running() -> list[Job] | None:
            jobs = store.jobs([victim, evicted])
            return jobs if all(j.state == JobState.RUNNING for j in jobs) else None

        running = wait_until(
            both_running,
            timeout=15,
            what=lambda: (
                "both long jobs running: "
                + ", ".join(f"{j.id} {j.state.value} on {j.pilot}" for j in store.jobs([victim, evicted]))
                + f"\n{context()}"
            ),
        )
        assert {j.pilot for j in running} == set(pilots), running
        holder, other = pilots[running[0].pilot or ""], pilots[running[1].pilot or ""]
        victim_tid = task_uuid(VO, victim, running[0].attempt)
        evicted_tid = task_uuid(VO, evicted, running[1].attempt)
        assert flower_task(flower, victim_tid, "STARTED")["worker"] == holder.name
        assert flower_task(flower, evicted_tid, "STARTED")["worker"] == other.name
        active = wait_until(
            lambda: flower.get(f"/api/workers?refresh=1&workername={holder.name}")[holder.name].get("active"),
            timeout=10,
            what=f"the long payload among {holder.name}'s active tasks",
        )
        assert [t["id"] for t in active] == [victim_tid] and active[0]["args"] == ["sleep 30"]

        # Terminate a running payload from Flower: gone within one heartbeat, failed in the store.
        processes = wait_until(lambda: holder.payloads(victim), timeout=5, what="the victim's payload process")
        started = time.monotonic()
        status, body = flower.post(f"/api/task/revoke/{victim_tid}?terminate=true")
        assert status == 200, body
        wait_until(
            lambda: not any(_alive(p) for p in processes),
            timeout=HEARTBEAT,
            interval=0.01,
            what="the revoked payload to be gone within one heartbeat",
        )
        revoke_s = time.monotonic() - started
        record = wait_until(
            lambda: (j := store.job(victim)).state.final and j,
            timeout=HEARTBEAT,
            what="the revoked job's end in the store",
        )
        assert record.state == JobState.FAILED and record.reason == REVOKE_REASON, (record, context())
        revoked = flower_task(flower, victim_tid, "REVOKED")
        assert revoked["worker"] == holder.name and revoked["exception"] == REVOKE_REASON

        # Shut the other pilot down from Flower: it terminates its payload, gives the job back and exits.
        processes = wait_until(lambda: other.payloads(evicted), timeout=5, what="the other long payload's process")
        started = time.monotonic()
        status, body = flower.post("/api/worker/shutdown/" + urllib.parse.quote(other.name))
        assert status == 200, body
        wait_until(
            lambda: other.proc.poll() is not None,
            timeout=HEARTBEAT + KILL_GRACE,
            interval=0.01,
            what=f"{other.name} to exit within one heartbeat plus its kill grace",
        )
        shutdown_s = time.monotonic() - started
        assert other.proc.returncode == 0, context()
        assert not any(_alive(p) for p in processes), "the shut-down pilot left its payload running"
        assert f"pilot {other.name} stopped: Got shutdown from remote" in other.log(), context()
        retried = flower_task(flower, evicted_tid, "RETRY")
        assert retried["worker"] == other.name and "pilot shut down by operator" in retried["exception"]
        wait_until(
            lambda: alive(flower, other.name) is False,
            timeout=2 * freq + 1,
            what=f"Flower to show {other.name} offline",
        )

        # The job given back runs again (next attempt) on the surviving pilot; end it from Flower as well.
        again = wait_until(
            lambda: (j := store.job(evicted)).state == JobState.RUNNING and j,
            timeout=HEARTBEAT + 10,
            what="the requeued job to run again",
        )
        assert again.pilot == holder.name and again.attempt == running[1].attempt + 1 and again.retries == 1
        again_tid = task_uuid(VO, evicted, again.attempt)
        assert flower_task(flower, again_tid, "STARTED")["worker"] == holder.name
        status, body = flower.post(f"/api/task/revoke/{again_tid}?terminate=true")
        assert status == 200, body
        assert flower_task(flower, again_tid, "REVOKED")["worker"] == holder.name
        assert wait_until(lambda: store.job(evicted).state.final, timeout=HEARTBEAT, what="the requeued job's end")

        # Drain the survivor from Flower, as Celery stops a worker consuming from a queue: its payload
        # finishes, it takes nothing new, and it exits well before its idle timeout.
        drained = submitter.submit([JobSpec("drained", "sleep 2", {"cpu": 2}, ete=2)], name="drained").ids["drained"]
        wait_until(lambda: store.job(drained).state == JobState.RUNNING, timeout=15, what="the job to drain to run")
        drain_path = (
            f"/api/worker/queue/cancel-consumer/{urllib.parse.quote(holder.name)}?queue={urllib.parse.quote(QUEUE)}"
        )
        status, body = flower.post(drain_path)
        assert status == 200 and "draining" in body["message"], body
        wait_until(
            lambda: holder.proc.poll() is not None or store.pilot_records()[holder.name]["draining"],
            timeout=2 * HEARTBEAT + 1,
            what=f"{holder.name} to say it drains",
        )
        left = submitter.submit([JobSpec("left", "true", {"cpu": 1}, ete=1)], name="left").ids["left"]
        try:
            holder.proc.wait(IDLE_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{holder.name} did not stop once drained:\n{context()}")
        assert holder.proc.returncode == 0, context()
        assert f"pilot {holder.name} stopped: stopped consuming from {QUEUE}" in holder.log(), context()
        assert store.job(drained).state == JobState.DONE
        assert flower_task(flower, task_uuid(VO, drained, 1), "SUCCESS")["worker"] == holder.name
        assert store.job(left).state == JobState.WAITING, "a drained pilot took new work"

        def offline_counted() -> dict[str, Any] | None:
            counted = {w["hostname"]: w for w in flower.get("/workers?json=1")["data"]}
            return counted if all(counted.get(n, {}).get("worker-offline") == 1 for n in pilots) else None

        wait_until(offline_counted, timeout=5, what="a worker-offline event from each pilot in Flower")
        assert alive(flower, holder.name) is False
        assert flower.errors() == []

    print(
        f"\nFlower revoke -> payload gone: {1000 * revoke_s:.0f} ms; "
        f"Flower shutdown -> pilot exit: {1000 * shutdown_s:.0f} ms"
    )
