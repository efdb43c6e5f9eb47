"""The guardian: kills the pilot's payloads when the pilot dies, even by SIGKILL.

A payload runs in its own session, so nothing ties it to the pilot: if the pilot is killed with SIGKILL
(or by the OOM killer) its payloads would run on as orphans beside the attempts the reaper requeues. The
guardian is one small process per pilot, started with the read end of a pipe whose write end only the
pilot holds. The pilot writes ``+<pgid>`` when a payload starts and ``-<pgid>`` when it has reaped it.
When the pipe hangs up, the pilot is gone — the kernel closes the write end however the pilot died —
and the guardian SIGKILLs every payload group still listed, then exits. A pilot working in a scratch
directory of its own (``pilotfish pilot`` without ``--workdir``) names it to the guardian, which removes it
after the kill unless the pilot said ``=`` first (it ends normally and removes it itself, later in its
teardown): a pilot killed by SIGKILL, or by its launcher's grace running out under load, leaves no
directory behind.

The guardian does not wait for the lines: it waits for the hang-up only (``poll`` with no event asked
for reports nothing else) and reads what accumulated every ``drain`` seconds, so a pilot running
thousands of short payloads a second wakes nobody when it writes (a wake-up per line cost the pilot more
than the line). The pipe is enlarged so that it never fills between two reads.

This replaces a parent-death signal per payload (``setpriv --pdeathsig``, one more exec for every
payload: it doubled the CPU cost of starting a short payload) and is stronger: it kills the payload's
whole process group, not only its shell. A payload started between its spawn and the ``+`` line would
escape (microseconds on a quiet host; a pilot descheduled right after the spawn at load average 10 left
that window open long enough for a SIGKILL, 1 test run in 5), and so would a process that left its group
on purpose.

Run as ``python -m pilot.agent.guardian FD``, in a session of its own so that whoever kills the pilot's
process group does not kill it too; it ignores SIGINT and SIGTERM (sent to every process of a batch job,
they are the pilot's to handle: it then stops its payloads itself and closes the pipe, or dies and the
guardian does it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from taskqueues.credentials import seal
from taskqueues.errors import PilotfishError

#: Seconds between two reads of the pilot's lines; bytes of pipe asked for (the pipe must hold what the
#: pilot writes in that time: ~8 bytes per payload start or end).
DRAIN = 0.2
PIPE_SIZE = 1 << 20


class GuardianError(PilotfishError):
    """The guardian process could not be started."""


class Guardian:
    """The pilot's end of the guardian: start it, then tell it about each payload group.

    It remembers the groups it was told about, so that a guardian killed on its own is replaced by
    :meth:`revive` with one that watches the same payloads.
    """

    def __init__(self, scratch: Path | None = None) -> None:
        self._live: set[int] = set()
        self._scratch = [os.fspath(scratch)] if scratch is not None else []
        self._start()

    def _start(self) -> None:
        read, self._write = os.pipe2(os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # a larger pipe where the system allows it (1 MB by default)
            fcntl.fcntl(self._write, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        # The groups still live (a guardian replaced by revive) are in the pipe before the new guardian
        # exists: a pilot killed as soon as the process is there still has them killed (a few bytes each,
        # one per payload, far below the pipe's size).
        for pgid in sorted(self._live):
            self._send(f"+{pgid}\n")
        try:
            # Its own session: a batch system or a local backend that kills the pilot's process group
            # must not kill the guardian with it (the payloads, in sessions of their own, would live on).
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pilot.agent.guardian", str(read), *self._scratch],
                pass_fds=(read,),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(self._write)
            raise GuardianError(f"cannot start the payload guardian: {exc.strerror or exc}") from None
        finally:
            os.close(read)

    def started(self, pgid: int) -> None:
        self._live.add(pgid)
        self._send(f"+{pgid}\n")

    def reaped(self, pgid: int) -> None:
        self._live.discard(pgid)
        self._send(f"-{pgid}\n")

    def revive(self) -> bool:
        """If the guardian process died (killed on its own), start a new one watching every payload group
        still live; True when it had to."""
        if self._write < 0 or self.process.poll() is None:
            return False
        os.close(self._write)
        self._start()
        return True

    def _send(self, line: str) -> None:
        # A few bytes: far below PIPE_BUF, so a write is atomic; it blocks only if the guardian fell a whole
        # pipe behind (it reads every DRAIN seconds).
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write, line.encode())

    def close(self) -> None:
        """The pilot ends normally (its payloads already stopped): the guardian exits with nothing to kill,
        leaving the scratch directory to the pilot's teardown."""
        if self._write >= 0:
            self._send("=\n")
            os.close(self._write)
            self._write = -1
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


def watch(fd: int, drain: float = DRAIN) -> tuple[set[int], bool]:
    """Follow the pilot's lines until it hangs up; returns the payload groups still alive then, and whether
    the pilot ended normally (its ``=`` line)."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, 0)  # no event asked for: only the hang-up (or an error) is reported
    live: set[int] = set()
    normal = False
    pending = b""
    while True:
        hung_up = poller.poll(drain * 1000)
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if line[:1] == b"+":
                    live.add(int(line[1:]))
                elif line[:1] == b"-":
                    live.discard(int(line[1:]))
                elif line == b"=":
                    normal = True
        if hung_up:
            return live, normal


def main(argv: list[str]) -> int:
    seal()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    live, normal = watch(int(argv[0]))
    for pgid in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    if len(argv) > 1 and not normal:
        from pilot.mjf.payload import remove_tree  # only now: the guardian of every pilot starts light

        with contextlib.suppress(OSError):
            remove_tree(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
