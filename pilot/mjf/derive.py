"""Machine/Job Features derived from the batch system (Slurm, Grid Engine) or the host, as a fallback.

Order of trust (applied by :class:`pilot.mjf.source.FeatureReader`): the site's MJF files, then the batch
system, then the host. Each function here returns only what its source really knows, in MJF units, and
leaves the rest out.

Unit decisions:

* Slurm counts memory in "MB" that are mebibytes (``--mem=1024`` is 1024 x 2^20 bytes). MJF counts
  ``mem_limit_MB`` with 1000 (4 GB = 4000 MB), i.e. 10^6 bytes. So ``mem_limit_MB = floor(MiB x 1.048576)``:
  floor, because a pilot that overstates its memory gets its payloads killed.
* Grid Engine memory values follow ``sge_types(1)``: a lower-case suffix counts with 1000 (``2g``), an
  upper-case one with 1024 (``2G``); converted to bytes, then to MJF MB (floor of bytes / 10^6).
  Both readings are :func:`taskqueues.units.read_size`'s (``binary_letters``), in exact fractions: a float
  would read ``4.1g`` as 4099999999 bytes.
* Host memory and disk are bytes from psutil, converted with 1000 (MB = 10^6 bytes, GB = 10^9 bytes).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import psutil

from pilot.mjf.features import Value
from taskqueues.units import read_size, to_mb

#: Runs a command and returns its standard output, or None when the command is absent or fails.
Runner = Callable[[Sequence[str]], str | None]


def run_command(argv: Sequence[str], timeout: float = 10.0) -> str | None:
    """Run ``argv`` if its binary is on PATH; its stdout on success, None otherwise (never raises)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass
class Derived:
    """Values one source derived, their source labels, and warnings about inputs it could not use."""

    values: dict[str, Value] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def put(self, key: str, value: Value | None, source: str) -> None:
        """Record ``key`` unless the value is unknown or this source already set it more reliably."""
        if value is not None and key not in self.values:
            self.values[key] = value
            self.sources[key] = source


# ---------------------------------------------------------------------------------------------- Slurm

_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_NO_TIME = {"UNLIMITED", "INFINITE", "NONE", "N/A", "UNKNOWN", ""}


def parse_slurm_duration(text: str) -> int | None:
    """Seconds of a Slurm time limit ("30", "30:00", "1:00:00", "2-12", "2-12:30:15"); None if unlimited.

    Slurm's reading: without a day part, one field is minutes, two are minutes:seconds, three are
    hours:minutes:seconds; with a day part, the fields after it are hours[:minutes[:seconds]].
    """
    text = text.strip()
    if text.upper() in _NO_TIME:
        return None
    match = _SLURM_TIME.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Slurm time")
    days, first, second, third = match.groups()
    parts = [int(p) for p in (first, second, third) if p is not None]
    if days is not None:
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def parse_slurm_timestamp(text: str) -> int | None:
    """UNIX seconds of a Slurm date ("2024-05-01T10:00:00", the controller's local time); None if unknown."""
    text = text.strip()
    if text.upper() in _NO_TIME:
        return None
    return int(datetime.fromisoformat(text).timestamp())


def parse_scontrol_job(text: str) -> dict[str, str]:
    """The ``Key=Value`` fields of ``scontrol show job`` output (values are the token up to whitespace)."""
    return {key: value for key, value in re.findall(r"(?:^|\s)([A-Za-z][\w:/]*)=(\S*)", text)}


def _slurm_bytes(text: str) -> Fraction:
    """Bytes of a Slurm memory amount ("4096", "4096M", "4G"): Slurm's unit is its MB of 2^20 bytes, and its
    letters count 1024."""
    size = read_size(text, binary_letters=True)
    if size is None:
        raise ValueError(f"{text!r} is not a Slurm memory size")
    return size


