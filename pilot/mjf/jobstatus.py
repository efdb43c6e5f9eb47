"""$JOBSTATUS: the pilot's own status for the site, written and read under the ``used_CPU`` lock.

What each file means (the spec's "Pilot status information" and the CHEP 2013 picture it refers to),
for the set R of payloads running now, each with cores c, start s, expected end e and enforced end m:

* ``used_CPU`` = sum of c over R (must not exceed the pilot's ``allocated_CPU``).
* ``last_job_start`` = T, the latest start of any payload this pilot has run (the pilot's start before
  the first one). It may belong to a payload that has ended already.
* ``first_exp_job_end`` = F = min e over R; ``last_exp_job_end`` = L = max e over R;
  ``last_max_job_end`` = max m over R. With nothing running all three are the *idle end*: the time until
  which the idle pilot's values hold (it republishes before then, :mod:`pilot.agent.status`), never
  before "now" (issue 29: an idle pilot that published "now" once kept ends in the past, and the spec's
  readers computed a negative ``remaining_time`` and ``draining_waste``). With no idle end given (a pilot
  that is stopping) they are "now".
* ``add_uncom_time`` = sum over R of c x (T - s): the payload work that would have been lost had the
  pilot been killed at T, just before its latest payload started. This is exactly the term that makes
  the spec's ``kill_waste = add_uncom_time + used_CPU x (now - last_job_start)`` equal the work of every
  running payload, sum c x (now - s).
* ``add_final_exp_waste`` = (allocated_CPU - used_CPU) x (L - F) + sum over R of c x (L - e): if the
  pilot started draining right after its first payload ends, the cores idle now stay idle until L and
  each payload's cores idle from its end to L. With the spec's ``draining_waste = (allocated_CPU -
  used_CPU) x (F - now) + add_final_exp_waste`` this is the whole idle integral from now to L.
* ``can_postpone_last_job`` "True" while the pilot still fetches payloads (the ends above may move
  later), "False" once it is retiring and the ends are final: it takes no more jobs, or it drains towards
  a shutdown time its running payloads cannot all finish before (``Pilot._can_postpone``).
  ``priority_factor``: the pilot's own number.

The hold after a withdrawn drain (spec 3.8: "If the job decides to revert from "False" to "True", it should
not update any of the other values for a significant amount of time"). While ``can_postpone_last_job`` is
"False" the site may take the published ends as final and plan on them: drain the node at
``last_max_job_end``, start another job at ``first_exp_job_end``. When the pilot reverts to "True" (the
shutdown it was draining for is withdrawn, and it fetches jobs again) those ends would otherwise move in the
same write, under a decision the site took from them. So :class:`JobStatusWriter` keeps every other value as
it last published it for ``revert_hold`` seconds after the revert (configurable; 0 turns the hold off), then
publishes them fresh. "False" again during the hold ends it at once (the values are the real, final ones).

Times are integer UNIX seconds (floored), waste integrals integer CPU seconds (rounded). An expected end
is clamped into [now, max(enforced end, now)]: a running payload does not end in the past, nor after its
enforced limit.

Locking. Readers and writers take ``flock`` on the ``used_CPU`` file before touching any file (shared
to read, exclusive to write). Every other file is written to a temporary file and renamed over the old
one, so even a reader that ignores the lock sees whole values and a crash never leaves half a file.
``used_CPU`` itself is the one file that is NOT replaced by rename: the lock lives on its inode, and a
rename would give waiting processes a lock on the old, unlinked inode while new ones lock the new inode
- two holders at once. It is rewritten in place under the exclusive lock: the new bytes are written at
offset 0 and the file is then truncated to their length (so a non-locking reader sees the old value,
the new one, or the new digits followed by a stray newline, never an empty file).
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from taskqueues.errors import PilotfishError

LOCK_FILE = "used_CPU"
#: Seconds the other values stay as published after ``can_postpone_last_job`` reverts to "True".
DEFAULT_REVERT_HOLD = 600.0

JOBSTATUS_KEYS = (
    "used_CPU",
    "last_job_start",
    "first_exp_job_end",
    "last_exp_job_end",
    "last_max_job_end",
    "add_uncom_time",
    "add_final_exp_waste",
    "can_postpone_last_job",
    "priority_factor",
)


class JobStatusError(PilotfishError):
    """A $JOBSTATUS directory cannot be written or holds a file that is missing or malformed."""


class JobStatusLockTimeout(JobStatusError):
    """The ``used_CPU`` lock was not obtained in time (another process holds it)."""


@dataclass(frozen=True)
class RunningPayload:
    """One payload as $JOBSTATUS sees it: cores held, start, expected end and enforced end (UNIX seconds)."""

    cores: int
    start: float
    expected_end: float
    max_end: float


@dataclass(frozen=True)
class JobStatus:
    """The nine $JOBSTATUS values."""

    used_CPU: int
    last_job_start: int
    first_exp_job_end: int
    last_exp_job_end: int
    last_max_job_end: int
    add_uncom_time: int
    add_final_exp_waste: int
    can_postpone_last_job: bool
    priority_factor: int

    def files(self) -> dict[str, str]:
        """File name -> content, as the spec writes them (integers, "True"/"False")."""
        return {
            key: (str(value) if not isinstance(value, bool) else ("True" if value else "False")) + "\n"
            for key, value in asdict(self).items()
        }


def compute_status(
    running: Iterable[RunningPayload],
    *,
    allocated_CPU: int,
    last_job_start: float,
    now: float,
    can_postpone_last_job: bool = True,
    priority_factor: int = 0,
    idle_end: float | None = None,
) -> JobStatus:
    """The $JOBSTATUS values for the payloads running at ``now`` (definitions in the module docstring);
    ``idle_end`` is the idle pilot's end, used when nothing runs (clamped to ``now`` at least)."""
    payloads = list(running)
    used = sum(p.cores for p in payloads)
    if used > allocated_CPU:
        raise JobStatusError(f"$JOBSTATUS: used_CPU {used} exceeds allocated_CPU {allocated_CPU}")
    if any(p.cores <= 0 for p in payloads):
        raise JobStatusError("$JOBSTATUS: a running payload holds no cores")
    latest = max([last_job_start, *(p.start for p in payloads)])
    if not payloads:
        end = math.floor(max(now, now if idle_end is None else idle_end))
        return JobStatus(
            used,
            math.floor(latest),
            end,
            end,
            end,
            0,
            0,
            can_postpone_last_job,
            priority_factor,
        )
    ends = [min(max(p.expected_end, now), max(p.max_end, now)) for p in payloads]
    first, last = min(ends), max(ends)
    uncommitted = sum(p.cores * (latest - p.start) for p in payloads)
    final_waste = (allocated_CPU - used) * (last - first) + sum(
        p.cores * (last - end) for p, end in zip(payloads, ends, strict=True)
    )
    return JobStatus(
        used_CPU=used,
        last_job_start=math.floor(latest),
        first_exp_job_end=math.floor(first),
        last_exp_job_end=math.floor(last),
        last_max_job_end=math.floor(max(max(p.max_end, now) for p in payloads)),
        add_uncom_time=round(uncommitted),
        add_final_exp_waste=round(final_waste),
        can_postpone_last_job=can_postpone_last_job,
        priority_factor=priority_factor,
    )


