"""Each payload's own Machine/Job Features: a $JOBFEATURES directory, a fresh $TMPDIR, and its environment.

A payload of a multi-job pilot is a job in its own right (spec use case 5: "the pilot reserved the cores
and the user payload needs to know about this"), so it gets its own $JOBFEATURES describing what *it*
holds, not what the pilot holds:

* ``allocated_CPU`` its cores; ``mem_limit_MB`` and ``disk_limit_GB`` what it reserved (the pilot's own
  when it reserved none: the pilot's is the true upper bound);
* ``wall_limit_secs`` (real seconds) the smaller of its own limit and the time to the pilot's end. Its own
  limit is the job's ``wall`` requirement, which is in normalised seconds: the spec's
  ``wall_limit_secs_lrms`` exactly, and ``wall_limit_secs`` = that / cpufactor (the spec: "divide by
  cpufactor_lrms to retrieve the real time seconds"). ``cpu_limit_secs`` cores x the real wall limit
  (capped by the pilot's CPU limit); the ``_lrms`` forms are real x cpufactor;
* ``jobstart_secs`` the payload's start; ``shutdowntime_job`` the pilot's end: the earliest of the pilot's
  jobstart + wall limit, ``shutdowntime_job`` and ``shutdowntime``, less the pilot's stop margin, so the
  payload is done while the pilot can still report it; ``cpufactor_lrms`` the pilot's.

$MACHINEFEATURES is passed through when the site gave the pilot a local directory (the site keeps it
current). When it gave a URL or nothing, the pilot writes a local copy of the merged machine values for
its payloads and rewrites it on :meth:`PayloadArea.update`.

$JOBSTATUS is NOT passed to payloads: it is the pilot's report to the site, written by the pilot alone
under the ``used_CPU`` lock; a payload that inherited it could overwrite it or hold the lock.

The pilot's environment reaches a payload without credentials, ``PILOTFISH_*`` settings and deployment
paths (:func:`payload_environ`). Payload environment, beside the three directories: ``PILOTFISH_CPU``
(cores), ``PILOTFISH_MEM`` (MB), ``PILOTFISH_TMP`` (scratch space in MB, the unit of the ``tmp``
requirement), ``OMP_NUM_THREADS`` (cores).
Each payload gets a slot of the pilot's work area (see :class:`PayloadSandbox`): its $TMPDIR and work
directory are empty when it starts and emptied when it ends, whatever it left in them; the slots are
removed when the pilot ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from pilot.mjf.features import MACHINE_KEYS, Features, Value, format_value
from pilot.mjf.formulas import denormalise, normalise
from taskqueues.errors import PilotfishError
from taskqueues.store import scrubbed

#: Variables of the pilot's environment that name deployment paths: never passed to a payload (with every
#: ``PILOTFISH_*`` setting, the state directory's among them).
DEPLOYMENT_VARIABLES = frozenset({"PWD", "OLDPWD", "CELERY_CONFIG_MODULE", "FLOWER_BASIC_AUTH", "JOBSTATUS"})


def payload_environ(env: Mapping[str, str]) -> dict[str, str]:
    """The base of a payload's environment: ``env`` without credentials, ``PILOTFISH_*`` settings (state
    directory, catalog, store...) and deployment paths; each payload then gets its own ``PILOTFISH_*``."""
    return {
        name: value
        for name, value in scrubbed(env).items()
        if not name.startswith("PILOTFISH_") and name not in DEPLOYMENT_VARIABLES
    }


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


def _whole(seconds: float | None) -> int | None:
    """Whole seconds for a limit file, floored; a value a float conversion left a hair below a whole number
    (5400 / 1.5 * 1.5) counts as that number."""
    return None if seconds is None else math.floor(round(seconds, 6))


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` (a file or a whole tree), also when a payload left read-only directories in it."""

    def retry_writable(func: Callable[..., Any], name: str, _exc: object) -> None:
        parent = os.path.dirname(name)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, os.stat(name).st_mode | stat.S_IRWXU)
        func(name)

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=retry_writable)
    elif os.path.lexists(path):
        os.unlink(path)