def _expand_cpus_per_node(text: str) -> list[int]:
    """``SLURM_JOB_CPUS_PER_NODE`` ("4(x2),2") as one count per node of the allocation."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if match is None:
            raise ValueError(f"{text!r} is not a Slurm CPUs-per-node list")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _slurm_cpus(env: Mapping[str, str]) -> int | None:
    if env.get("SLURM_CPUS_ON_NODE"):
        return int(env["SLURM_CPUS_ON_NODE"])
    if env.get("SLURM_JOB_CPUS_PER_NODE"):
        per_node = _expand_cpus_per_node(env["SLURM_JOB_CPUS_PER_NODE"])
        index = int(env.get("SLURM_NODEID", "0") or 0)
        return per_node[index] if index < len(per_node) else per_node[0]
    if env.get("SLURM_CPUS_PER_TASK"):
        tasks = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_NTASKS") or "1"
        return int(env["SLURM_CPUS_PER_TASK"]) * int(tasks)
    return None


def from_slurm(env: Mapping[str, str], run: Runner = run_command) -> Derived:
    """What Slurm tells a job about itself; empty when not inside a Slurm job (no ``SLURM_JOB_ID``).

    Cores and memory come from the job's environment; start time and time limit from
    ``scontrol show job`` when it answers, else from ``SLURM_JOB_START_TIME`` / ``SLURM_JOB_END_TIME``.
    """
    derived = Derived()
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return derived
    try:
        cpus = _slurm_cpus(env)
    except ValueError as exc:
        derived.warnings.append(f"slurm: cannot read the allocated CPUs from the environment: {exc}")
        cpus = None
    if cpus is not None and cpus > 0:
        derived.put("allocated_CPU", cpus, "slurm")
    try:
        if env.get("SLURM_MEM_PER_NODE"):
            size = _slurm_bytes(env["SLURM_MEM_PER_NODE"])
        elif env.get("SLURM_MEM_PER_CPU") and cpus:
            size = _slurm_bytes(env["SLURM_MEM_PER_CPU"]) * cpus
        else:
            size = Fraction(0)
    except ValueError as exc:
        derived.warnings.append(f"slurm: cannot read the memory from the environment: {exc}")
        size = Fraction(0)
    if size > 0:
        derived.put("mem_limit_MB", math.floor(to_mb(size)), "slurm")

    output = run(["scontrol", "show", "job", job_id])
    if output:
        job = parse_scontrol_job(output)
        try:
            start = parse_slurm_timestamp(job.get("StartTime", ""))
            limit = parse_slurm_duration(job.get("TimeLimit", ""))
            end = parse_slurm_timestamp(job.get("EndTime", ""))
        except ValueError as exc:
            derived.warnings.append(f"slurm:scontrol: cannot read job {job_id}: {exc}")
        else:
            derived.put("jobstart_secs", start, "slurm:scontrol")
            if limit is None and start is not None and end is not None and end > start:
                limit = end - start
            derived.put("wall_limit_secs", limit, "slurm:scontrol")
    try:
        start_env = int(env["SLURM_JOB_START_TIME"]) if env.get("SLURM_JOB_START_TIME") else None
        end_env = int(env["SLURM_JOB_END_TIME"]) if env.get("SLURM_JOB_END_TIME") else None
    except ValueError as exc:
        derived.warnings.append(f"slurm: SLURM_JOB_START_TIME/SLURM_JOB_END_TIME are not UNIX times: {exc}")
        start_env = end_env = None
    derived.put("jobstart_secs", start_env, "slurm")
    if start_env is not None and end_env is not None and end_env > start_env:
        derived.put("wall_limit_secs", end_env - start_env, "slurm")
    return derived


# ----------------------------------------------------------------------------------------- Grid Engine

_SGE_MEMORY = re.compile(r"^\d+(?:\.\d+)?([kKmMgGtT]?)$")
_SGE_DATES = ("%m/%d/%Y %H:%M:%S.%f", "%m/%d/%Y %H:%M:%S", "%a %b %d %H:%M:%S %Y")


def parse_sge_memory(text: str) -> int | None:
    """Bytes of a Grid Engine memory value ("2G" = 2 x 2^30, "2g" = 2 x 10^9); None for INFINITY."""
    text = text.strip()
    if text.upper() in ("INFINITY", "NONE", ""):
        return None
    match = _SGE_MEMORY.match(text)
    size = None if match is None else read_size(text, bare="b", binary_letters=match.group(1).isupper())
    if size is None:
        raise ValueError(f"{text!r} is not a Grid Engine memory value")
    return int(size)


def parse_sge_time(text: str) -> int | None:
    """Seconds of a Grid Engine time value ("3600", "1:00:00", "0:30:0"); None for INFINITY."""
    text = text.strip()
    if text.upper() in ("INFINITY", "NONE", ""):
        return None
    parts = text.split(":")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a Grid Engine time value")
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return seconds


#: Grid Engine's own limit complexes (``queue_conf(5)`` RESOURCE LIMITS): the shepherd enforces them per
#: slot, multiplied by the job's slots on the host, whatever their consumable column says.
SGE_SLOT_LIMITS = frozenset(
    f"{kind}_{name}" for kind in ("h", "s") for name in ("vmem", "data", "rss", "stack", "core", "fsize")
)


@dataclass(frozen=True)
class SgeComplex:
    """One line of ``qconf -sc``: the complex's type (MEMORY, INT...) and its consumable column."""

    type: str
    consumable: str  # YES (counted per slot), JOB (per job), NO (not counted)

    def per_slot(self, name: str) -> bool:
        """Whether a request of this complex counts per slot, so a job's whole amount is the value x slots.

        ``complex(5)``: a consumable YES is booked once per slot, JOB once per job; a complex that is not
        consumable is a limit, per slot for Grid Engine's own limits (:data:`SGE_SLOT_LIMITS`), and for any
        other a value compared as it is written (the seed's ``-l mem_r=10``: the whole amount).
        """
        if self.consumable == "YES":
            return True
        if self.consumable == "JOB":
            return False
        return name in SGE_SLOT_LIMITS


