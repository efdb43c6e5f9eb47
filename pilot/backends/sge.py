"""The Grid Engine backend: ``qsub`` to submit, one ``qstat -xml`` per poll, ``qdel`` to cancel.

Submission sends a batch script on stdin (:func:`pilot.backends.base.pilot_script`, run by ``-S /bin/sh``)
with ``-terse -N <repo_key><name>`` (``repo_key`` defaults, as the seed says, to the base name of the repository
followed by ``:``, which Grid Engine names turn into ``;``: see :func:`pilot.backends.batch.default_repo_key`),
the priority ``-p``, the wall time as ``-l h_rt`` and the shape:

* cpu: ``-l <cpu_resource>=N`` when ``cpu_resource`` is set, else ``-pe <pe> N`` when N > 1;
* mem: ``-l <mem_resource>=<MB>`` (default ``h_vmem``), the shape's whole memory as the seed writes it
  (``-l mem_r=10``), unless Grid Engine counts the complex per slot: then ``ceil(mem / slots)``. Which is
  read from the complex's consumable column in ``qconf -sc`` (:func:`pilot.mjf.derive.sge_per_slot`: YES per
  slot, JOB per job, a non-consumable per slot only for Grid Engine's own limits such as ``h_vmem``, which
  the shepherd multiplies by the slots); ``mem_per_slot`` true or false overrides it. Note ``h_vmem`` is
  enforced as ``ulimit -v``;
* tmp: ``-l <tmp_resource>=<MB>`` only when ``tmp_resource`` is set (tmp is not managed by default);
* ``request.resources``: ``hard``/``soft`` are option strings put after ``-hard``/``-soft``; ``cpu``/``mem``/
  ``tmp`` override the shape; any other K=V becomes ``-l K=V``.

Units: shapes count MB of 10^6 bytes. The seed writes a plain MB number (``-l mem_r=10`` for 10 MB): a
resource the site declared to count MB (a complex of type INT or DOUBLE, as the seed's ``mem_r``/``tmp_r``)
gets exactly that. A complex of type MEMORY (``h_vmem``, ``h_data``, ``h_fsize``...) counts bytes, where a
plain number is bytes and an upper-case ``M`` a MiB (``sge_types(1)``: 10M would be 4.9% more than 10 MB), so
it gets the 1000-based suffix, ``<MB>m``, which Grid Engine records as MB x 10^6 bytes. The type of each
complex comes from ``qconf -sc`` (read once); when that cannot be read, Grid Engine's own memory complexes
are taken as MEMORY and every other name as counting MB.

Priority: ``-p`` from ``request.options`` wins; else, with ``start_by``, ``-round((start_by - now) /
prio_seconds)`` clamped into ``[-1023, max_prio]`` — a pilot for work due now gets ``max_prio`` (0 by
default: only operators may raise a job above 0), one due ``1023 * prio_seconds`` from now or later
(17 h with the default 60 s) gets -1023; else the ``-p`` of the configured ``options``; else
``default_prio``. Grid Engine's range is -1023..1024. Unlike Slurm's nice from a fixed origin, this is
relative to the submission time (the narrow range would saturate with any fixed origin), and Grid Engine
never recomputes it: a pilot that waits long keeps the priority it got when submitted.

Job names: Grid Engine refuses ``\\n \\t \\r / : @ \\ * ?`` in names; they are replaced by close-looking
characters (``:`` → ``;`` as the seed says, ``/`` → ``|``, ``@`` → ``&``, ``\\`` → ``|``, ``*`` → ``+``,
``?`` → ``!``, white space → ``_``).

States: live jobs come from one ``qstat -xml -u '*'``. A job that left qstat has ended: its batch script's
status file (in the log directory) tells ``exit N``/``signal N``; without one, ``qacct -j`` when accounting
works (the file is read first because ``qacct`` scans the whole accounting file on every call); without
either, the job is UNKNOWN for ``accounting_grace`` seconds (accounting may be flushed late) and then LOST.
A job that left without a status file after this backend cancelled it is CANCELLED; one deleted by
someone else (``qdel`` outside Pilotfish) is LOST. ``qacct``'s ``failed`` != 0 (killed by ``qdel``,
``h_rt``, the execd) is LOST; exit status > 128 is a death by signal, LOST; other non-zero exits FAILED.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pilot.mjf.derive import SgeComplex, parse_sge_complexes, sge_per_slot
from taskqueues.backend_options import parse_sge_options
from taskqueues.errors import BackendError, BackendUnavailable
from taskqueues.store import scrubbed

from .base import (
    BackendCommandError,
    PilotRequest,
    PilotState,
    PilotStatus,
    find_binary,
    read_status_file,
    run_command,
)
from .batch import ScriptBackend, settings_from_options

log = logging.getLogger(__name__)

PRIO_MIN, PRIO_MAX = -1023, 1024
#: The complexes Grid Engine itself defines with type MEMORY (assumed when ``qconf -sc`` cannot be read).
_MEMORY_COMPLEXES = frozenset(
    {
        "h_core",
        "h_data",
        "h_fsize",
        "h_rss",
        "h_stack",
        "h_vmem",
        "s_core",
        "s_data",
        "s_fsize",
        "s_rss",
        "s_stack",
        "s_vmem",
        "mem_free",
        "mem_total",
        "mem_used",
        "swap_free",
        "swap_rate",
        "swap_rsvd",
        "swap_total",
        "swap_used",
        "virtual_free",
        "virtual_total",
        "virtual_used",
    }
)
_NAME_MAP = str.maketrans(
    {":": ";", "/": "|", "@": "&", "\\": "|", "*": "+", "?": "!", "\n": "_", "\t": "_", "\r": "_", " ": "_"}
)


def sge_job_name(name: str) -> str:
    """``name`` with the characters Grid Engine refuses in job names replaced by close-looking ones."""
    return name.translate(_NAME_MAP)


@dataclass(frozen=True)
class SgeSettings:
    """Configuration of the Grid Engine backend (the seed's keys plus where to find Grid Engine)."""

    repo_key: str | None = None  # None: default_repo_key()
    root: str | None = None  # $SGE_ROOT; None = inherit the environment's
    cell: str | None = None  # $SGE_CELL
    cluster: str | None = None  # $SGE_CLUSTER_NAME and $SGE_CLUSTER (see SgeBackend.__init__)
    bin_dir: str | None = None
    cpu_resource: str | None = None
    pe: str = "smp"
    mem_resource: str | None = "h_vmem"
    mem_per_slot: bool | None = None  # None: from the complex's consumable column (module text)
    tmp_resource: str | None = None
    wall_resource: str | None = "h_rt"
    default_prio: int = 0
    prio_seconds: float = 60.0
    max_prio: int = 0
    options: str = ""
    log_dir: str | None = None
    poll_interval: float = 5.0
    accounting_grace: float = 30.0
    command_timeout: float = 60.0

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SgeSettings:
        settings = settings_from_options(cls, options, "sge")
        parse_sge_options(settings.options, where="sge backend setting 'options'")
        if not PRIO_MIN <= settings.default_prio <= PRIO_MAX:
            raise BackendError(f"sge backend: default_prio {settings.default_prio} is outside {PRIO_MIN}..{PRIO_MAX}")
        return settings


class SgeBackend(ScriptBackend):
    """Pilots as Grid Engine batch jobs."""

    kind = "sge"
    submit_command = "qsub"
    cancel_command = "qdel"
    job_id_var = "JOB_ID"
    settings: SgeSettings

    def __init__(self, settings: SgeSettings | None = None) -> None:
        settings = settings or SgeSettings()
        env = scrubbed(os.environ)  # what the pilots inherit (Slurm's --export=ALL): never our credentials
        # Grid Engine's commands read SGE_ROOT and SGE_CELL (and SGE_QMASTER_PORT); its cluster name is
        # SGE_CLUSTER_NAME, which its settings.sh exports and its rc scripts read (qsub/qstat/qdel read no
        # cluster variable: in 8.1.9 the cell picks the cluster). The seed calls it SGE_CLUSTER: site
        # wrappers written for open-lmake read that name, so both are set.
        for var, value in (
            ("SGE_ROOT", settings.root),
            ("SGE_CELL", settings.cell),
            ("SGE_CLUSTER_NAME", settings.cluster),
            ("SGE_CLUSTER", settings.cluster),
        ):
            if value:
                env[var] = value
        super().__init__(settings, env)
        self._vanished_at: dict[str, float] = {}
        self._qacct_works: bool | None = None
        self._complexes: dict[str, SgeComplex] | None = None

    # --- availability ------------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`BackendUnavailable` unless the commands exist and sge_qmaster answers."""
        for name in ("qsub", "qstat", "qdel"):
            self._bin(name)
        if not self._env.get("SGE_ROOT"):
            raise BackendUnavailable("sge backend: SGE_ROOT is not set (setting 'root' or the environment)")
        try:
            run_command([self._bin("qstat"), "-u", "*"], env=self._env, timeout=15)
        except BackendCommandError as exc:
            raise BackendUnavailable(f"sge backend: sge_qmaster does not answer: {exc}") from None

    def priority_for(self, request: PilotRequest, now: float | None = None) -> int:
        """The ``qsub -p`` value for ``request`` (see the module text for the order of sources)."""
        if request.options:
            given = parse_sge_options(request.options, where=f"pilot {request.name!r} options")
            if "priority" in given:
                return int(given["priority"])
        if request.start_by is not None:
            ahead = request.start_by - (time.time() if now is None else now)
            return max(PRIO_MIN, min(self.settings.max_prio, -round(ahead / self.settings.prio_seconds)))
        configured = parse_sge_options(self.settings.options, where="sge backend setting 'options'")
        return int(configured.get("priority", self.settings.default_prio))

    def submit_args(self, request: PilotRequest) -> list[str]:
        """The ``qsub`` command line for ``request`` (the script itself goes on stdin)."""
        settings = self.settings
        resources = dict(request.resources)
        cpu = int(resources.pop("cpu", request.shape.cpu))
        mem = int(resources.pop("mem", request.shape.mem))
        tmp = int(resources.pop("tmp", request.shape.tmp))
        hard = shlex.split(resources.pop("hard", ""))
        soft = shlex.split(resources.pop("soft", ""))
        name = sge_job_name(f"{self.repo_key}{request.name}")
        args = [
            self._bin("qsub"),
            "-terse",
            "-N",
            name,
            "-S",
            "/bin/sh",
            "-p",
            str(self.priority_for(request)),
        ]
        if request.workdir:
            args += ["-wd", request.workdir]
        else:
            args.append("-cwd")
        log_dir = request.log_dir or settings.log_dir
        if log_dir:
            stem = Path(log_dir) / name.replace("|", "_")
            args += ["-o", f"{stem}-$JOB_ID.out", "-e", f"{stem}-$JOB_ID.err"]
        slots = 1
        limits: list[str] = []
        if settings.cpu_resource:
            limits.append(f"{settings.cpu_resource}={cpu}")
        elif cpu > 1:
            args += ["-pe", settings.pe, str(cpu)]
            slots = cpu
        if settings.mem_resource and mem > 0:
            per_slot = settings.mem_per_slot
            if per_slot is None:
                per_slot = sge_per_slot(settings.mem_resource, self.complexes())
            per = math.ceil(mem / slots) if per_slot else mem
            limits.append(f"{settings.mem_resource}={self.megabytes(settings.mem_resource, per)}")
        if settings.tmp_resource and tmp > 0:
            limits.append(f"{settings.tmp_resource}={self.megabytes(settings.tmp_resource, tmp)}")
        if settings.wall_resource:
            limits.append(f"{settings.wall_resource}={request.wall}")
        limits += [f"{key}={value}" for key, value in resources.items()]
        if limits or hard:
            args.append("-hard")
        if limits:
            args += ["-l", ",".join(limits)]
        args += hard
        if soft:
            args += ["-soft", *soft]
        return args

    def megabytes(self, resource: str, mb: int) -> str:
        """``mb`` (MB of 10^6 bytes) as the value of ``-l <resource>=``: a plain number, as the seed writes it,
        unless the complex is of type MEMORY, which counts bytes: then ``<mb>m`` (see the module text)."""
        return f"{mb}m" if self.complex_types().get(resource) == "MEMORY" else str(mb)

    def complex_types(self) -> dict[str, str]:
        """Complex name (and shortcut) -> its type (:meth:`complexes`)."""
        return {name: known.type for name, known in self.complexes().items()}

    def complexes(self) -> dict[str, SgeComplex]:
        """Complex name (and shortcut) -> its type and consumable column, from ``qconf -sc`` once; Grid
        Engine's own memory complexes (type MEMORY, not consumable) when it cannot be read."""
        if self._complexes is None:
            qconf = find_binary("qconf", self.settings.bin_dir)
            done = (
                None
                if qconf is None
                else run_command([qconf, "-sc"], env=self._env, check=False, timeout=self.settings.command_timeout)
            )
            found = parse_sge_complexes(done.stdout) if done is not None and done.returncode == 0 else {}
            if not found:
                why = "not found" if done is None else (done.stderr.strip() or f"exit {done.returncode}")
                log.info(
                    "sge backend: qconf -sc unusable (%s); Grid Engine's own memory complexes are taken as "
                    "MEMORY, other resources as counting MB",
                    why,
                )
                found = dict.fromkeys(_MEMORY_COMPLEXES, SgeComplex("MEMORY", "NO"))
            self._complexes = found
        return self._complexes

    def _batch_id(self, answer: str) -> str:
        return answer.split(".")[0]

    def _harmless(self, line: str) -> bool:
        return any(text in line for text in ("does not exist", "registered the job", "has deleted job"))

    # --- polling -------------------------------------------------------------------------------------------

    def _poll(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        out: dict[str, PilotStatus] = {}
        args = [self._bin("qstat"), "-xml", "-u", "*"]
        done = run_command(args, env=self._env, timeout=self.settings.command_timeout)
        try:
            root = ET.fromstring(done.stdout)
        except ET.ParseError as exc:
            raise BackendError(f"sge backend: qstat -xml answered something that is not XML: {exc}") from None
        wanted = set(ids)
        for job in root.iter("job_list"):
            batch_id = (job.findtext("JB_job_number") or "").strip()
            if batch_id not in wanted or batch_id in out:
                continue
            letters = (job.findtext("state") or "").strip()
            queue = (job.findtext("queue_name") or "").strip()
            node = queue.split("@", 1)[1] if "@" in queue else None
            out[batch_id] = self._classify_live(batch_id, letters, node)
        for batch_id in ids:
            if batch_id not in out:
                out[batch_id] = self._ended(batch_id)
        return out

    def _classify_live(self, batch_id: str, letters: str, node: str | None) -> PilotStatus:
        deleting = " (being deleted)" if "d" in letters else ""
        if "E" in letters:
            return PilotStatus(
                PilotState.QUEUED,
                f"error state {letters}: see `qstat -j {batch_id}`; `qmod -cj {batch_id}` clears it{deleting}",
                None,
                node,
            )
        if any(c in letters for c in "rtRsST"):
            suspended = " (suspended)" if any(c in letters for c in "sST") else ""
            return PilotStatus(PilotState.RUNNING, f"{letters}{suspended}{deleting}", None, node)
        return PilotStatus(PilotState.QUEUED, f"{letters}{deleting}", None, node)

    def _ended(self, batch_id: str) -> PilotStatus:
        """A job no longer in qstat: status file, else qacct, else UNKNOWN for a grace time, then LOST."""
        if not batch_id.isdigit():
            return PilotStatus(PilotState.UNKNOWN, "not a Grid Engine job id")
        from_file = read_status_file(self._status_dirs.get(batch_id), batch_id)
        if from_file is not None:
            return from_file
        from_qacct = self._qacct(batch_id)
        if from_qacct is not None:
            return from_qacct
        if batch_id in self._cancelled:
            return PilotStatus(PilotState.CANCELLED, "cancelled; left qstat")
        first = self._vanished_at.setdefault(batch_id, time.monotonic())
        if time.monotonic() - first < self.settings.accounting_grace:
            return PilotStatus(PilotState.UNKNOWN, "left qstat; waiting for its status file or accounting record")
        return PilotStatus(PilotState.LOST, "left qstat with no status file and no accounting record")

    def _qacct(self, batch_id: str) -> PilotStatus | None:
        if self._qacct_works is False or find_binary("qacct", self.settings.bin_dir) is None:
            return None
        done = run_command(
            [self._bin("qacct"), "-j", batch_id],
            env=self._env,
            check=False,
            timeout=self.settings.command_timeout,
        )
        if done.returncode != 0:
            if "not found" not in done.stderr:  # e.g. "accounting: No such file or directory"
                self._qacct_works = False
                log.info("sge backend: qacct unusable (%s); using status files only", done.stderr.strip())
            return None
        self._qacct_works = True
        # Several records can share a job number after a restart of the numbering: take the last one.
        record: dict[str, str] = {}
        for line in done.stdout.splitlines():
            if line.startswith("="):
                record = {}
                continue
            key, _, value = line.partition(" ")
            record[key] = value.strip()
        node = record.get("hostname") or None
        failed_text = record.get("failed", "0")
        failed_match = re.match(r"\d+", failed_text)
        failed = int(failed_match.group(0)) if failed_match else 0
        exit_match = re.match(r"-?\d+", record.get("exit_status", ""))
        code = int(exit_match.group(0)) if exit_match else None
        if failed:
            if batch_id in self._cancelled:
                return PilotStatus(PilotState.CANCELLED, f"cancelled (qacct failed {failed_text})", None, node)
            return PilotStatus(PilotState.LOST, f"qacct failed {failed_text}; exit_status {code}", None, node)
        if code == 0:
            return PilotStatus(PilotState.DONE, "exit 0 (qacct)", 0, node)
        if code is not None and code > 128:
            return PilotStatus(PilotState.LOST, f"killed by signal {code - 128} (qacct)", None, node)
        return PilotStatus(PilotState.FAILED, f"exit {code} (qacct)", code, node)
