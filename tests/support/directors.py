"""A rig for the director's integration tests: one catalog queue per backend kind, real Redis, real pilots.

The rig owns a :class:`Context` on the test's redis-server, a :class:`Director` with its log directory,
and knows, per kind, what only the batch system can tell or do: fill the node so pilots stay queued,
kill a pilot from outside Pilotfish (``kill -9``, ``scancel``, ``qdel``), and read what the batch system
granted. A batch system that ``scripts/<kind>.sh status`` does not report up makes the test skip with
the reason (:func:`tests.support.backends.system_env`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from matcher.submission import JobSpec, Submitted, Submitter
from pilot.backends import LocalBackend, PilotRequest, PilotState, PilotStatus
from pilot.director.service import CycleReport, Director, QueueReport
from taskqueues.catalog import Queue
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.shapes import Shape
from taskqueues.store.records import Job, JobState
from tests.support.backends import system_env
from tests.support.catalogs import QUEUES, SITES, catalog_text
from tests.support.polling import wait_until

KINDS = ("local", "slurm", "sge")


class Rig:
    """Director, store and batch system of one kind, for one test."""

    def __init__(
        self,
        kind: str,
        redis_url: str,
        tmp: Path,
        *,
        pilot_env: dict[str, str] | None = None,
        pilot_redis_url: str | None = None,
        idle_timeout: float = 2.0,
    ) -> None:
        self.kind = kind
        self.system = system_env(kind) if kind != "local" else {}
        self.cmd_env = {**os.environ, "PATH": "/usr/bin:/bin:" + os.environ.get("PATH", ""), **self.system}
        self.tmp = tmp
        self.marker = tmp / "completed"
        self.marker.touch()
        catalog = tmp / "catalog.toml"
        catalog.write_text(catalog_text())
        # Short leases (heartbeat every second), no back-off, pilots leave after 2 s without work (by default).
        settings = Settings().with_(
            redis_url=redis_url,
            pilot_redis_url=pilot_redis_url or redis_url,
            catalog=str(catalog),
            state_dir=str(tmp / "state"),
            lease_seconds=3.0,
            backoff_seconds=0.0,
            pilot_idle_timeout=idle_timeout,
            pilot_events=False,
            pilot_stop_margin=0.0,
            # The payloads of these tests leave marks in the test's directory, which a payload sandbox hides:
            # they run unconfined (the sandbox's own tests: tests/pilot/agent/test_sandbox.py, test_attacks.py).
            payload_sandbox="none",
        )  # the walls asked are exact
        self.ctx = Context(settings)
        self.director = Director(self.ctx, log_dir=str(tmp / "logs"), env=pilot_env)
        self.queue: Queue = self.ctx.catalog.queue(QUEUES[kind], settings.vo)
        self.blockers: list[str] = []
        self.reports: list[CycleReport] = []
        self.job_ids: list[str] = []
        self.requeued = 0  # leases that expired and were requeued by drive()'s reaper
        #: What happened, in order, seconds since the rig was made: cycles that did something, the reaper's
        #: requeues, the jobs' changes seen by drive() (shown by failing assertions: see timeline()).
        self.events: list[str] = []
        self._t0 = time.monotonic()
        self._seen: list[tuple[str, str, int, str | None]] = []

    # -- jobs ------------------------------------------------------------------------------------------

    def job(self, name: str, *, cpu: int = 1, seconds: float = 1.0, options: str | None = None) -> JobSpec:
        """A job for this rig's queue that sleeps, then appends '<id> <attempt>' to the marker file.

        ``options``: its ``BackendOptions`` (the ``-b`` string its pilots are submitted with).
        """
        command = f'sleep {seconds}; echo "$PILOTFISH_JOB_ID $PILOTFISH_ATTEMPT" >> {self.marker}'
        requirements: dict[str, object] = {"Site": SITES[self.kind], "cpu": cpu, "mem": "200M", "wall": "2m"}
        if options is not None:
            requirements["BackendOptions"] = options
        return JobSpec(name=name, command=command, ete=seconds, requirements=requirements)

    def submit(self, jobs: Sequence[JobSpec], *, priority: float = 0.0) -> Submitted:
        submitted = Submitter.of(self.ctx).submit(jobs, name=f"director-{self.kind}", priority=priority)
        self.job_ids += submitted.ids.values()
        self.note(f"submitted jobs {dict(submitted.ids)}")
        return submitted

    def jobs(self, ids: Sequence[str]) -> list[Job]:
        return self.ctx.store.jobs(list(ids))

    def completions(self) -> list[tuple[str, int]]:
        """(job id, attempt) of every payload that ran to its end, in the order they ended."""
        return [(line.split()[0], int(line.split()[1])) for line in self.marker.read_text().splitlines() if line]

    # -- the director -----------------------------------------------------------------------------------

    def cycle(self) -> QueueReport:
        report = self.director.cycle()
        assert not report.skipped, "another director holds the lock"
        self.reports.append(report)
        queue = report.queues[self.queue.id]
        if queue.submitted or queue.cancelled or queue.ended or queue.released or queue.errors:
            self.note(
                f"cycle {len(self.reports)}: demand {queue.demand}, submitted {queue.submitted}, cancelled "
                f"{queue.cancelled}, ended {queue.ended}, released {queue.released}, errors {queue.errors}"
            )
        return queue

    def note(self, what: str) -> None:
        self.events.append(f"+{time.monotonic() - self._t0:.2f}s {what}")

    def timeline(self) -> str:
        """What happened so far, one line each, and the pilots' logs: for failure messages."""
        return "\n".join(["timeline:", *self.events, f"pilot logs: {self.pilot_logs()}"])

    def _watch_jobs(self) -> None:
        seen = [(j.id, j.state.value, j.attempt, j.pilot) for j in self.jobs(self.job_ids)]
        if seen != self._seen:
            self._seen = seen
            self.note("jobs " + ", ".join(f"{i} {state} attempt {a} on {p}" for i, state, a, p in seen))

    def drive(self, until: Callable[[], bool], timeout: float, what: str) -> None:
        """Reap expired leases and run a director cycle every 0.3 s until ``until()`` holds."""

        def step() -> bool:
            self._watch_jobs()
            requeued, failed, _ = self.ctx.store.requeue_expired()
            self.requeued += requeued
            if requeued or failed:
                self.note(f"reaper: {requeued} lease(s) expired and requeued, {failed} failed past retries")
                self._watch_jobs()
            self.cycle()
            return until()

        wait_until(
            step,
            timeout=timeout,
            interval=0.3,
            what=lambda: (
                f"{self.kind}: {what}; last cycle: {self.reports[-1].queues[self.queue.id]}; "
                f"pilots: {self.provisioned()}; {self.timeline()}"
            ),
        )

    def provisioned(self) -> dict[str, dict[str, object]]:
        return self.director.provisioned(self.queue, self.director.backend(self.queue))

    def submitted(self) -> list[str]:
        return [b for r in self.reports for b in r.queues[self.queue.id].submitted]

    def ended(self) -> dict[str, str]:
        return {b: why for r in self.reports for b, why in r.queues[self.queue.id].ended.items()}

    def cancelled(self) -> set[str]:
        return {b for r in self.reports for b in r.queues[self.queue.id].cancelled}

    def states(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        return self.director.backend(self.queue).states(list(ids))

    def wait_states(
        self, ids: Sequence[str], done: Callable[[dict[str, PilotStatus]], bool], timeout: float = 20.0
    ) -> dict[str, PilotStatus]:
        last: dict[str, PilotStatus] = {}

        def settled() -> dict[str, PilotStatus] | None:
            last.update(self.states(ids))
            return dict(last) if done(last) else None

        settled_states: dict[str, PilotStatus] = wait_until(
            settled, timeout=timeout, interval=0.3, what=lambda: f"{self.kind}: pilot states to settle: {last}"
        )
        return settled_states

    def pilot_logs(self) -> str:
        logs = sorted((self.tmp / "logs").glob("*.err")) if (self.tmp / "logs").is_dir() else []
        return " | ".join(f"{p.name}: {p.read_text()[-400:]}" for p in logs if p.stat().st_size)

    # -- the batch system, from outside Pilotfish ----------------------------------------------------------

    def run(self, *argv: str) -> str:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.cmd_env, timeout=60, check=False)
        assert done.returncode == 0, f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()}"
        return done.stdout

    def fill(self) -> None:
        """Occupy the whole node (host) with a blocker, so pilots submitted now stay queued."""
        backend = self.director.backend(self.queue)
        if isinstance(backend, LocalBackend):
            whole = Shape("all", cpu=backend.capacity()["cpu"], mem=64)
            self.blockers.append(
                backend.submit(PilotRequest(name="blocker", command=["sleep", "300"], shape=whole, wall=600))
            )
            self.wait_states(self.blockers, lambda s: s[self.blockers[0]].state is PilotState.RUNNING)
            return
        if self.kind == "slurm":
            out = self.run(
                "sbatch",
                "--parsable",
                "-J",
                "pftest:blocker",
                "-p",
                "debug",
                "-c",
                self.system["PILOTFISH_SLURM_CPUS"],
                "--mem=100",
                "--time=5",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 300",
            )
            self.blockers.append(out.strip().split(";")[0])
        else:
            slots = self.system["PILOTFISH_SGE_SLOTS"]
            out = self.run(
                "qsub",
                "-terse",
                "-b",
                "y",
                "-N",
                "pftest;blocker",
                "-pe",
                "smp",
                slots,
                "-l",
                "h_rt=300",
                "-o",
                "/dev/null",
                "-e",
                "/dev/null",
                "-q",
                "all.q",
                "/bin/sleep",
                "300",
            )
            self.blockers.append(out.strip().split(".")[0])
        wait_until(
            lambda: self.batch_running(self.blockers[0]),
            timeout=60,
            interval=0.3,
            what=f"{self.kind}: the blocker {self.blockers[0]} to start (another test holding the node?)",
        )

    def batch_running(self, batch_id: str) -> bool:
        if self.kind == "slurm":
            return self.run("squeue", "-h", "-j", batch_id, "-o", "%T").strip() == "RUNNING"
        return bool(re.search(rf"^\s*{batch_id}\s.*\sr\s", self.run("qstat", "-u", "*"), re.M))

    def kill(self, batch_id: str) -> None:
        """Kill a running pilot the way its batch system would, with no SIGTERM to hand jobs back first."""
        backend = self.director.backend(self.queue)
        if isinstance(backend, LocalBackend):
            pid = backend.pid(batch_id)
            assert pid is not None, f"pilot {batch_id} is not running"
            os.kill(pid, signal.SIGKILL)
        elif self.kind == "slurm":
            # kill -9 of the pilot on its node (the OOM killer's choice): its batch script dies with it, and
            # slurmstepd ends what is left of the job. (A plain scancel sends SIGTERM first, and the pilot
            # hands its jobs back itself; here only the leases can bring them back.)
            pids = [r["pid"] for r in self.ctx.store.pilot_records().values() if str(r["batch_id"]) == batch_id]
            assert len(pids) == 1, f"no single heartbeat record for pilot {batch_id}: {pids}"
            os.kill(int(pids[0]), signal.SIGKILL)
        else:
            self.run("qdel", batch_id)  # Grid Engine's qdel kills with SIGKILL

    def granted_cpus(self, batch_id: str) -> int:
        """The cores the batch system gave a pilot: Slurm's NumCPUs, Grid Engine's PE slots (1 without PE)."""
        if self.kind == "slurm":
            return int(self.scontrol(batch_id)["NumCPUs"])
        text = self.run("qstat", "-j", batch_id)
        match = re.search(r"^parallel environment:\s*(\S+)\s+range:\s*(\d+)", text, re.M)
        return int(match.group(2)) if match else 1

    def sge_priority(self, batch_id: str) -> int:
        """The priority Grid Engine shows for a job (``qstat -j`` leaves the line out for priority 0)."""
        shown = self.run("qstat", "-j", batch_id)
        return int(next((line.split(":", 1)[1] for line in shown.splitlines() if line.startswith("priority:")), 0))

    def scontrol(self, batch_id: str) -> dict[str, str]:
        return dict(re.findall(r"(\w+)=(\S*)", self.run("scontrol", "show", "job", "-o", batch_id)))

    def close(self) -> None:
        try:
            self.director.stop_all()
            if self.blockers:
                backend = self.director.backend(self.queue)
                if isinstance(backend, LocalBackend):
                    backend.cancel(self.blockers)
                elif self.kind == "slurm":
                    subprocess.run(["scancel", *self.blockers], env=self.cmd_env, check=False, capture_output=True)
                else:
                    subprocess.run(["qdel", *self.blockers], env=self.cmd_env, check=False, capture_output=True)
            # A cancelled pilot writes its last heartbeat on its way out: wait until the batch system says
            # every pilot has ended, or that heartbeat lands in the next test's Redis (seen: a Slurm pilot
            # of one test in the next test's pilot records).
            if self.submitted():
                wait_until(
                    lambda: all(s.state.final for s in self.states(self.submitted()).values()),
                    timeout=30,
                    interval=0.3,
                    what=f"{self.kind}: every pilot of the test to end",
                )
        finally:
            backend = self.director.backend(self.queue)
            if isinstance(backend, LocalBackend):
                backend.shutdown(wait=5)  # what stop_all did not know of: blockers
            self.director.close()


def all_final(jobs: Sequence[Job]) -> bool:
    return all(j.state.final for j in jobs)


def states_of(jobs: Sequence[Job]) -> list[JobState]:
    return [j.state for j in jobs]