def parse_sge_complexes(text: str) -> dict[str, SgeComplex]:
    """Complex name (and its shortcut) -> :class:`SgeComplex`, from ``qconf -sc`` output."""
    out: dict[str, SgeComplex] = {}
    for line in text.splitlines():
        fields_ = line.split()
        if len(fields_) >= 6 and not fields_[0].startswith("#"):
            out[fields_[0]] = out[fields_[1]] = SgeComplex(fields_[2].upper(), fields_[5].upper())
    return out


def sge_per_slot(name: str, complexes: Mapping[str, SgeComplex]) -> bool:
    """Whether ``-l name=V`` counts per slot (:meth:`SgeComplex.per_slot`); a complex ``qconf -sc`` did not
    list counts per slot when it is one of Grid Engine's own limits, else as written."""
    known = complexes.get(name)
    return known.per_slot(name) if known is not None else name in SGE_SLOT_LIMITS


def parse_qstat_job(text: str) -> dict[str, str]:
    """Resource requests and the start time of ``qstat -j <id>`` output.

    Gives every ``name=value`` of the hard and soft resource lists (soft ones prefixed ``soft:``) and
    ``start_time`` when the job is running.
    """
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^(hard|soft)[ _]resource_list:\s*(.*)$", line)
        if match:
            prefix = "" if match.group(1) == "hard" else "soft:"
            for item in match.group(2).split(","):
                name, _, value = item.strip().partition("=")
                if name and value:
                    found[prefix + name] = value
            continue
        match = re.match(r"^start_time\s+(?:\d+:)?\s*(.+?)\s*$", line)
        if match and "start_time" not in found:
            found["start_time"] = match.group(1)
    return found


def _parse_sge_date(text: str) -> int | None:
    for layout in _SGE_DATES:
        try:
            return int(datetime.strptime(text.strip(), layout).timestamp())
        except ValueError:
            continue
    return None


def _sge_slots_here(env: Mapping[str, str]) -> int | None:
    """Slots of this job on this host: the ``$PE_HOSTFILE`` line of this host, else ``NSLOTS``."""
    hostfile = env.get("PE_HOSTFILE")
    if hostfile and os.path.isfile(hostfile):
        here = {socket.gethostname(), socket.gethostname().split(".")[0], socket.getfqdn()}
        try:
            lines = Path(hostfile).read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            fields_ = line.split()
            if len(fields_) >= 2 and (fields_[0] in here or fields_[0].split(".")[0] in here):
                return int(fields_[1])
    return int(env["NSLOTS"]) if env.get("NSLOTS") else None


