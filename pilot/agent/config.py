"""The pilot's settings: one typed dataclass, filled by the ``pilot`` command or by a test.

Only what an operator may want to tune lives here; what the pilot learns from Machine/Job Features
(cores, memory, scratch, time left) is *not* configured but read, and the ``cores``/``mem``/``tmp``
fields only override it (a site without MJF and a shared host, a test that wants a 2-core pilot).

The pilot's name identifies it to the store (leases), to operators and to Flower, so it must be unique
among live pilots: ``{batch}-{batch_id}@{node}``, the batch job id being unique in its batch system and
the node name making local pids unique across hosts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pilot.mjf.jobstatus import DEFAULT_REVERT_HOLD
from taskqueues.errors import ConfigError
from taskqueues.sandbox import SANDBOXES
from taskqueues.settings import DEFAULTS, LOCAL_REDIS_URL


@dataclass(frozen=True)
class Identity:
    """Which batch system runs the pilot, its job id there, and the node."""

    batch: str
    batch_id: str
    node: str

    @property
    def name(self) -> str:
        return f"{self.batch}-{self.batch_id}@{self.node}"


def identity_from_environment(env: Mapping[str, str] | None = None) -> Identity:
    """The pilot's identity from its batch system's environment: Slurm, Grid Engine, Kubernetes, else a
    local process.

    The local backend exports ``PILOTFISH_BATCH_ID`` (already ``local-<pid>-<n>``, unique on its host). A
    pod of the Helm chart exports its name and its node (``PILOTFISH_POD_NAME``, ``PILOTFISH_NODE_NAME``)
    and is ``k8s-<pod>@<node>``: a name any process of the pod derives alike, so the pod's liveness probe
    finds the pilot's own heartbeat. A pilot started by hand gets ``local-<pid>``.
    """
    env = os.environ if env is None else env
    node = socket.gethostname().split(".")[0] or "localhost"
    slurm = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if slurm:
        return Identity("slurm", slurm, env.get("SLURMD_NODENAME") or node)
    if env.get("JOB_ID") and (env.get("SGE_ROOT") or env.get("NSLOTS") or env.get("SGE_JOB_SPOOL_DIR")):
        task = env.get("SGE_TASK_ID", "")
        suffix = f".{task}" if task and task != "undefined" else ""
        return Identity("sge", f"{env['JOB_ID']}{suffix}", (env.get("HOSTNAME") or node).split(".")[0])
    local = env.get("PILOTFISH_BATCH_ID", "")
    if local:
        return Identity("local", local.removeprefix("local-"), node)
    pod = env.get("PILOTFISH_POD_NAME", "")
    if pod:
        return Identity("k8s", pod, env.get("PILOTFISH_NODE_NAME") or node)
    return Identity("local", str(os.getpid()), node)


@dataclass(frozen=True)
class PilotConfig:
    """Everything a pilot needs to know besides what Machine/Job Features tell it.

    Times are seconds. ``heartbeat_interval`` None means a third of the lease, so two heartbeats can be
    lost before the lease expires. ``mem_tolerance`` is the fraction above its ``mem`` requirement a payload
    may use before it is killed (measured RSS of its whole process tree fluctuates; a hard edge at the
    exact requirement would kill honest payloads). ``kill_grace`` is the time between SIGTERM and SIGKILL
    of a payload's process group. ``jobstatus_interval`` is the shortest time between two rewrites of
    $JOBSTATUS (a burst of short payloads is published as one state; its values are whole seconds, and
    rewriting its nine files under a lock ten times a second was 5% of a busy pilot); ``command_poll``
    the longest the loop sleeps before asking the observer for operator commands. ``priority_factor`` is
    published in $JOBSTATUS as is (spec 3.9: higher is better, its meaning is the pilot owner's, not
    comparable across users). ``jobstatus_revert_hold`` is how long the other $JOBSTATUS values stay as
    published after ``can_postpone_last_job`` reverts to True (spec 3.8; :mod:`pilot.mjf.jobstatus`).
    ``payload_sandbox`` is how payloads start: "bwrap" (:mod:`pilot.agent.sandbox`) or "none" (unconfined);
    ``payload_shared_paths`` (":"-separated) where a job may ask its sandbox for a path.
    ``output_cap`` bytes of each payload stream's tail are kept in the log directory and shipped to the store
    (``pilotfish logs``); new output of a running payload is shipped at most once per ``log_interval``.
    ``scratch_workdir``: the work directory is the pilot's own scratch (``pilotfish pilot`` without
    ``--workdir``: ``pilotfish-pilot-<pid>`` in the system temp directory), owner-only (0700) while the pilot
    runs and removed, with everything in it, when the pilot ends.
    """

    queue: str
    redis_url: str = LOCAL_REDIS_URL
    vo: str = DEFAULTS.vo
    prefix: str = DEFAULTS.prefix
    workdir: Path = field(default_factory=lambda: Path.cwd() / "pilot-work")
    log_dir: Path | None = None
    jobstatus_dir: Path | None = None
    cores: int | None = None
    mem: int | None = None
    tmp: int | None = None
    lease: float = DEFAULTS.lease_seconds
    heartbeat_interval: float | None = None
    idle_timeout: float = DEFAULTS.pilot_idle_timeout
    stop_margin: float = 0.0
    wall: float | None = None
    max_jobs: int | None = None
    own_machine: bool = False
    output_cap: int = 64 * 1024
    log_interval: float = 1.0
    mem_tolerance: float = 0.10
    mem_sample_interval: float = 0.25
    kill_grace: float = 5.0
    backoff_min: float = 0.05
    backoff_max: float = 2.0
    command_poll: float = 0.5
    jobstatus_interval: float = 0.5
    jobstatus_revert_hold: float = DEFAULT_REVERT_HOLD
    priority_factor: int = 0
    identity: Identity | None = None
    payload_sandbox: str = DEFAULTS.payload_sandbox
    payload_shared_paths: str = DEFAULTS.payload_shared_paths
    scratch_workdir: bool = False

    def __post_init__(self) -> None:
        problems = []
        if not self.queue:
            problems.append("queue must name a catalog queue")
        for name in ("cores", "mem", "tmp", "max_jobs"):
            value = getattr(self, name)
            if value is not None and value < (1 if name in ("cores", "max_jobs") else 0):
                problems.append(
                    f"{name} must be {'positive' if name in ('cores', 'max_jobs') else '>= 0'}, got {value}"
                )
        for name in (
            "lease",
            "idle_timeout",
            "mem_sample_interval",
            "backoff_min",
            "backoff_max",
            "command_poll",
            "log_interval",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("stop_margin", "kill_grace", "mem_tolerance", "jobstatus_interval", "jobstatus_revert_hold"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.heartbeat_interval is not None and not 0 < self.heartbeat_interval < self.lease:
            problems.append(
                f"heartbeat_interval {self.heartbeat_interval} must be positive and below the lease "
                f"{self.lease}, or leases expire between heartbeats"
            )
        if self.payload_sandbox not in SANDBOXES:
            problems.append(f"payload_sandbox must be {' or '.join(SANDBOXES)}, got {self.payload_sandbox!r}")
        if self.output_cap < 0:
            problems.append(f"output_cap must be >= 0, got {self.output_cap}")
        if self.backoff_min > self.backoff_max:
            problems.append(f"backoff_min {self.backoff_min} exceeds backoff_max {self.backoff_max}")
        if problems:
            raise ConfigError("pilot configuration: " + "; ".join(problems))

    @property
    def heartbeat(self) -> float:
        """Seconds between heartbeats (a third of the lease unless set)."""
        return self.heartbeat_interval if self.heartbeat_interval is not None else self.lease / 3

    @property
    def logs(self) -> Path:
        """Where payloads' stdout/stderr tails are kept (they outlive the payload's sandbox)."""
        return self.log_dir if self.log_dir is not None else self.workdir / "logs"

    def who(self) -> Identity:
        return self.identity if self.identity is not None else identity_from_environment()
