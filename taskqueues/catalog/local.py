"""The catalog of ``pilotfish run`` when none is given: one queue whose one shape is this whole host."""

from __future__ import annotations

import os
import shutil
import tempfile

from taskqueues.requirements import MAX_CPU, MAX_MEM_MB

__all__ = ["LOCAL_SOURCE", "local_default_text"]

LOCAL_SOURCE = "<local default catalog>"


def local_default_text() -> str:
    """The TOML of one queue, ``local/localhost/local``, whose one shape is this whole host.

    Cores from the CPU affinity mask, memory from sysconf, disk from the free space of the
    temporary directory, all in decimal MB; wall 7 days; cost 0.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10**6
    tmp = shutil.disk_usage(tempfile.gettempdir()).free // 10**6
    text = (
        "[sites.local.ces.localhost.queues.local]\n"
        'batch = "local"\n'
        "[[sites.local.ces.localhost.queues.local.shapes]]\n"
        'name = "host"\n'
        f"cpu = {min(max(cores, 1), MAX_CPU)}\n"
        f"mem = {min(mem, MAX_MEM_MB)}\n"
        f"tmp = {min(tmp, MAX_MEM_MB)}\n"
        f"wall = {7 * 86400}\n"
        "cost = 0.0\n"
    )
    return text
