"""Memory and CPU of each payload's whole process tree, sampled with psutil.

A payload is ``sh -c <command>`` started in a new session, so its session id is the shell's pid and
every process it forks stays in that session unless it calls ``setsid`` itself (a process group is
easier to leave: ``setpgid`` is enough, and shells put every pipeline in its own group). Members of a
session are found by asking each process's session id (``os.getsid``, one cheap system call, no file to
read) and only the matching ones are read through psutil. That also finds daemons re-parented to init,
which a walk of the parent/child tree from the shell would miss.

Memory is the sum of the members' RSS (shared pages are counted once per process: an overestimate for
programs that fork without exec, the same rule batch systems without cgroups apply). CPU time of a live
member includes its reaped children (``children_user``/``children_system``), so summing live members
counts every process once, except orphans reaped by init; the caller combines this with the shell's
``wait4`` rusage at the end, which covers every descendant that was waited for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class TreeSample:
    """One sample of a session: total RSS in bytes, total CPU seconds (user+system), member count."""

    rss: int
    cpu: float
    processes: int


def _cpu_seconds(times: Any) -> float:
    """user + system, with the reaped children's share (psutil's Linux ``pcputimes`` carries both)."""
    return float(
        times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)
    )


def sample_sessions(sessions: set[int]) -> dict[int, TreeSample]:
    """RSS and CPU of every process of each of ``sessions`` (session ids = payload shell pids).

    Sessions with no live member are absent from the result. Processes that vanish while being read
    are skipped: they no longer hold memory.
    """
    if not sessions:
        return {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    count: dict[int, int] = {}
    for pid in psutil.pids():
        try:
            sid = os.getsid(pid)
        except OSError:
            continue
        if sid not in sessions:
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                member_rss = proc.memory_info().rss
                member_cpu = _cpu_seconds(proc.cpu_times())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rss[sid] = rss.get(sid, 0) + member_rss
        cpu[sid] = cpu.get(sid, 0.0) + member_cpu
        count[sid] = count.get(sid, 0) + 1
    return {sid: TreeSample(rss[sid], cpu[sid], count[sid]) for sid in rss}


@dataclass
class Usage:
    """What the pilot tracks of one payload between samples: its peak and its latest CPU total."""

    peak_rss: int = 0
    last_rss: int = 0
    cpu: float = 0.0

    def add(self, sample: TreeSample) -> None:
        self.last_rss = sample.rss
        self.peak_rss = max(self.peak_rss, sample.rss)
        self.cpu = max(self.cpu, sample.cpu)


def over_limit(rss: int, limit_mb: int, tolerance: float) -> bool:
    """True when ``rss`` bytes exceed a limit of ``limit_mb`` MB (10^6 bytes) by more than ``tolerance``.

    A limit of 0 means the job asked for no memory: nothing to enforce.
    """
    return limit_mb > 0 and rss > limit_mb * 1_000_000 * (1.0 + tolerance)


def over_limit_reason(rss: int, limit_mb: int, tolerance: float) -> str:
    """The failure reason an operator reads: ``memory 612 MB over the limit 500 MB (+10%)``."""
    return f"memory {rss / 1_000_000:.0f} MB over the limit {limit_mb} MB (+{tolerance * 100:g}%)"
