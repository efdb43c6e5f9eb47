"""Each payload's own Machine/Job Features: a $JOBFEATURES directory, a fresh $TMPDIR, and its environment.

A payload of a multi-job pilot is a job in its own right (spec use case 5: "the pilot reserved the cores
and the user payload needs to know about this"), so it gets its own $JOBFEATURES describing what *it*
holds, not what the pilot holds:

* ``allocated_CPU`` its cores; ``mem_limit_MB`` and ``disk_limit_GB`` what it reserved (the pilot's own
  when it reserved none: the pilot's is the true upper bound);
* ``wall_limit_secs`` the smaller of its own limit and the time to the pilot's end; ``cpu_limit_secs``
  cores x that wall limit (capped by the pilot's CPU limit); the ``_lrms`` forms are real x cpufactor;
* ``jobstart_secs`` the payload's start; ``shutdowntime_job`` the pilot's end: the earliest of the pilot's
  jobstart + wall limit, ``shutdowntime_job`` and ``shutdowntime``, less the pilot's stop margin, so the
  payload is done while the pilot can still report it; ``cpufactor_lrms`` the pilot's.

$MACHINEFEATURES is passed through when the site gave the pilot a local directory (the site keeps it
current). When it gave a URL or nothing, the pilot writes a local copy of the merged machine values for
its payloads and rewrites it on :meth:`PayloadArea.update`.

$JOBSTATUS is NOT passed to payloads: it is the pilot's report to the site, written by the pilot alone
under the ``used_CPU`` lock; a payload that inherited it could overwrite it or hold the lock.

Payload environment, beside the three directories: ``PILOTFISH_CPU`` (cores), ``PILOTFISH_MEM`` (MB),
``PILOTFISH_TMP`` (scratch space in MB, the unit of the ``tmp`` requirement), ``OMP_NUM_THREADS`` (cores).
Both directories are removed when the payload ends, whatever it left in them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from pilot.mjf.features import MACHINE_KEYS, Features, Value, format_value
from taskqueues.errors import PilotfishError


class PayloadAreaError(PilotfishError):
    """A payload's $JOBFEATURES or $TMPDIR could not be created."""


def _write_atomically(directory: Path, name: str, value: Value | None) -> None:
    """Write (or, for None, remove) one feature file so that a reader never sees half a value."""
    target = directory / name
    if value is None:
        target.unlink(missing_ok=True)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write(format_value(value) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def _write_fresh(directory: Path, name: str, value: Value | None) -> None:
    """Write one feature file into a directory nobody reads yet (no temporary file, no rename): the
    payload that will read it does not exist yet, so the atomic dance of updates is not needed."""
    if value is not None:
        with open(directory / name, "w") as handle:
            handle.write(format_value(value) + "\n")


def _remove_tree(path: Path) -> None:
    """Remove ``path`` entirely, also when a payload left read-only directories or files in it."""
    def retry_writable(func: Callable[..., Any], name: str, _exc: object) -> None:
        parent = os.path.dirname(name)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, os.stat(name).st_mode | stat.S_IRWXU)
        func(name)

    if path.exists():
        shutil.rmtree(path, onerror=retry_writable)


