"""Where a one-core payload starts: where the kernel places it, or on the pilot's own CPU when that placement
makes the pilot wait.

``os.posix_spawn`` clones with ``CLONE_VFORK``: the pilot's thread sleeps until the child has exec'd, and the
kernel puts a new process on the CPU it finds least loaded at the clone. On a host with a CPU to spare that
is right, and the child runs at once. On a busy one it is rarely the CPU the pilot is about to leave idle
(the pilot runs on it): the child queues behind other work there, or waits for the next load balance (the CPU
the pilot left does not pull it at once, having been idle too short a time), and the pilot waits with it.
Measured on two cores with two CPU hogs beside: the mean spawn took 1.2-1.6 ms, against 0.07-0.09 ms on an
idle host (docs/performance.md, "Where a payload starts").

Started on the pilot's CPU (:func:`spawn_here`), the child runs while the pilot sleeps. But on a host with a
CPU to spare that is worse: after its exec the payload shares the pilot's CPU while another idles until the
next balance (``scripts/model_spawn.py``: 1,300-1,350 payloads a second against 1,870-1,910). So
:class:`Placement` watches how long the kernel's placement makes the pilot wait (the wall time of a spawn,
on the pilot's monotonic clock: the vfork wait is all of it but microseconds) and starts payloads here only
while those waits are long (their moving mean above :data:`SLOW`), trying the kernel's placement again one
spawn in :data:`PROBE` to notice when the host has quietened.

A payload started here inherits the one CPU until the pilot runs again and gives it back the pilot's CPUs
(microseconds on an idle CPU, up to a scheduler slice on a busy one); a process it forks in that moment keeps
that CPU. Only one-core payloads are placed so (:attr:`pilot.agent.payload.Payload.placement`): what they start is
entitled to one core.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable
from typing import cast

#: Seconds: a moving mean of the kernel's spawns above this means its children wait for a CPU. A pilot of two
#: one-core slots on an idle two-core host: 0.15 ms median, 0.57 ms p90, 0.28 ms mean (its child may wait
#: behind the other payload); with two CPU hogs beside, 1.2-1.6 ms mean.
SLOW = 0.0008
#: Each spawn counts at most this long in the mean: a few stray waits (a pilot's first spawns, a tick) do
#: not turn it.
CAP = 3 * SLOW
#: Weight of each measured spawn in the moving mean: about 15 long ones in a row turn it.
WEIGHT = 0.05
#: While payloads start here, one spawn in this many is left to the kernel, and measured: a few hundred
#: spawns after the host quietens, the kernel places them again.
PROBE = 16


def _cpu_getter() -> Callable[[], int] | None:
    """glibc's (or musl's) ``sched_getcpu``: the CPU the calling thread runs on (Python has no call for it
    before 3.14); None where the C library has none."""
    try:
        getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return cast(Callable[[], int], getcpu)


_this_cpu = _cpu_getter()


def spawn_here(spawn: Callable[[], int]) -> int:
    """Run ``spawn`` (an ``os.posix_spawn``; its pid is returned) with the new process started on the CPU this
    thread runs on, then give it and this thread back every CPU they may use (nothing changes for a thread
    allowed one CPU, or where the C library cannot say which CPU it runs on)."""
    allowed = os.sched_getaffinity(0)
    cpu = _this_cpu() if _this_cpu is not None and len(allowed) > 1 else -1
    if cpu not in allowed:
        return spawn()
    try:
        os.sched_setaffinity(0, (cpu,))
    except OSError:  # refused here (a seccomp filter): the kernel places the payload
        return spawn()
    try:
        pid = spawn()
    except BaseException:
        os.sched_setaffinity(0, allowed)
        raise
    with contextlib.suppress(OSError):  # ended (a zombie) already: nothing of it runs any more
        os.sched_setaffinity(pid, allowed)  # the child first: it runs on one CPU until then
    os.sched_setaffinity(0, allowed)
    return pid


class Placement:
    """One pilot's choice of where its one-core payloads start (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.mean = 0.0  # moving mean of the kernel's spawns, seconds
        self.here = False  # starting payloads on the pilot's CPU
        self._since_probe = 0

    def spawn(self, spawn: Callable[[], int]) -> int:
        """Run ``spawn`` where it is best started now; returns its pid."""
        if self.here:
            self._since_probe += 1
            if self._since_probe < PROBE:
                return spawn_here(spawn)
            self._since_probe = 0
        start = self.clock()
        pid = spawn()
        self.mean += WEIGHT * (min(self.clock() - start, CAP) - self.mean)
        self.here = self.mean > SLOW
        return pid
