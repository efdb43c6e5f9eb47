"""One payload: ``sh -c <command>`` in its own session, its output tails, its end and its result.

The pilot's loop owns the waiting (one selector for every payload); this module owns everything about
a single payload's process:

* Start: ``sh -c`` with the job's command, ``start_new_session`` (so the whole tree can be signalled and
  measured as one session), the cwd a fresh work directory inside the payload's sandbox, the sandbox's
  environment (own $JOBFEATURES, $TMPDIR, ``PILOTFISH_PILOT`` the pilot's name, ...) plus
  ``PILOTFISH_JOB_ID``, ``PILOTFISH_ATTEMPT`` and ``PILOTFISH_OUTPUTS``. stdout and stderr are pipes the
  loop reads, keeping only the last ``output_cap`` bytes of each, so a payload that prints gigabytes cannot
  fill the pilot's disk.
* End: noticed through a pidfd (Linux >= 5.3: readable the moment the process exits), or, without
  pidfds, on SIGCHLD. The shell is left a zombie while what remains of its session is killed, so its
  pid (the session and group id) cannot be reused by an unrelated process while we signal it; then it is
  reaped with ``wait4``, whose rusage gives the CPU time of every descendant that was waited for.
* Result: exit code or signal, wall and CPU time, peak memory, and after a success the ``KEY=VALUE``
  lines of the outputs file, numbers as numbers.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pilot.agent import launch
from pilot.agent.guardian import Guardian
from pilot.agent.memory import Usage
from pilot.agent.placement import Placement
from pilot.agent.sandbox import Sandbox, payload_members, reap_adopted
from pilot.mjf.payload import PayloadSandbox
from taskqueues.errors import PilotfishError
from taskqueues.store import Job, RunResult

log = logging.getLogger("pilot.agent")

# The pilot's guardian (pilot.agent.guardian) kills a payload's whole group if the pilot dies without
# stopping it, so an orphaned attempt cannot go on after its job was requeued.

_SIGNALS_TO_RESET = (signal.SIGPIPE, signal.SIGXFSZ)  # Python ignores them; an ignored signal stays so across exec


def spawn_in(
    cwd: str | os.PathLike[str],
    path: str,
    argv: list[str],
    env: dict[str, str],
    *,
    stdout: int | None,
    stderr: int | None,
    placement: Placement | None = None,
) -> int:
    """Start the program ``path`` with ``argv`` in a new session, working directory ``cwd``, stdin from
    /dev/null and stdout/stderr on the given descriptors (None: /dev/null); returns its pid (a relative
    ``path`` is relative to ``cwd``). ``placement``: where a one-core payload starts (:mod:`pilot.agent.placement`).

    ``os.posix_spawn`` (a vfork-like clone in glibc) takes half the time ``subprocess.Popen`` takes per
    start, and a short payload's start is the pilot's largest cost. It has no working-directory
    action before Python 3.13, so the pilot's own working directory is switched around the call (the
    child inherits it) and restored from a descriptor of the previous one: the pilot's other threads
    (observers) must not use relative paths. Descriptors Python opened are close-on-exec (PEP 446), so
    the payload inherits only the three it is given.
    """
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    for target, fd in ((1, stdout), (2, stderr)):
        actions.append(
            (os.POSIX_SPAWN_DUP2, fd, target)
            if fd is not None
            else (os.POSIX_SPAWN_OPEN, target, os.devnull, os.O_WRONLY, 0)
        )

    def spawn() -> int:
        return os.posix_spawn(path, argv, env, file_actions=actions, setsid=True, setsigdef=_SIGNALS_TO_RESET)

    home = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chdir(cwd)
        try:
            return placement.spawn(spawn) if placement is not None else spawn()
        finally:
            os.fchdir(home)
    finally:
        os.close(home)


#: How the pilot reports a payload it stopped: ``fail`` (the job's end), ``requeue`` (not the job's
#: fault: give it back at once), ``none`` (the job is no longer ours: say nothing).
Report = Literal["fail", "requeue", "none"]


class PayloadError(PilotfishError):
    """A payload's process could not be started."""