class PayloadSandbox:
    """One payload's $JOBFEATURES and $TMPDIR; a context manager that removes both on exit."""

    def __init__(self, area: PayloadArea, root: Path, *, cores: int, mem_MB: int | None,
                 wall_secs: int | None, disk_GB: float | None, start: float) -> None:
        self.area = area
        self.root = root
        self.jobfeatures = root / "jobfeatures"
        self.tmpdir = root / "tmp"
        self.cores = cores
        self.mem_MB = mem_MB
        self.wall_secs = wall_secs
        self.disk_GB = disk_GB
        self.start = start
        self.jobfeatures.mkdir(mode=0o755)
        self.tmpdir.mkdir(mode=0o700)
        for key, value in self.job_values(area.features).items():
            _write_fresh(self.jobfeatures, key, value)

    def job_values(self, features: Features) -> dict[str, Value | None]:
        """The $JOBFEATURES values of this payload under the pilot's current ``features``."""
        factor = features.cpufactor
        pilot_end = self.area.pilot_end(features)
        to_end = None if pilot_end is None else math.floor(pilot_end - self.start)
        walls = [w for w in (self.wall_secs, to_end) if w is not None]
        wall = max(0, min(walls)) if walls else None
        cpu = None if wall is None else self.cores * wall
        if features.job.cpu_limit_secs is not None:
            cpu = features.job.cpu_limit_secs if cpu is None else min(cpu, features.job.cpu_limit_secs)
        mem = self.mem_MB if self.mem_MB is not None else features.job.mem_limit_MB
        disk = self.disk_GB if self.disk_GB is not None else features.job.disk_limit_GB
        return {
            "allocated_CPU": self.cores,
            "mem_limit_MB": mem,
            "wall_limit_secs": wall,
            "wall_limit_secs_lrms": None if wall is None else math.floor(wall * factor),
            "cpu_limit_secs": cpu,
            "cpu_limit_secs_lrms": None if cpu is None else math.floor(cpu * factor),
            "jobstart_secs": math.floor(self.start),
            "disk_limit_GB": disk,
            "shutdowntime_job": None if pilot_end is None else math.floor(pilot_end),
            "cpufactor_lrms": factor,
        }

    def write_jobfeatures(self, features: Features) -> None:
        """(Re)write every file of this payload's $JOBFEATURES."""
        for key, value in self.job_values(features).items():
            _write_atomically(self.jobfeatures, key, value)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for the payload's subprocess: ``base`` (default: this process's) plus its MJF."""
        env = dict(os.environ if base is None else base)
        env.pop("JOBSTATUS", None)
        values = self.job_values(self.area.features)
        env["MACHINEFEATURES"] = os.fspath(self.area.machinefeatures_dir)
        env["JOBFEATURES"] = os.fspath(self.jobfeatures)
        env["TMPDIR"] = os.fspath(self.tmpdir)
        env["PILOTFISH_CPU"] = str(self.cores)
        env["OMP_NUM_THREADS"] = str(self.cores)
        if values["mem_limit_MB"] is not None:
            env["PILOTFISH_MEM"] = format_value(values["mem_limit_MB"])
        if values["disk_limit_GB"] is not None:
            env["PILOTFISH_TMP"] = str(math.floor(float(values["disk_limit_GB"]) * 1000))
        return env

    def cleanup(self) -> None:
        """Remove the payload's $TMPDIR and $JOBFEATURES (idempotent)."""
        self.area._forget(self)
        _remove_tree(self.root)

    def __enter__(self) -> PayloadSandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class PayloadArea:
    """The pilot's directory of payload sandboxes and, when needed, its local $MACHINEFEATURES copy."""

    def __init__(self, workdir: str | os.PathLike[str], features: Features, *,
                 stop_margin: float = 0.0) -> None:
        self.workdir = Path(workdir)
        self.stop_margin = stop_margin
        self.features = features
        self._live: list[PayloadSandbox] = []
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PayloadAreaError(f"payload area {self.workdir}: {exc.strerror or exc}") from None
        given = features.machinefeatures
        self._copied = not (given is not None and given.startswith("/") and os.path.isdir(given))
        self.machinefeatures_dir = self.workdir / "machinefeatures" if self._copied else Path(given or "/")
        if self._copied:
            self.machinefeatures_dir.mkdir(mode=0o755, exist_ok=True)
            self._write_machinefeatures()

    def pilot_end(self, features: Features) -> float | None:
        """When payloads must be done: the pilot's end less its stop margin (None if unbounded)."""
        end = features.end_time()
        return None if end is None else end - self.stop_margin

    def _write_machinefeatures(self) -> None:
        for key in MACHINE_KEYS:
            _write_atomically(self.machinefeatures_dir, key, self.features.get(key))

    def update(self, features: Features) -> None:
        """New pilot features (after ``FeatureReader.refresh``): rewrite the copy and every live payload."""
        self.features = features
        if self._copied:
            self._write_machinefeatures()
        for sandbox in list(self._live):
            sandbox.write_jobfeatures(features)

    def payload(self, payload_id: str, *, cores: int, mem_MB: int | None = None, wall_secs: int | None = None,
                disk_GB: float | None = None, start: float | None = None) -> PayloadSandbox:
        """Create the $JOBFEATURES directory and empty $TMPDIR of one payload (a context manager)."""
        if cores <= 0:
            raise PayloadAreaError(f"payload {payload_id!r}: needs at least one core, got {cores}")
        name = _SAFE.sub("_", payload_id)[:60] or "payload"
        root: Path | None = None
        try:
            root = Path(tempfile.mkdtemp(prefix=f"payload-{name}-", dir=self.workdir))
            os.chmod(root, 0o755)
            sandbox = PayloadSandbox(self, root, cores=cores, mem_MB=mem_MB, wall_secs=wall_secs,
                                     disk_GB=disk_GB, start=time.time() if start is None else start)
        except OSError as exc:
            if root is not None:
                _remove_tree(root)
            raise PayloadAreaError(f"payload {payload_id!r}: cannot create its directories under "
                                   f"{self.workdir}: {exc.strerror or exc}") from None
        self._live.append(sandbox)
        return sandbox

    def _forget(self, sandbox: PayloadSandbox) -> None:
        if sandbox in self._live:
            self._live.remove(sandbox)

    def close(self) -> None:
        """Remove every remaining payload sandbox and the local $MACHINEFEATURES copy."""
        for sandbox in list(self._live):
            sandbox.cleanup()
        if self._copied:
            _remove_tree(self.machinefeatures_dir)