def _identity(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """What changes when anyone rewrites, replaces or touches a file: inode, size, modification time."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


#: The modification time (ns) an emptied slot directory is given: long past, so any later change of its
#: entries (stamped with the current time) shows (:meth:`PayloadSandbox.reset`).
CLEAN_MTIME_NS = 1_000_000_000
_SLOT_ENTRIES = frozenset({"jobfeatures", "tmp", "work"})


def _mark_clean(directory: str | os.PathLike[str]) -> None:
    """Stamp an emptied directory of a slot as such (its access time too: nothing reads it by that)."""
    os.utime(directory, ns=(CLEAN_MTIME_NS, CLEAN_MTIME_NS), follow_symlinks=False)


class PayloadSandbox:
    """One slot of the pilot: a $JOBFEATURES directory, a $TMPDIR and a work directory, lent to one payload
    at a time.

    A slot is reused rather than created and removed for every payload (four directories made and removed
    per payload were most of the pilot's cost of a short payload), but what a payload sees is what a fresh
    slot would show: :meth:`PayloadArea.payload` hands out a slot only after :meth:`reset` emptied its
    $TMPDIR and work directory (whatever the previous payload left there is removed when it ends), and
    every $JOBFEATURES file is rewritten unless it still holds, unmodified, the value this payload needs
    (checked by inode, size and modification time, so a payload that edited its own $JOBFEATURES does not
    leak the edit to the next one). A slot that cannot be made clean is removed and replaced.
    """

    def __init__(self, area: PayloadArea, root: Path) -> None:
        self.area = area
        self.root = root
        self.jobfeatures = root / "jobfeatures"
        self.tmpdir = root / "tmp"
        self.workdir = root / "work"
        self.outputs = root / "outputs"
        self.cores = 1
        self.mem_MB: int | None = None
        self.wall_norm: float | None = None
        self.disk_GB: float | None = None
        self.start = 0.0
        self.jobfeatures.mkdir(mode=0o755)
        self.tmpdir.mkdir(mode=0o700)
        self.workdir.mkdir(mode=0o755)
        if area.quick_reset:
            for directory in (self.tmpdir, self.workdir, root):
                _mark_clean(directory)
        # What this slot's $JOBFEATURES holds as we wrote it: file -> (value, text, identity); and the directory's.
        self._written: dict[str, tuple[Value, str, tuple[int, int, int]]] = {}
        self._dir_identity = _identity(self.jobfeatures)
        self._jobfeatures_prefix = os.path.join(self.jobfeatures, "")  # plain strings: pathlib costs here
        self._values: dict[str, Value | None] | None = None  # its $JOBFEATURES as last written

    def assign(
        self, *, cores: int, mem_MB: int | None, wall_norm: float | None, disk_GB: float | None, start: float
    ) -> None:
        """Give the slot to a payload of this size that starts at ``start`` (its $JOBFEATURES follows);
        ``wall_norm`` is its own run-time limit in normalised seconds (the job's ``wall`` requirement)."""
        self.cores, self.mem_MB, self.wall_norm, self.disk_GB, self.start = cores, mem_MB, wall_norm, disk_GB, start
        changed = _identity(self.jobfeatures) != self._dir_identity
        if changed:  # files added, removed or renamed by a payload
            remove_tree(self.jobfeatures)
            self.jobfeatures.mkdir(mode=0o755)
            self._written.clear()
        base = self._jobfeatures_prefix
        self._values = self.job_values(self.area.features)
        for key, value in self._values.items():
            path = base + key
            if value is None:
                if self._written.pop(key, None) is not None:
                    changed = True
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                continue
            known = self._written.get(key)
            if known is not None and type(known[0]) is type(value) and known[0] == value:  # its file holds it
                text = known[1]
                try:
                    if _identity(path) == known[2]:  # and no payload touched it
                        continue
                except FileNotFoundError:
                    pass
            else:
                text = format_value(value) + "\n"
            with open(path, "w") as handle:  # no payload reads this slot now: no atomic dance needed
                handle.write(text)
            self._written[key] = (value, text, _identity(path))
            changed = True
        if changed:  # else the directory is as it was checked above
            self._dir_identity = _identity(self.jobfeatures)

    def job_values(self, features: Features) -> dict[str, Value | None]:
        """The $JOBFEATURES values of this payload under the pilot's current ``features``."""
        factor = features.cpufactor
        pilot_end = self.area.pilot_end(features)
        to_end = None if pilot_end is None else math.floor(pilot_end - self.start)
        # Both limits in normalised seconds: the job's own as given, the pilot's end converted.
        walls = [w for w in (self.wall_norm, None if to_end is None else normalise(to_end, factor)) if w is not None]
        wall_norm = max(0.0, min(walls)) if walls else None
        wall = None if wall_norm is None else denormalise(wall_norm, factor)
        cpu = None if wall is None else self.cores * wall
        if features.job.cpu_limit_secs is not None:
            cpu = features.job.cpu_limit_secs if cpu is None else min(cpu, features.job.cpu_limit_secs)
        mem = self.mem_MB if self.mem_MB is not None else features.job.mem_limit_MB
        disk = self.disk_GB if self.disk_GB is not None else features.job.disk_limit_GB
        return {
            "allocated_CPU": self.cores,
            "mem_limit_MB": mem,
            "wall_limit_secs": _whole(wall),
            "wall_limit_secs_lrms": _whole(wall_norm),
            "cpu_limit_secs": _whole(cpu),
            "cpu_limit_secs_lrms": None if cpu is None else _whole(normalise(cpu, factor)),
            "jobstart_secs": math.floor(self.start),
            "disk_limit_GB": disk,
            "shutdowntime_job": None if pilot_end is None else math.floor(pilot_end),
            "cpufactor_lrms": factor,
        }

    def write_jobfeatures(self, features: Features) -> None:
        """Rewrite every file of this payload's $JOBFEATURES while it runs (atomically: it may be reading)."""
        self._values = self.job_values(features)
        for key, value in self._values.items():
            _write_atomically(self.jobfeatures, key, value)
            if value is None:
                self._written.pop(key, None)
            else:
                self._written[key] = (value, format_value(value) + "\n", _identity(self.jobfeatures / key))
        self._dir_identity = _identity(self.jobfeatures)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for the payload's subprocess: ``base`` (default: the pilot's) plus its MJF."""
        env = dict(self.area.environ if base is None else base)
        env.pop("JOBSTATUS", None)
        values = self._values if self._values is not None else self.job_values(self.area.features)
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

    def reset(self) -> bool:
        """Empty the $TMPDIR and work directory and drop anything else a payload left in the slot.

        False when the slot cannot be made as a fresh one would be (the area then removes it).

        With :attr:`PayloadArea.quick_reset` (unconfined payloads only) a directory is read only if an entry
        was added, removed or renamed in it since it was last emptied: each is left with a modification time
        of :data:`CLEAN_MTIME_NS`, which no change made now can give it (the kernel stamps the current time),
        so one ``lstat`` says it is still empty. A payload could set that time back itself; an unconfined one
        can write the next slot's files anyway, a confined one must not be trusted to leave it be.
        """
        quick = self.area.quick_reset
        try:
            if not quick or os.lstat(self.root).st_mtime_ns != CLEAN_MTIME_NS:
                with os.scandir(self.root) as entries:
                    strays = [e.path for e in entries if e.name not in _SLOT_ENTRIES]
                for path in strays:
                    remove_tree(path)
                if quick:
                    _mark_clean(self.root)
            for directory, mode in ((self.tmpdir, 0o700), (self.workdir, 0o755)):
                st = os.lstat(directory)
                if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != mode:
                    return False
                if quick and st.st_mtime_ns == CLEAN_MTIME_NS:
                    continue
                with os.scandir(directory) as entries:
                    leftovers = [e.path for e in entries]
                for path in leftovers:
                    remove_tree(path)
                if quick:
                    _mark_clean(directory)
        except OSError:
            return False
        return True

    def cleanup(self) -> None:
        """The payload has ended: empty the slot for the next one (idempotent)."""
        self.area._release(self)

    def __enter__(self) -> PayloadSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


class PayloadArea:
    """The pilot's directory of payload sandboxes and, when needed, its local $MACHINEFEATURES copy."""

    def __init__(self, workdir: str | os.PathLike[str], features: Features, *, stop_margin: float = 0.0) -> None:
        self.workdir = Path(workdir).absolute()  # payloads get these paths and run elsewhere
        self.stop_margin = stop_margin
        self.features = features
        self._end_of: Features | None = None  # the features self._end was worked out from (pilot_end)
        self._end: float | None = None
        #: Slots are emptied by their directories' modification times (:meth:`PayloadSandbox.reset`): only
        #: for payloads that run unconfined; set before the first slot is made.
        self.quick_reset = False
        # The pilot's environment, read once, without the credentials it holds (taskqueues.store.access) nor the
        # deployment's settings and paths: the base of every payload's; a payload never sees the store's URL,
        # the state directory or any other secret.
        self.environ = payload_environ(os.environ)
        self._live: list[PayloadSandbox] = []
        self._free: list[PayloadSandbox] = []
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
        """When payloads must be done: the pilot's end less its stop margin (None if unbounded). Asked
        several times per payload of the same (frozen) features: worked out once per features."""
        if features is not self._end_of:
            end = features.end_time()
            self._end_of, self._end = features, None if end is None else end - self.stop_margin
        return self._end

    def _write_machinefeatures(self) -> None:
        for key in MACHINE_KEYS:
            _write_atomically(self.machinefeatures_dir, key, self.features.get(key))

    def update(self, features: Features) -> None:
        """New pilot features (after ``FeatureReader.refresh``): rewrite the copy and every live payload's
        $JOBFEATURES (idle slots are rewritten when they are handed out)."""
        self.features = features
        if self._copied:
            self._write_machinefeatures()
        for sandbox in list(self._live):
            sandbox.write_jobfeatures(features)

    def payload(
        self,
        payload_id: str,
        *,
        cores: int,
        mem_MB: int | None = None,
        wall_norm: float | None = None,
        disk_GB: float | None = None,
        start: float | None = None,
    ) -> PayloadSandbox:
        """A slot for one payload: its $JOBFEATURES written, its $TMPDIR and work directory empty (a context
        manager that gives the slot back). ``wall_norm``: its own run-time limit, normalised seconds."""
        if cores <= 0:
            raise PayloadAreaError(f"payload {payload_id!r}: needs at least one core, got {cores}")
        when = time.time() if start is None else start
        sandbox = self._free.pop() if self._free else None
        try:
            if sandbox is None:
                root = Path(tempfile.mkdtemp(prefix="slot-", dir=self.workdir))
                try:
                    os.chmod(root, 0o755)
                    sandbox = PayloadSandbox(self, root)
                except OSError:
                    remove_tree(root)
                    raise
            sandbox.assign(cores=cores, mem_MB=mem_MB, wall_norm=wall_norm, disk_GB=disk_GB, start=when)
        except OSError as exc:
            if sandbox is not None:
                self._discard(sandbox)
            raise PayloadAreaError(
                f"payload {payload_id!r}: cannot create its directories under {self.workdir}: {exc.strerror or exc}"
            ) from None
        self._live.append(sandbox)
        return sandbox

    def _release(self, sandbox: PayloadSandbox) -> None:
        if sandbox not in self._live:
            return
        self._live.remove(sandbox)
        if sandbox.reset():
            self._free.append(sandbox)
        else:
            self._discard(sandbox)

    def _discard(self, sandbox: PayloadSandbox) -> None:
        with contextlib.suppress(OSError):
            remove_tree(sandbox.root)

    def close(self) -> None:
        """Remove every slot, in use or not, and the local $MACHINEFEATURES copy."""
        for sandbox in self._live + self._free:
            self._discard(sandbox)
        self._live.clear()
        self._free.clear()
        if self._copied:
            remove_tree(self.machinefeatures_dir)
