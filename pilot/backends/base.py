"""What every batch-system backend offers the site director, and the pieces they share.

A backend turns a :class:`PilotRequest` into a running pilot and reports what became of it. The director
never talks to ``sbatch``/``qsub``/``Popen`` itself, so the same director runs on a laptop (local), a Slurm
cluster or a Grid Engine cluster, and falls back to local when a batch system is not reachable
(:mod:`pilot.backends.factory`).

Shared here: the state vocabulary, the rate-limited status cache (batch systems must not be polled in a
loop: one ``squeue``/``qstat`` per ``poll_interval`` for all pilots), the batch script that wraps a pilot
(it leaves the pilot's exit status in a file so a job that vanished from the batch system can still be told
DONE from FAILED from LOST), the command runner with clear errors, and :func:`submit_rate`.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from taskqueues.errors import BackendError
from taskqueues.shapes import Shape


class PilotState(StrEnum):
    """What became of a submitted pilot.

    ``LOST`` means the pilot did not end by itself: node failure, preemption, a kill by the batch system
    (wall-time limit, memory limit, an operator's ``scancel``/``qdel``) or a signal. ``FAILED`` means the
    pilot itself exited with a non-zero code. ``CANCELLED`` is kept for pilots this backend was asked to
    cancel. ``UNKNOWN`` is never final: ask again later.
    """

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    LOST = "LOST"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({PilotState.DONE, PilotState.FAILED, PilotState.LOST, PilotState.CANCELLED})


@dataclass(frozen=True)
class PilotRequest:
    """One pilot to start: what it runs, the shape it holds, and how the batch system should treat it.

    ``name`` is prefixed by the backend's ``repo_key``. ``start_by`` (unix time) is the start-by date of the
    most urgent job this pilot is meant for; Slurm turns it into ``--nice``, Grid Engine into ``-p``, the
    local backend into its queue order. ``options`` is a ``-b``/``--backend`` style string
    (:mod:`taskqueues.backend_options`) that overrides the configured options for this submission only.
    ``resources`` are passed through (Slurm: partition, qos, gres, features, licenses, reservation, nodes,
    excludes; Grid Engine: ``-l`` resources, ``hard``, ``soft``; local: user-defined resources).
    """

    name: str
    command: Sequence[str]
    shape: Shape
    wall: int
    env: Mapping[str, str] = field(default_factory=dict)
    start_by: float | None = None
    options: str = ""
    resources: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    log_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise BackendError(f"pilot {self.name!r}: empty command")
        if self.wall <= 0:
            raise BackendError(f"pilot {self.name!r}: wall must be a positive number of seconds, got {self.wall}")


@dataclass(frozen=True)
class PilotStatus:
    """The state of one pilot, with the batch system's reason or exit detail and the node it ran on."""

    state: PilotState
    detail: str = ""
    exit_code: int | None = None
    node: str | None = None


@runtime_checkable
class Backend(Protocol):
    """The interface the site director drives. Implemented by local, Slurm and Grid Engine backends."""

    kind: str

    def submit(self, request: PilotRequest) -> str:
        """Submit one pilot; return its batch id. Raises :class:`BackendError` naming the refusal."""
        ...

    def states(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        """The state of each id, from at most one batch-system query per ``poll_interval``."""
        ...

    def cancel(self, ids: Sequence[str]) -> None:
        """Cancel pilots, queued or running. Unknown or finished ids are ignored."""
        ...

    def capacity(self) -> dict[str, int]:
        """What the backend can hold at once (local); empty when the batch system decides (Slurm, SGE)."""
        ...

    def identify(self, batch_id: str) -> dict[str, Any]:
        """What a later director process needs to find this pilot again (kept in its provisioned record):
        the local backend's pid, process start time and host; nothing for a batch system, which answers
        for any id."""
        ...

    def adopt(self, batch_id: str, facts: Mapping[str, Any]) -> PilotStatus:
        """Take over a pilot another process of this backend submitted (an earlier director: killed,
        restarted), from what :meth:`identify` recorded then; answer what is known of it now. UNKNOWN means
        this backend cannot tell (yet): the director then judges by the pilot's heartbeats."""
        ...

    def close(self) -> None:
        """Release what the backend holds in this process (threads); pilots keep running."""
        ...


class BackendCommandError(BackendError):
    """A batch-system command exited non-zero or could not be run; the message quotes it and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str) -> None:
        shown = " ".join(shlex.quote(a) for a in argv[:12]) + (" ..." if len(argv) > 12 else "")
        why = f"exited {returncode}" if returncode is not None else "could not be run"
        super().__init__(f"`{shown}` {why}: {stderr.strip() or '(no message)'}")
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a batch-system command; raise :class:`BackendCommandError` with its stderr when it fails."""
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise BackendCommandError(argv, None, f"{argv[0]} not found ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        raise BackendCommandError(argv, None, f"no answer within {timeout:g} s") from None
    if check and done.returncode != 0:
        raise BackendCommandError(argv, done.returncode, done.stderr)
    return done


def find_binary(name: str, bin_dir: str | None) -> str | None:
    """The path of a batch-system command in ``bin_dir`` (when set) or on ``$PATH``; None when absent."""
    if bin_dir:
        path = Path(bin_dir) / name
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    from shutil import which

    return which(name)


# --- the pilot's batch script ------------------------------------------------------------------------

STATUS_SUFFIX = ".pilotstatus"


def status_file(status_dir: str, batch_id: str) -> Path:
    """Where the batch script of pilot ``batch_id`` leaves its exit status."""
    return Path(status_dir) / f"{batch_id}{STATUS_SUFFIX}"


def pilot_script(request: PilotRequest, *, job_id_var: str, status_dir: str | None) -> str:
    """A POSIX shell batch script that runs the pilot's argv and records how it ended.

    The environment is exported inside the script (not through ``--export``/``-v``, whose comma-separated
    lists cannot carry commas in values). When ``status_dir`` is set, the script writes ``exit N`` or
    ``signal N`` to ``<status_dir>/<batch id>.pilotstatus`` (atomically, through a rename) after the pilot
    ends, and a pilot killed by a signal re-raises it, so the batch system sees the same death. A kill of
    the script itself (``scancel``, ``qdel``, node loss) leaves no file: that is how a vanished job without
    a file is known as LOST. An exit code above 128 is taken as death by signal ``code - 128``, as shells do.
    """
    lines = ["#!/bin/sh", "# Pilotfish pilot: runs the pilot's command and records how it ended."]
    for key, value in sorted(request.env.items()):
        if not key.isidentifier():
            raise BackendError(f"pilot {request.name!r}: environment name {key!r} is not a valid variable name")
        lines.append(f"export {key}={shlex.quote(value)}")
    if request.workdir:
        lines.append(f"cd {shlex.quote(request.workdir)} || exit 125")
    lines.append(" ".join(shlex.quote(arg) for arg in request.command))
    lines.append("rc=$?")
    if status_dir:
        target = f"{shlex.quote(status_dir)}/${{{job_id_var}}}{STATUS_SUFFIX}"
        lines += [
            'if [ "$rc" -gt 128 ]; then how="signal $((rc - 128))"; else how="exit $rc"; fi',
            f'printf "%s\\n" "$how" > {target}.tmp && mv -f {target}.tmp {target}',
        ]
    lines += [
        'if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then kill -s "$((rc - 128))" $$; fi',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def read_status_file(status_dir: str | None, batch_id: str) -> PilotStatus | None:
    """The final status a pilot's batch script left, or None when there is none (yet)."""
    if not status_dir:
        return None
    try:
        text = status_file(status_dir, batch_id).read_text().split()
    except OSError:
        return None
    if len(text) != 2 or not text[1].lstrip("-").isdigit():
        return None
    how, number = text[0], int(text[1])
    if how == "exit":
        if number == 0:
            return PilotStatus(PilotState.DONE, "exit 0 (status file)", 0)
        return PilotStatus(PilotState.FAILED, f"exit {number} (status file)", number)
    return PilotStatus(PilotState.LOST, f"killed by signal {number} (status file)", None)


# --- rate-limited polling --------------------------------------------------------------------------------

Poll = Callable[[Sequence[str]], dict[str, PilotStatus]]


class StatusCache:
    """Answers ``states()`` from at most one batch-system poll per ``poll_interval`` seconds.

    A poll asks about every id the caller names plus every id this backend submitted and has not seen end,
    in one call, so pilots asked about right after are answered from the cache. Between polls: ids seen in
    the last poll get that answer; ids submitted since get QUEUED ("not polled yet"); other ids UNKNOWN.
    Final states that cannot change any more are kept for good and never asked again.
    """

    def __init__(self, poll: Poll, poll_interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._poll = poll
        self.poll_interval = poll_interval
        self._clock = clock
        self._last_poll: float | None = None
        self._last: dict[str, PilotStatus] = {}
        self._final: dict[str, PilotStatus] = {}
        self._live: set[str] = set()
        self.polls = 0

    def submitted(self, batch_id: str) -> None:
        self._live.add(batch_id)

    def forget(self, batch_id: str) -> None:
        self._live.discard(batch_id)

    def settle(self, batch_id: str, status: PilotStatus) -> None:
        """Record a state that can no longer change."""
        self._final[batch_id] = status
        self._live.discard(batch_id)

    def states(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        wanted = [i for i in ids if i not in self._final]
        now = self._clock()
        due = self._last_poll is None or now - self._last_poll >= self.poll_interval
        if wanted and due:
            query = sorted(set(wanted) | self._live)
            self._last = self._poll(query)
            self._last_poll = now
            self.polls += 1
            for batch_id, status in self._last.items():
                if status.state.final:
                    self.settle(batch_id, status)
        answer: dict[str, PilotStatus] = {}
        for batch_id in ids:
            if batch_id in self._final:
                answer[batch_id] = self._final[batch_id]
            elif batch_id in self._last:
                answer[batch_id] = self._last[batch_id]
            elif batch_id in self._live:
                answer[batch_id] = PilotStatus(PilotState.QUEUED, "submitted; not polled yet")
            else:
                answer[batch_id] = PilotStatus(PilotState.UNKNOWN, "not polled yet (poll_interval)")
        return answer


def submit_rate(
    backend: Backend,
    n: int,
    *,
    command: Sequence[str] = ("sleep", "300"),
    shape: Shape | None = None,
    name: str = "bench",
) -> float:
    """Submit ``n`` pilots one after the other, cancel them all, and return submissions per second.

    Only the submissions are timed. The pilots are held back with a far ``start_by`` where the backend
    turns it into a low priority; they are cancelled at once after timing, so the figure measures the
    batch system's submit path (``sbatch``/``qsub`` round trips; for local, enqueueing and spawning).
    """
    if n <= 0:
        raise BackendError(f"submit_rate: n must be positive, got {n}")
    pilot_shape = shape or Shape("bench", cpu=1, mem=64)
    ids: list[str] = []
    started = time.perf_counter()
    try:
        for i in range(n):
            ids.append(
                backend.submit(PilotRequest(name=f"{name}{i}", command=list(command), shape=pilot_shape, wall=600))
            )
        elapsed = time.perf_counter() - started
    finally:
        backend.cancel(ids)
    return n / elapsed if elapsed > 0 else float("inf")