def _read_spool_config(spool_dir: str) -> dict[str, str]:
    """``name=value`` lines of the shepherd's ``$SGE_JOB_SPOOL_DIR/config`` (h_rt, s_rt, h_vmem...)."""
    try:
        text = (Path(spool_dir) / "config").read_text()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def from_sge(env: Mapping[str, str], run: Runner = run_command) -> Derived:
    """What Grid Engine tells a job about itself; empty outside a Grid Engine job.

    Slots from ``NSLOTS`` (or this host's ``$PE_HOSTFILE`` line); limits from ``qstat -j $JOB_ID`` when
    the qmaster answers, else from the shepherd's ``$SGE_JOB_SPOOL_DIR/config``. ``mem_limit_MB`` is the
    job's whole memory (the seed: "Total memory"): ``h_vmem`` x slots when ``h_vmem`` counts per slot, the
    value itself when the site made it a consumable of column JOB (``qconf -sc``, read when it answers:
    :func:`sge_per_slot`). The wall limit is the smaller of ``h_rt`` and ``s_rt``: at
    ``s_rt`` Grid Engine sends SIGUSR1, whose default action ends the pilot.
    """
    derived = Derived()
    job_id = env.get("JOB_ID")
    if not job_id or not (env.get("NSLOTS") or env.get("SGE_ROOT") or env.get("SGE_JOB_SPOOL_DIR")):
        return derived
    try:
        slots = _sge_slots_here(env)
    except ValueError as exc:
        derived.warnings.append(f"sge: cannot read the slots (NSLOTS/PE_HOSTFILE): {exc}")
        slots = None
    if slots is not None and slots > 0:
        derived.put("allocated_CPU", slots, "sge")

    complexes: dict[str, SgeComplex] | None = None
    for label, resources in (
        ("sge:qstat", _qstat(job_id, run)),
        ("sge", _read_spool_config(env.get("SGE_JOB_SPOOL_DIR", ""))),
    ):
        if not resources:
            continue
        try:
            limits = [
                t
                for t in (parse_sge_time(resources.get("h_rt", "")), parse_sge_time(resources.get("s_rt", "")))
                if t is not None
            ]
            per_slot = parse_sge_memory(resources.get("h_vmem", ""))
        except ValueError as exc:
            derived.warnings.append(f"{label}: cannot read the limits of job {job_id}: {exc}")
            continue
        if limits:
            derived.put("wall_limit_secs", min(limits), label)
        if per_slot is not None:
            if complexes is None:
                complexes = _qconf_complexes(run)
            times = (slots or 1) if sge_per_slot("h_vmem", complexes) else 1
            derived.put("mem_limit_MB", per_slot * times // 10**6, label)
        if "start_time" in resources:
            derived.put("jobstart_secs", _parse_sge_date(resources["start_time"]), label)
    return derived


def _qconf_complexes(run: Runner) -> dict[str, SgeComplex]:
    output = run(["qconf", "-sc"])
    return parse_sge_complexes(output) if output else {}


def _qstat(job_id: str, run: Runner) -> dict[str, str]:
    output = run(["qstat", "-j", job_id])
    return parse_qstat_job(output) if output else {}


# ------------------------------------------------------------------------------------------------ host


def _cgroup_memory_limit() -> int | None:
    """The cgroup v2 memory limit of this process in bytes, None when unlimited or not visible."""
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def from_host(workdir: str | os.PathLike[str], pilot_start: float | None = None) -> Derived:
    """What the host itself shows: cores, memory, the disk under ``workdir``, and the pilot's start time.

    ``allocated_CPU`` is the CPUs this process may run on (its affinity mask, which honours cpusets),
    ``mem_limit_MB`` the smaller of physical memory and the cgroup limit, ``disk_limit_GB`` the free space
    of the work directory's file system (what payloads can still write, not the size of a disk shared
    with other jobs), ``jobstart_secs`` the pilot's start (this process's creation unless given).
    """
    derived = Derived()
    logical = psutil.cpu_count(logical=True)
    physical = psutil.cpu_count(logical=False)
    derived.put("log_cores", logical, "host")
    derived.put("phys_cores", physical, "host")
    derived.put("allocated_CPU", len(os.sched_getaffinity(0)) or logical, "host")
    memory = psutil.virtual_memory().total
    cgroup = _cgroup_memory_limit()
    if cgroup is not None:
        memory = min(memory, cgroup)
    derived.put("mem_limit_MB", memory // 10**6, "host")
    try:
        derived.put("disk_limit_GB", round(psutil.disk_usage(os.fspath(workdir)).free / 10**9, 3), "host")
    except OSError as exc:
        derived.warnings.append(f"host: cannot measure the disk of {os.fspath(workdir)!r}: {exc}")
    start = pilot_start if pilot_start is not None else psutil.Process().create_time()
    derived.put("jobstart_secs", math.floor(start), "host")
    return derived