class JobRefused(PayloadError):
    """The job itself cannot be run as stored (a poisoned record, a sandbox requirement this node cannot
    grant): the pilot fails that job with the reason and goes on."""


def job_problem(job: Job) -> str | None:
    """What in a matched job's record makes it impossible to run, or None: the pilot fails such a job with
    this reason instead of dying of it (a NUL byte, text that is not UTF-8, a value of the wrong type)."""
    if job.problem:
        return job.problem
    if not isinstance(job.command, str) or not job.command:
        return f"its command is not a non-empty string: {type(job.command).__name__}"
    if "\0" in job.command:
        return "its command holds a NUL byte"
    try:
        job.command.encode()
    except UnicodeEncodeError:
        return "its command is not valid UTF-8"
    if not isinstance(job.requirements, dict):
        return f"its requirements are not a mapping: {type(job.requirements).__name__}"
    for name in ("cpu", "mem", "tmp", "wall"):
        value = job.requirements.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"its requirement {name} is not a whole number >= 0: {value!r:.80}"
    if job.cpu < 1:
        return "its requirement cpu is below 1"
    return None


@dataclass(frozen=True)
class Stop:
    """Why the pilot stopped a payload, and how it must be reported."""

    reason: str
    report: Report


class OutputTail:
    """The last ``cap`` bytes of a stream, and how many bytes came before them."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.shipped = 0  # of ``total``, how many bytes the store has been sent (pilot.agent.shipping)
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        if len(self._buf) > 2 * self.cap:  # trim rarely: amortised O(1) per byte
            del self._buf[: len(self._buf) - self.cap]

    @property
    def data(self) -> bytes:
        return bytes(self._buf[-self.cap :]) if self.cap else b""

    @property
    def dropped(self) -> int:
        return self.total - len(self.data)


_INT = re.compile(r"[+-]?\d+")


def parse_value(text: str) -> Any:
    """An outputs value: an integer or a finite float when it reads as one, else the text itself."""
    if _INT.fullmatch(text):
        return int(text)
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def parse_outputs(text: str, where: str = "outputs") -> dict[str, Any]:
    """``KEY=VALUE`` lines (blank lines and ``#`` comments ignored; a later key wins) as a dictionary.

    A line without ``=`` or with an empty key is skipped with a warning naming the line, rather than
    failing a payload that did its work.
    """
    outputs: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            log.warning("%s line %d: %r is not KEY=VALUE; ignored", where, number, line[:80])
            continue
        outputs[key] = parse_value(value.strip())
    return outputs


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for ``pid``, or None where the kernel (< 5.3) or Python has none: SIGCHLD then tells us."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            return None
        raise
    return fd


def pidfds_supported() -> bool:
    """Whether this kernel and Python give pidfds (else the pilot listens to SIGCHLD)."""
    fd = _pidfd_open(os.getpid())
    if fd is None:
        return False
    os.close(fd)
    return True


_own_peak = 0  # the pilot's own peak RSS (bytes) as last read: it only grows


def _above_own_peak(maxrss: int) -> bool:
    """Whether ``maxrss`` (bytes) is above the pilot's own peak RSS. The peak only grows, so it is read again
    only for a value above the one kept: the verdict is the one a fresh read gives, and a payload that
    carries exactly the pilot's peak (each one does: see :meth:`Payload.reap`) costs no system call (under
    load, ``getrusage`` of the pilot was 8% of its time, py-spy)."""
    global _own_peak
    if maxrss <= _own_peak:
        return False
    _own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return maxrss > _own_peak


class Payload:
    """The process of one job's attempt, from spawn to :class:`RunResult`."""

    def __init__(
        self,
        job: Job,
        sandbox: PayloadSandbox,
        *,
        log_dir: Path,
        output_cap: int,
        guardian: Guardian | None = None,
        confinement: Sandbox | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.job = job
        #: What it holds while it runs: cores, MB of memory, MB of scratch (``Job``'s are read at each call)
        self.need = (job.cpu, job.mem, job.tmp)
        #: Where it starts, for a one-core payload: for a moment on one CPU (and a process forked then kept
        #: on it) is within what it asked for. A wider one is placed by the kernel.
        self.placement = placement if self.need[0] == 1 else None
        self.guardian = guardian
        self.confinement = confinement if confinement is not None and confinement.confined else None
        self.sandbox = sandbox
        self.log_dir = log_dir
        self.output_cap = output_cap
        self.workdir = sandbox.workdir
        self.outputs_file = sandbox.outputs
        self.tails: dict[str, OutputTail] = {}  # "out" / "err" -> its tail
        self._fds: dict[int, str] = {}  # open read ends -> stream name
        self._pid: int | None = None
        self.pidfd: int | None = None
        self.usage = Usage()
        self.stop: Stop | None = None
        self.kill_at: float | None = None  # monotonic time to send SIGKILL after SIGTERM
        self.start_wall = 0.0
        self.start_mono = 0.0
        self.end_mono: float | None = None
        self.status: int | None = None
        self.rusage_cpu = 0.0
        self.rusage_maxrss = 0

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def pid(self) -> int:
        assert self._pid is not None, "payload not started"
        return self._pid

    @property
    def ended(self) -> bool:
        return self.status is not None

    def argv(self, env: dict[str, str]) -> tuple[str, list[str]]:
        """The file to exec and its argv: the command's own program or ``sh -c <command>``
        (:mod:`pilot.agent.launch`), or ``bwrap ... sh -c <command>`` when the pilot has a sandbox; raises
        :class:`JobRefused` for a job whose sandbox requirements cannot be granted here."""
        if self.confinement is None:
            return launch.argv(self.job.command, env)
        try:
            argv = self.confinement.argv(
                self.job.command,
                slot=self.sandbox.root,
                workdir=self.workdir,
                machinefeatures=self.sandbox.area.machinefeatures_dir,
                requirements=self.job.requirements,
            )
        except ValueError as exc:
            raise JobRefused(f"job {self.job.id}: {exc}") from None
        return argv[0], argv

    def spawn(self, env: dict[str, str]) -> None:
        """Start the payload; raises :class:`PayloadError` naming the job when it cannot start
        (:class:`JobRefused` when the job's own record is the cause)."""
        env = {
            **env,
            "PILOTFISH_JOB_ID": self.job.id,
            "PILOTFISH_ATTEMPT": str(self.job.attempt),
            "PILOTFISH_OUTPUTS": os.fspath(self.outputs_file),
        }
        pipes: list[tuple[int, int]] = []
        try:
            path, argv = self.argv(env)
            if self.output_cap > 0:
                pipes = [os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC)]
            self.start_wall, self.start_mono = time.time(), time.monotonic()
            self._pid = self._start(path, argv, env, *((pipes[0][1], pipes[1][1]) if pipes else (None, None)))
        except (OSError, ValueError, TypeError) as exc:
            for read, write in pipes:
                os.close(read)
                os.close(write)
            if not isinstance(exc, OSError):  # a NUL byte or a wrong type in what the job gave
                raise JobRefused(f"job {self.job.id}: its payload cannot be started as stored: {exc}") from None
            raise PayloadError(f"job {self.job.id}: cannot start its payload: {exc.strerror or exc}") from None
        for (read, write), name in zip(pipes, ("out", "err"), strict=False):  # no pipes when output_cap is 0
            os.close(write)
            os.set_blocking(read, False)
            self.tails[name] = OutputTail(self.output_cap)
            self._fds[read] = name
        if self.guardian is not None:
            self.guardian.started(self._pid)
        self.pidfd = _pidfd_open(self._pid)

    def _start(self, path: str, argv: list[str], env: dict[str, str], stdout: int | None, stderr: int | None) -> int:
        try:
            return spawn_in(self.workdir, path, argv, env, stdout=stdout, stderr=stderr, placement=self.placement)
        except OSError:
            shell = [*launch.SHELL, self.job.command]
            if self.confinement is not None or argv == shell:
                raise
        # The kernel refused the program the shell would have exec'd (a script without "#!", a file gone or
        # made unexecutable since it was found): the shell runs it, or says why not, as it would have.
        return spawn_in(self.workdir, shell[0], shell, env, stdout=stdout, stderr=stderr, placement=self.placement)

    # -- output ------------------------------------------------------------------------------------

    def read(self, fd: int, unwatch: Callable[[int], object] | None = None) -> bool:
        """Read what is available on one output pipe; False at end of file, where the fd is closed after
        ``unwatch(fd)`` (the caller's selector must forget it first: epoll keeps reporting a closed fd
        whose pipe another process still holds for a moment, e.g. a payload being spawned)."""
        tail = self.tails[self._fds[fd]]
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not data:
                if unwatch is not None:
                    unwatch(fd)
                self._close_pipe(fd)
                return False
            tail.feed(data)
            if len(data) < 65536:
                return True

    def _close_pipe(self, fd: int) -> None:
        if fd in self._fds:
            os.close(fd)
            del self._fds[fd]

    @property
    def open_pipes(self) -> list[int]:
        return list(self._fds)

    # -- signals and the end -----------------------------------------------------------------------

    def signal(self, sig: int) -> None:
        """Signal the payload's whole session (its process group; the shell, or bwrap, is its leader).

        Only ever called while the leader is alive or a zombie, so its pid cannot have been reused. In a
        sandbox, a signal other than SIGKILL goes to the payload's own processes only: bwrap dies of
        SIGTERM at once and its sandbox with it, which would leave the payload no grace to stop.
        """
        if self._pid is None or self.ended:
            return
        if self.confinement is not None and sig != signal.SIGKILL:
            for pid in payload_members(self._pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, sig)

    def terminate(self, stop: Stop, grace: float) -> None:
        """SIGTERM now and SIGKILL after ``grace`` seconds; the first reason given is the one reported."""
        if self.stop is None:
            self.stop = stop
        if self.kill_at is None:
            self.signal(signal.SIGTERM)
            self.kill_at = time.monotonic() + grace

    def has_exited(self) -> bool:
        """Whether the shell has exited, without reaping it (for the SIGCHLD fallback)."""
        if self._pid is None or self.ended:
            return self.ended
        try:
            info = os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def reap(self) -> None:
        """The shell has exited: kill what is left of its session, reap it, collect the rest of its output."""
        assert self._pid is not None
        self.end_mono = time.monotonic()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, signal.SIGKILL)  # leftovers (background jobs) die with the payload
        if self.guardian is not None:  # before the shell's pid is reaped and free for reuse
            self.guardian.reaped(self._pid)
        while True:
            try:
                _, status, rusage = os.wait4(self._pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped elsewhere: nothing to measure
                status, rusage = 255 << 8, None
                break
        self.status = self._unwrapped(status)
        if rusage is not None:
            self.rusage_cpu = rusage.ru_utime + rusage.ru_stime
            if self.confinement is not None:  # the sandbox's init, if bwrap exited before waiting for it
                self.rusage_cpu += reap_adopted(self._pid)
            # The shell was forked from the pilot, and Linux carries the pre-exec image's high-water mark
            # into ru_maxrss: a value up to the pilot's own peak may be the pilot's, not the payload's.
            # Above it, it can only be a payload process's (a lower bound of the tree's peak).
            maxrss = rusage.ru_maxrss * 1024
            if _above_own_peak(maxrss):
                self.rusage_maxrss = maxrss
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for fd in self.open_pipes:  # whatever the shell wrote before exiting is in the pipe now
            if self.read(fd):
                self._close_pipe(fd)  # a process outside the session still holds it: stop listening

    def _unwrapped(self, status: int) -> int:
        """The wait status of the payload itself: bwrap's init reports a payload killed by signal N as exit
        code 128+N, reported here as the signal, as for an unconfined payload (a shell that exits 128+N
        itself is told apart by no one)."""
        if self.confinement is not None and os.WIFEXITED(status) and 128 < os.WEXITSTATUS(status) <= 128 + 64:
            return os.WEXITSTATUS(status) - 128
        return status

    @property
    def exit_code(self) -> int | None:
        """The payload's exit code (its shell's or its program's), or None when a signal ended it."""
        if self.status is None or not os.WIFEXITED(self.status):
            return None
        return os.WEXITSTATUS(self.status)

    @property
    def killed_from_outside(self) -> bool:
        """Ended by SIGTERM/SIGINT/SIGHUP/SIGKILL that the pilot did not send: a batch system signalling every
        process of the job (scancel, qdel, preemption) often reaches the payload before the pilot, and a
        kill -9 by an operator or the node's OOM killer is no verdict on the job either. It is given back
        (requeued); its retry limit still ends a job that every attempt gets killed."""
        if self.stop is not None or self.status is None:
            return False
        outside = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL}
        if os.WIFSIGNALED(self.status):
            return os.WTERMSIG(self.status) in outside
        return os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) - 128 in outside

    def log_path(self, stream: str) -> Path:
        """The file that keeps ``stream``'s ("out" or "err") tail once the payload ended."""
        return self.log_dir / f"{self.job.id}.{self.job.attempt}.{stream}"

    def _log_files(self) -> dict[str, Path]:
        """Write the output tails under the log dir (only non-empty ones); returns stream -> path."""
        paths: dict[str, Path] = {}
        for stream, tail in self.tails.items():
            if not tail.total:
                continue
            path = self.log_path(stream)
            try:
                with open(path, "wb") as handle:
                    if tail.dropped:
                        handle.write(f"[pilotfish: {tail.dropped} earlier bytes dropped]\n".encode())
                    handle.write(tail.data)
            except OSError as exc:
                log.warning("job %s: cannot keep its std%s in %s: %s", self.job.id, stream, path, exc)
                continue
            paths[stream] = path
        return paths

    def result(self) -> RunResult:
        """What to report, once reaped: exit code or signal, times, peak memory, outputs on success."""
        assert self.status is not None and self.end_mono is not None, "payload not reaped"
        logs = self._log_files()
        wall = self.end_mono - self.start_mono
        cpu = max(self.rusage_cpu, self.usage.cpu)
        peak = max(self.usage.peak_rss, self.rusage_maxrss) / 1_000_000
        code = self.exit_code
        outputs: dict[str, Any] = {}
        if self.stop is not None:
            reason = self.stop.reason
        elif code is None:
            number = os.WTERMSIG(self.status)
            reason = f"killed by signal {number} ({_signal_name(number)})"
        elif code != 0:
            reason = f"exit code {code}"
        else:
            reason = ""
            try:
                outputs = parse_outputs(self.outputs_file.read_text(errors="replace"), f"job {self.job.id} outputs")
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("job %s: cannot read its outputs file: %s", self.job.id, exc)
        if reason and "err" in logs:
            reason += f" (stderr: {logs['err']})"
        return RunResult(exit_code=code, wall=wall, cpu_time=cpu, peak_mem=peak, outputs=outputs, reason=reason)

    def close(self) -> None:
        """Release file descriptors (idempotent); the sandbox is removed by its owner."""
        for fd in self.open_pipes:
            self._close_pipe(fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
