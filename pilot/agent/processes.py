"""The pilot's payload processes: launch, reap, memory, deadlines, kills.

A matched job's payload starts in a fresh sandbox of the pilot's payload area (its own $JOBFEATURES,
$TMPDIR and work directory) if it fits in what is free; a job that cannot start goes back to its task
queue at once. A payload's exit frees its resources at once (the fill runs next); its result is taken in
the next turn and reported by :mod:`pilot.agent.reports`. Every running payload's memory (RSS of its
whole session) is sampled every ``mem_sample_interval``; one over its limit is killed. A payload is
stopped at its own wall limit or at the pilot's end, whichever comes first, and SIGKILLed ``kill_grace``
after any SIGTERM. The guardian (:mod:`pilot.agent.guardian`) kills every payload if the pilot dies.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from collections.abc import Iterator

from pilot.agent.guardian import Guardian
from pilot.agent.memory import over_limit, over_limit_reason, sample_sessions
from pilot.agent.payload import JobRefused, Payload, PayloadError, Stop, job_problem
from pilot.agent.placement import Placement
from pilot.agent.sandbox import Sandbox, adopt_orphans, private_paths
from pilot.agent.state import PilotState
from pilot.agent.wake import Wake
from pilot.mjf.formulas import denormalise
from taskqueues.errors import PilotfishError, StoreError
from taskqueues.sandbox import none_warning
from taskqueues.settings import Settings
from taskqueues.store import Job, JobUsage, RunResult

log = logging.getLogger("pilot.agent")


class Processes:
    """The payloads of one pilot from their spawn to their reaping (those running are its slots')."""

    def __init__(self, state: PilotState, wake: Wake) -> None:
        self.state = state
        self.wake = wake
        self.ended: list[Payload] = []  # reaped, result not yet taken
        self.guardian: Guardian | None = None
        self.confinement: Sandbox | None = None
        self.placement = Placement()  # where one-core payloads start
        self._next_sample = 0.0
        self._logs = state.config.logs  # a property building a path: 40 us a payload when asked each time

    def start_guardian(self) -> None:
        """Start the guardian and make the payload sandbox (:mod:`pilot.agent.sandbox`); raises
        :class:`SandboxError` when the sandbox cannot work here: a pilot then runs no payload at all."""
        config = self.state.config
        try:
            settings = Settings.load()
        except PilotfishError:  # the pilot's own options won; only the state directory's path is wanted here
            settings = Settings()
        extra = (config.log_dir, config.jobstatus_dir)
        shared = [p for p in config.payload_shared_paths.split(":") if p]
        self.confinement = Sandbox.create(
            config.payload_sandbox, private_paths(settings, config.workdir, extra), shared
        )
        if self.confinement.confined:
            adopt_orphans()  # a sandbox's init left by its bwrap comes back to the pilot, with its CPU time
        else:
            log.warning("pilot %s: %s", self.state.name, none_warning())
        self.guardian = Guardian(config.workdir if config.scratch_workdir else None)

    def revive_guardian(self) -> None:
        if self.guardian is not None and self.guardian.revive():
            log.warning(
                "pilot %s: its payload guardian had died: a new one watches its %d payload(s)",
                self.state.name,
                len(self.state.slots.running),
            )

    # -- start -------------------------------------------------------------------------------------

    def launch(self, job: Job) -> Payload | None:
        """Start one matched job's payload; None when the job had to be given back or was refused."""
        state = self.state
        slots = state.slots
        problem = job_problem(job)
        if problem is not None:
            self.refuse(job, problem)
            return None
        if not slots.fits(job):  # never overcommit, even if the store erred
            cpu, mem, tmp = slots.free()
            self.give_back(
                job,
                f"matched job needs cpu={job.cpu} mem={job.mem} tmp={job.tmp} but "
                f"pilot {state.name} has only cpu={cpu} mem={mem} tmp={tmp} free",
            )
            return None
        assert state.area is not None
        try:
            sandbox = state.area.payload(
                f"{job.id}.{job.attempt}",
                cores=job.cpu,
                mem_MB=self.mem_limit(job) or None,
                wall_norm=wall_requirement(job),
                disk_GB=job.tmp / 1000 if job.tmp else None,
            )
        except PilotfishError as exc:
            self.give_back(job, str(exc))
            state.stop_accepting(f"cannot create payload directories: {exc}")
            return None
        config = state.config
        payload = Payload(
            job,
            sandbox,
            log_dir=self._logs,
            output_cap=config.output_cap,
            guardian=self.guardian,
            confinement=self.confinement,
            placement=self.placement,
        )
        try:
            payload.spawn({**sandbox.env(), "PILOTFISH_PILOT": state.name})
        except JobRefused as exc:
            sandbox.cleanup()
            self.refuse(job, str(exc))
            return None
        except (PayloadError, OSError) as exc:
            sandbox.cleanup()
            self.give_back(job, str(exc))
            state.stop_accepting(f"cannot start payloads: {exc}")
            return None
        slots.running[job.id] = payload
        state.launched += 1
        state.last_start = max(state.last_start, payload.start_wall)
        state.dirty = True
        state.notify("payload_started", state.info, job)
        if payload.pidfd is not None:
            self.wake.register(payload.pidfd, "exit", payload)
        for fd in payload.open_pipes:
            self.wake.register(fd, "output", payload)
        return payload

    def refuse(self, job: Job, reason: str) -> None:
        """A matched job whose record cannot be run (poisoned, or a sandbox requirement not granted here):
        fail that job with the reason, and go on with the others."""
        log.error("job %s refused: %s", job.id, reason)
        state = self.state
        result = RunResult(exit_code=None, reason=f"refused by pilot {state.name}: {reason}")
        with contextlib.suppress(StoreError):
            state.store.fail(job.id, job.attempt, state.name, result, requeue=False)

    def give_back(self, job: Job, reason: str, *, unstarted: bool = False) -> None:
        """A matched job this pilot cannot run: requeue it at once, not the job's fault. As a retry, so that a
        job no pilot can start is not given back and matched for ever; ``unstarted``: the pilot no longer takes
        jobs (or has no time left for it), which says nothing of the job, so it uses none of its retries."""
        log.log(logging.INFO if unstarted else logging.ERROR, "job %s given back: %s", job.id, reason)
        state = self.state
        result = RunResult(exit_code=None, reason=reason)
        with contextlib.suppress(StoreError):
            state.store.fail(job.id, job.attempt, state.name, result, requeue=True, unstarted=unstarted)

    # -- end ---------------------------------------------------------------------------------------

    def reaped(self, payload: Payload) -> None:
        """The payload's shell exited: free its resources now (the fill runs next), report later."""
        if payload.pidfd is not None:
            self.wake.unregister(payload.pidfd)
        for fd in payload.open_pipes:
            self.wake.unregister(fd)
        payload.reap()
        state = self.state
        running = state.slots.running
        running.pop(payload.id, None)
        self.ended.append(payload)
        state.dirty = True
        state.match_now()
        if not running:
            state.idle_since = time.monotonic()

    def reap_exited(self) -> None:
        """Without pidfds (SIGCHLD woke the selector): check every payload without reaping it."""
        for payload in [p for p in self.state.slots.running.values() if p.pidfd is None]:
            if payload.has_exited():
                self.reaped(payload)

    def collect_ended(self) -> Iterator[tuple[Payload, RunResult]]:
        """The results of the payloads that ended, one at a time, each sandbox removed."""
        while self.ended:
            payload = self.ended.pop(0)
            result = payload.result()
            payload.close()
            payload.sandbox.cleanup()
            self.state.processed += 1
            yield payload, result

    # -- memory, deadlines, kills ------------------------------------------------------------------

    def sample_due(self, now: float) -> bool:
        return bool(self.state.slots.running) and now >= self._next_sample

    def sample(self) -> None:
        config = self.state.config
        self._next_sample = time.monotonic() + config.mem_sample_interval
        live = {p.pid: p for p in self.state.slots.running.values() if not p.ended}
        for sid, sample in sample_sessions(set(live)).items():
            payload = live[sid]
            payload.usage.add(sample)
            limit = self.mem_limit(payload.job)
            if payload.stop is None and over_limit(sample.rss, limit, config.mem_tolerance):
                reason = over_limit_reason(sample.rss, limit, config.mem_tolerance)
                log.warning("job %s: %s: killing it", payload.id, reason)
                payload.terminate(Stop(reason, "fail"), config.kill_grace)

    def usage(self) -> dict[str, JobUsage]:
        """Peak memory (MB) and CPU time of each running payload measured at least once."""
        return {
            p.id: JobUsage(p.usage.peak_rss / 1_000_000, p.usage.cpu)
            for p in self.state.slots.running.values()
            if p.usage.peak_rss
        }

    def mem_limit(self, job: Job) -> int:
        """MB a payload may use: its ``mem`` requirement or, for a job that asked for none, the pilot's whole
        memory (its $JOBFEATURES ``mem_limit_MB`` says so, and it is enforced the same way); 0 when the
        pilot's memory is unknown, and nothing is enforced."""
        return job.mem or self.state.slots.mem

    def payload_deadline(self, payload: Payload) -> tuple[float | None, Stop | None]:
        """When the payload must be stopped (UNIX time), and how: its own wall limit or the pilot's end."""
        state = self.state
        wall = wall_requirement(payload.job)
        assert state.features is not None
        factor = state.features.cpufactor
        real = None if wall is None else denormalise(wall, factor)
        own = payload.start_wall + real if real is not None else None
        pilot_end = state.area.pilot_end(state.features) if state.area else None
        if own is not None and (pilot_end is None or own <= pilot_end):
            at = "" if factor == 1 else f" normalised ({real:g} s at CPU factor {factor:g})"
            return own, Stop(f"wall time limit {wall} s{at} exceeded", "fail")
        if pilot_end is not None:
            return pilot_end, Stop("the pilot reached its end (wall limit or shutdown time)", "requeue")
        return None, None

    def deadlines(self, now: float) -> list[float]:
        """When the running payloads next need the pilot (``time.monotonic()`` values): the next memory
        sample, a SIGKILL due after a SIGTERM, a wall limit or the pilot's end."""
        running = self.state.slots.running
        out = [self._next_sample]
        out += [p.kill_at for p in running.values() if p.kill_at is not None]
        wall_now = time.time()
        for payload in running.values():
            end = self.payload_deadline(payload)[0]
            if end is not None and payload.stop is None:
                out.append(now + end - wall_now)
        return out

    def enforce_deadlines(self) -> None:
        running = self.state.slots.running
        if not running:
            return
        grace = self.state.config.kill_grace
        now, wall_now = time.monotonic(), time.time()
        for payload in running.values():
            if payload.kill_at is not None and now >= payload.kill_at:
                log.warning("job %s did not stop within %g s of SIGTERM: SIGKILL", payload.id, grace)
                payload.signal(signal.SIGKILL)
                payload.kill_at = math.inf
            if payload.stop is None:
                end, stop = self.payload_deadline(payload)
                if end is not None and stop is not None and wall_now >= end:
                    log.warning("job %s: %s", payload.id, stop.reason)
                    payload.terminate(stop, grace)

    def stop(self, job: str, stop: Stop) -> bool:
        """Stop a running payload (SIGTERM, SIGKILL after the kill grace); False when it does not run here."""
        payload = self.state.slots.running.get(job)
        if payload is None:
            return False
        payload.terminate(stop, self.state.config.kill_grace)
        return True

    def close(self) -> None:
        """The pilot ends: SIGKILL whatever still runs, reap it, remove every sandbox, let the guardian go."""
        for payload in list(self.state.slots.running.values()) + self.ended:
            payload.signal(signal.SIGKILL)
            if not payload.ended:
                with contextlib.suppress(ChildProcessError):
                    payload.reap()
            payload.close()
            payload.sandbox.cleanup()
        if self.guardian is not None:
            self.guardian.close()


def wall_requirement(job: Job) -> int | None:
    """The job's own wall-time requirement, if it gave one: normalised seconds (reference-machine time,
    :mod:`taskqueues.requirements`); real seconds on this node are that / cpufactor (``denormalise``)."""
    value = job.requirements.get("wall")
    try:
        seconds = int(value) if value is not None else 0
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None