def _flock(fd: int, operation: int, timeout: float | None, where: Path) -> None:
    if timeout is None:
        fcntl.flock(fd, operation)
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        if time.monotonic() >= deadline:
            raise JobStatusLockTimeout(f"$JOBSTATUS: {where} stayed locked by another process for {timeout:g} s")
        time.sleep(0.01)


@contextmanager
def locked(
    directory: str | os.PathLike[str], *, exclusive: bool, timeout: float | None = None, create: bool = False
) -> Iterator[int]:
    """Hold the ``used_CPU`` lock of ``directory``; yields the open descriptor of ``used_CPU``.

    ``create`` makes the lock file if missing (writers); a reader of a directory without ``used_CPU``
    gets :class:`FileNotFoundError`.
    """
    path = Path(directory) / LOCK_FILE
    fd = os.open(path, (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY, 0o644)
    try:
        _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, timeout, path)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _write_atomically(directory: Path, name: str, content: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        os.chmod(tmp, 0o644)  # the site's services must read it (spec: readable by user and provider)
        os.replace(tmp, directory / name)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_jobstatus(directory: str | os.PathLike[str], status: JobStatus, *, timeout: float | None = None) -> None:
    """Write every file of ``status`` into ``directory`` under the exclusive ``used_CPU`` lock."""
    where = Path(directory)
    files = status.files()
    used = files.pop(LOCK_FILE).encode()
    with locked(where, exclusive=True, timeout=timeout, create=True) as fd:
        for name, content in files.items():
            _write_atomically(where, name, content)
        os.pwrite(fd, used, 0)
        os.ftruncate(fd, len(used))


def read_jobstatus(directory: str | os.PathLike[str], *, timeout: float | None = None) -> JobStatus | None:
    """The values of a $JOBSTATUS directory, read under the shared ``used_CPU`` lock.

    None when no pilot has published yet: no ``used_CPU``, or an empty one (the first writer creates the
    lock file before it can lock it, so a reader may lock it first and find nothing else written). A
    missing or malformed other file raises :class:`JobStatusError` naming it.
    """
    where = Path(directory)
    raw: dict[str, str] = {}
    try:
        with locked(where, exclusive=False, timeout=timeout) as fd:
            raw[LOCK_FILE] = os.pread(fd, 64, 0).decode(errors="replace")
            if not raw[LOCK_FILE]:
                return None
            for name in JOBSTATUS_KEYS[1:]:
                try:
                    raw[name] = (where / name).read_text(errors="replace")
                except FileNotFoundError:
                    raise JobStatusError(f"$JOBSTATUS: {where / name} is missing") from None
    except FileNotFoundError:
        return None
    values: dict[str, int | bool] = {}
    for name, text in raw.items():
        text = text.strip()
        if name == "can_postpone_last_job":
            if text not in ("True", "False"):
                raise JobStatusError(f"$JOBSTATUS: {where / name} holds {text[:20]!r}, not 'True' or 'False'")
            values[name] = text == "True"
            continue
        try:
            values[name] = int(text)
        except ValueError:
            raise JobStatusError(f"$JOBSTATUS: {where / name} holds {text[:20]!r}, not an integer") from None
    return JobStatus(**values)  # type: ignore[arg-type]


class JobStatusWriter:
    """Keeps a $JOBSTATUS directory current: call :meth:`publish` at every payload start and end.

    The directory is the one given (created if needed) or a fresh one under ``workdir``. The writer
    remembers the latest payload start it has seen, since ``last_job_start`` outlives the payload, and
    what it published last, which it keeps for ``revert_hold`` seconds after ``can_postpone_last_job``
    reverts to True (see the module text); ``hold_until`` is then when the hold ends (``clock`` time),
    and the caller publishes again at that time. ``clock`` gives the time when ``publish`` is not told.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        allocated_CPU: int,
        pilot_start: float,
        workdir: str | os.PathLike[str] | None = None,
        priority_factor: int = 0,
        can_postpone_last_job: bool = True,
        lock_timeout: float | None = 30.0,
        revert_hold: float = DEFAULT_REVERT_HOLD,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if directory is None:
            directory = tempfile.mkdtemp(prefix="jobstatus-", dir=workdir)
            os.chmod(directory, 0o755)
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobStatusError(f"$JOBSTATUS: cannot create {self.directory}: {exc.strerror or exc}") from None
        self.allocated_CPU = allocated_CPU
        self.last_job_start = pilot_start
        self.priority_factor = priority_factor
        self.can_postpone_last_job = can_postpone_last_job
        self.lock_timeout = lock_timeout
        if revert_hold < 0:
            raise JobStatusError(f"$JOBSTATUS: revert_hold must be >= 0 seconds, got {revert_hold}")
        self.revert_hold = revert_hold
        self.clock = clock
        self.hold_until: float | None = None
        self.published: JobStatus | None = None

    def publish(
        self,
        running: Iterable[RunningPayload],
        now: float | None = None,
        *,
        idle_end: float | None = None,
        latest_start: float = 0.0,
    ) -> JobStatus:
        """Recompute every value for the payloads running now and rewrite the directory (during the hold
        after a revert to True, with every other value as published before); ``idle_end``: see
        :func:`compute_status`.

        ``latest_start`` is the latest start of any payload, running or not: one that started and ended
        between two publications is never among ``running``, yet ``last_job_start`` is its start.
        """
        payloads = list(running)
        now = self.clock() if now is None else now
        self.last_job_start = max([self.last_job_start, latest_start, *(p.start for p in payloads)])
        status = compute_status(
            payloads,
            allocated_CPU=self.allocated_CPU,
            last_job_start=self.last_job_start,
            now=now,
            can_postpone_last_job=self.can_postpone_last_job,
            priority_factor=self.priority_factor,
            idle_end=idle_end,
        )
        before = self.published
        if not status.can_postpone_last_job:
            self.hold_until = None
        elif before is not None and not before.can_postpone_last_job and self.revert_hold > 0:
            self.hold_until = now + self.revert_hold
        if self.hold_until is not None and now >= self.hold_until:
            self.hold_until = None
        if self.hold_until is not None and before is not None:
            status = replace(before, can_postpone_last_job=True)
        write_jobstatus(self.directory, status, timeout=self.lock_timeout)
        self.published = status
        return status
