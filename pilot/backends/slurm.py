"""The Slurm backend: ``sbatch`` to submit, one ``squeue`` per poll for every pilot, ``scancel`` to cancel.

Submission sends a batch script on stdin (:func:`pilot.backends.base.pilot_script`) with ``--parsable -J
<repo_key><name> -c CPU --mem MB [--tmp MB] --time D-HH:MM:SS [--nice N] --export=ALL`` plus the
pass-through resources. Resources are merged, later winning: the configured ``partition``/``qos`` and
``options`` string, the pilot's shape, ``request.resources``, then ``request.options``.

Resource keys (the seed's names, with the long-option spellings accepted as aliases): ``partition`` (-p),
``qos`` (-q), ``gres``, ``features``/``constraint`` (-C), ``licenses``/``licence`` (-L),
``reservation``/``reserv``, ``nodes``/``nodelist`` (-w), ``excludes``/``exclude`` (-x). As the seed's table
says, each may carry the index of a heterogeneous job's component (``gres0``, ``partition1``) and no index
means index 0: ``gres0`` is ``gres``. A pilot is one job, component 0, so an index above 0 is refused with
the reason (its resources would be allocated to a component no pilot runs in), and so is one key given twice
(``gres`` and ``gres0``). Any other key K=V goes as license ``K:V`` when Slurm declares license K
(``scontrol show licenses``), else as gres ``K:V``.

``repo_key`` (the job-name prefix) defaults, as the seed says, to the base name of the repository followed
by ``:`` (:func:`pilot.backends.batch.default_repo_key`); ``repo_key = ""`` gives bare names.

States: one ``squeue -t all -j <ids>`` answers for every job slurmctld still holds, finished ones included
(with the raw wait status, so no ``scontrol show job`` per job is needed). A job it no longer holds
(``MinJobAge`` passed) is looked up with ``sacct`` when accounting works (tried once; without slurmdbd it
says "accounting storage is disabled" and is not tried again), else in the status file the batch script
left in the log directory; a job with neither is LOST. A CANCELLED job this backend did not cancel is
reported LOST ("cancelled outside Pilotfish"): for the director it is a pilot that died under it.

Nice (``use_nice``): ``nice = round((start_by - time_origin) * nice_factor)``, the seed's formula, so
pilots for more urgent work get a lower nice and so a higher priority, comparably across directors. It is
clamped into ``[min_nice, 2147483645]``: Slurm refuses ``|nice| > 2^31 - 3``, and only operators may
give a negative nice, so ``min_nice`` defaults to 0 (a ``start_by`` before ``time_origin`` gets nice 0).
``time_origin`` is ``YYYY-MM-DD HH:MM[:SS]`` with an optional ``+HH:MM``/``-HH:MM``; without it, local time.
Where each comes from, first found: the backend setting; else (with ``use_nice``), as the seed describes,
the ``PriorityParams`` entry of the Slurm configuration file (``config``, else ``$SLURM_CONF``, else
``/etc/slurm/slurm.conf``), a ``,``-separated list of ``param=value`` (Slurm itself spells the key
``PriorityParameters``; both are read, case-insensitively, and a value holding blanks is quoted, as slurm.conf
requires: ``PriorityParameters="time_origin=2024-01-01 00:00 +00:00,nice_factor=0.5"``; other parameters
there are the priority plugin's and are ignored; ``Include`` files are not followed); else the seed's
defaults, 2023-01-01 00:00 and 1.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from taskqueues.backend_options import parse_slurm_options
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

NICE_MAX = 2**31 - 3  # sbatch: "Invalid --nice value, out of range (+/- 2147483645)"

_FLAGS = {
    "partition": "--partition",
    "qos": "--qos",
    "gres": "--gres",
    "features": "--constraint",
    "licenses": "--licenses",
    "reservation": "--reservation",
    "nodes": "--nodelist",
    "excludes": "--exclude",
}
_ALIASES = {
    "constraint": "features",
    "licence": "licenses",
    "license": "licenses",
    "reserv": "reservation",
    "nodelist": "nodes",
    "exclude": "excludes",
}

_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"}
_RUNNING = {
    "RUNNING",
    "COMPLETING",
    "CONFIGURING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "RESIZING",
}
_LOST = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "TIMEOUT", "OUT_OF_MEMORY", "REVOKED"}

DEFAULT_TIME_ORIGIN = "2023-01-01 00:00"
DEFAULT_NICE_FACTOR = 1.0
DEFAULT_CONFIG = "/etc/slurm/slurm.conf"
_PRIORITY_PARAMS = re.compile(r'^\s*PriorityParam(?:eter)?s\s*=\s*(?:"([^"]*)"|(\S+))', re.IGNORECASE)
_INDEXED = re.compile(r"^([a-z]+?)(\d+)$")

_ORIGIN = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}(?::\d{2})?)\s*(?:([+-])(\d{2}):(\d{2}))?$")


def parse_time_origin(text: str) -> float:
    """``"2023-01-01 00:00"`` (local time) or ``"2023-01-01 00:00 +02:00"`` → unix time."""
    match = _ORIGIN.match(text.strip())
    if not match:
        raise BackendError(
            f"slurm backend: time_origin must be 'YYYY-MM-DD HH:MM' optionally followed by "
            f"+HH:MM or -HH:MM, got {text!r}"
        )
    day, clock, sign, hours, minutes = match.groups()
    fmt = "%Y-%m-%d %H:%M:%S" if clock.count(":") == 2 else "%Y-%m-%d %H:%M"
    moment = datetime.strptime(f"{day} {clock}", fmt)
    if sign:
        offset = timedelta(hours=int(hours), minutes=int(minutes))
        moment = moment.replace(tzinfo=timezone(offset if sign == "+" else -offset))
    return moment.timestamp()


def priority_params(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``param=value`` pairs of a slurm.conf's ``PriorityParams`` (``PriorityParameters``) entry, keys
    lower-cased; {} when the file has none or cannot be read (the last entry wins, as in Slurm)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        log.debug("slurm backend: %s not read for PriorityParams: %s", path, exc.strerror or exc)
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _PRIORITY_PARAMS.match(line)
        if match:
            value = match.group(1) if match.group(1) is not None else match.group(2).split("#", 1)[0]
            found = {}
            for item in value.split(","):
                key, sep, param = item.partition("=")
                if sep:
                    found[key.strip().lower()] = param.strip()
    return found


def slurm_time(seconds: int) -> str:
    """Seconds as Slurm's ``D-HH:MM:SS`` time limit (Slurm rounds up to whole minutes)."""
    days, rest = divmod(max(int(seconds), 1), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def decode_wait_status(raw: int) -> tuple[int | None, int | None]:
    """Slurm's raw wait status → (exit code, signal); one of them is None."""
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def resource_name(key: str, where: str) -> str:
    """A resource key as the seed's table reads it: aliases resolved, a heterogeneous-job index of 0 dropped
    (``gres0`` is ``gres``); an index above 0 is refused (a pilot is one job). Other keys stay as given."""
    match = _INDEXED.match(key)
    if match is None:
        return _ALIASES.get(key, key)
    name = _ALIASES.get(match.group(1), match.group(1))
    if name not in _FLAGS:
        return key  # a license or gres whose name ends in digits
    if int(match.group(2)) != 0:
        raise BackendError(
            f"{where}: resource {key!r} is for component {int(match.group(2))} of a heterogeneous "
            f"job; a pilot is one job, so only {name!r} (or {name + '0'!r}) can be given"
        )
    return name


@dataclass(frozen=True)
class SlurmSettings:
    """Configuration of the Slurm backend (the seed's keys plus where to find Slurm)."""

    repo_key: str | None = None  # None: default_repo_key()
    use_nice: bool = False
    time_origin: str | None = None  # None: PriorityParams of the configuration file, else DEFAULT_TIME_ORIGIN
    nice_factor: float | None = None  # None: PriorityParams of the configuration file, else DEFAULT_NICE_FACTOR
    min_nice: int = 0
    config: str | None = None  # SLURM_CONF for every command
    bin_dir: str | None = None  # where sbatch/squeue/scancel are; None = $PATH
    poll_interval: float = 5.0
    partition: str | None = None
    qos: str | None = None
    options: str = ""  # a -b style string applied to every submission
    log_dir: str | None = None
    export: str = "ALL"
    command_timeout: float = 60.0

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> SlurmSettings:
        settings = settings_from_options(cls, options, "slurm")
        if settings.time_origin is not None:
            parse_time_origin(settings.time_origin)
        parse_slurm_options(settings.options, where="slurm backend setting 'options'")
        return settings


class SlurmBackend(ScriptBackend):
    """Pilots as Slurm batch jobs."""

    kind = "slurm"
    submit_command = "sbatch"
    cancel_command = "scancel"
    job_id_var = "SLURM_JOB_ID"
    settings: SlurmSettings

    def __init__(self, settings: SlurmSettings | None = None) -> None:
        settings = settings or SlurmSettings()
        env = scrubbed(os.environ)  # what the pilots inherit (Slurm's --export=ALL): never our credentials
        if settings.config:
            env["SLURM_CONF"] = settings.config
        super().__init__(settings, env)
        self.time_origin, self.nice_factor = self._nice_parameters(env)
        self._origin = parse_time_origin(self.time_origin)
        self._licenses: set[str] | None = None
        self._sacct_works: bool | None = None

    def _nice_parameters(self, env: Mapping[str, str]) -> tuple[str, float]:
        """``time_origin`` and ``nice_factor``: the settings, else PriorityParams (read only with ``use_nice``,
        the one thing they are for), else the seed's defaults."""
        origin, factor = self.settings.time_origin, self.settings.nice_factor
        if self.settings.use_nice and (origin is None or factor is None):
            path = self.settings.config or env.get("SLURM_CONF") or DEFAULT_CONFIG
            params = priority_params(path)
            if origin is None and "time_origin" in params:
                origin = params["time_origin"]
                try:
                    parse_time_origin(origin)
                except BackendError as exc:
                    raise BackendError(f"{path}: PriorityParams: {exc}") from None
            if factor is None and "nice_factor" in params:
                try:
                    factor = float(params["nice_factor"])
                    if not math.isfinite(factor):
                        raise ValueError(factor)
                except ValueError:
                    raise BackendError(
                        f"{path}: PriorityParams: nice_factor must be a number, got {params['nice_factor']!r}"
                    ) from None
        return (DEFAULT_TIME_ORIGIN if origin is None else origin, DEFAULT_NICE_FACTOR if factor is None else factor)

    # --- availability ------------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`BackendUnavailable` unless the commands exist and slurmctld answers."""
        for name in ("sbatch", "squeue", "scancel", "scontrol"):
            self._bin(name)
        if self.settings.config and not os.path.isfile(self.settings.config):
            # Without its slurm.conf scontrol looks for a controller by DNS and hangs for its whole timeout.
            raise BackendUnavailable(f"slurm backend: configuration file {self.settings.config} does not exist")
        try:
            run_command([self._bin("scontrol"), "ping"], env=self._env, timeout=15)
        except BackendCommandError as exc:
            raise BackendUnavailable(f"slurm backend: slurmctld does not answer: {exc}") from None

    def nice_for(self, start_by: float) -> int:
        """The ``--nice`` value for a pilot whose most urgent job should start by ``start_by``."""
        nice = round((start_by - self._origin) * self.nice_factor)
        return max(self.settings.min_nice, min(NICE_MAX, nice))

    def submit_args(self, request: PilotRequest) -> list[str]:
        """The ``sbatch`` command line for ``request`` (the script itself goes on stdin)."""
        where = f"pilot {request.name!r}"
        wanted: dict[str, str] = {}
        if self.settings.partition:
            wanted["partition"] = self.settings.partition
        if self.settings.qos:
            wanted["qos"] = self.settings.qos
        wanted.update(parse_slurm_options(self.settings.options, where="slurm backend setting 'options'"))
        wanted.update({"cpu": str(request.shape.cpu), "mem": str(request.shape.mem)})
        if request.shape.tmp:
            wanted["tmp"] = str(request.shape.tmp)
        given: dict[str, str] = {}
        for key, value in request.resources.items():
            name = resource_name(key, where)
            if name in given:
                raise BackendError(f"{where}: resources {given[name]!r} and {key!r} both name {name!r}")
            given[name] = key
            wanted[name] = str(value)
        if request.options:
            wanted.update(parse_slurm_options(request.options, where=f"{where} options"))
        name = f"{self.repo_key}{request.name}"
        args = [
            self._bin("sbatch"),
            "--parsable",
            f"--job-name={name}",
            f"--cpus-per-task={wanted.pop('cpu')}",
            f"--mem={wanted.pop('mem')}",
            f"--time={slurm_time(request.wall)}",
            f"--export={self.settings.export}",
        ]
        tmp = wanted.pop("tmp", None)
        if tmp and tmp != "0":
            args.append(f"--tmp={tmp}")
        if self.settings.use_nice and request.start_by is not None:
            args.append(f"--nice={self.nice_for(request.start_by)}")
        if request.workdir:
            args.append(f"--chdir={request.workdir}")
        log_dir = request.log_dir or self.settings.log_dir
        if log_dir:
            stem = Path(log_dir) / name.replace("/", "_")
            args += [f"--output={stem}-%j.out", f"--error={stem}-%j.err"]
        gres = [wanted.pop("gres")] if "gres" in wanted else []
        licenses = [wanted.pop("licenses")] if "licenses" in wanted else []
        for key, value in wanted.items():
            if key in _FLAGS:
                args.append(f"{_FLAGS[key]}={value}")
            elif key in self._declared_licenses():
                licenses.append(f"{key}:{value}")
            else:
                gres.append(f"{key}:{value}")
        if licenses:
            args.append("--licenses=" + ",".join(licenses))
        if gres:
            args.append("--gres=" + ",".join(gres))
        return args

    def _batch_id(self, answer: str) -> str:
        return answer.split(";")[0]

    def _harmless(self, line: str) -> bool:
        return "Invalid job id" in line or "already completing or completed" in line

    # --- polling -------------------------------------------------------------------------------------------

    def _declared_licenses(self) -> set[str]:
        if self._licenses is None:
            done = run_command(
                [self._bin("scontrol"), "show", "licenses", "-o"],
                env=self._env,
                check=False,
                timeout=self.settings.command_timeout,
            )
            self._licenses = set(re.findall(r"LicenseName=(\S+)", done.stdout)) if done.returncode == 0 else set()
        return self._licenses

    def _poll(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        out: dict[str, PilotStatus] = {}
        numeric = [i for i in ids if i.isdigit()]
        for batch_id in ids:
            if not batch_id.isdigit():
                out[batch_id] = PilotStatus(PilotState.UNKNOWN, "not a Slurm job id")
        if not numeric:
            return out
        args = [
            self._bin("squeue"),
            "-h",
            "-t",
            "all",
            "-j",
            ",".join(numeric),
            "-O",
            "JobID:|,State:|,Reason:|,NodeList:|,exit_code:|",
        ]
        done = run_command(args, env=self._env, check=False, timeout=self.settings.command_timeout)
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            raise BackendCommandError(args, done.returncode, done.stderr)
        for line in done.stdout.splitlines():
            fields = line.split("|")
            if len(fields) < 5 or fields[0].strip() not in numeric:
                continue
            batch_id, state, reason, node, raw = (f.strip() for f in fields[:5])
            out[batch_id] = self._classify(batch_id, state, reason, node or None, raw)
        missing = [i for i in numeric if i not in out]
        if missing:
            out.update(self._vanished(missing))
        return out

    def _classify(self, batch_id: str, state: str, reason: str, node: str | None, raw: str) -> PilotStatus:
        state = state.split()[0] if state else "UNKNOWN"
        why = "" if reason in ("", "None", "(null)") else reason
        code, sig = decode_wait_status(int(raw)) if raw.lstrip("-").isdigit() else (None, None)
        if ":" in raw:  # sacct's ExitCode is "code:signal"
            first, _, second = raw.partition(":")
            code, sig = (None, int(second)) if second.isdigit() and int(second) else (int(first), None)
        if state in _QUEUED:
            return PilotStatus(PilotState.QUEUED, f"{state} {why}".strip(), None, node)
        if state in _RUNNING:
            return PilotStatus(PilotState.RUNNING, f"{state} {why}".strip(), None, node)
        if state == "COMPLETED":
            return PilotStatus(PilotState.DONE, "COMPLETED", code if code is not None else 0, node)
        if state == "CANCELLED":
            if batch_id in self._cancelled:
                return PilotStatus(PilotState.CANCELLED, "cancelled", code, node)
            return PilotStatus(PilotState.LOST, "CANCELLED outside Pilotfish (scancel by someone else)", None, node)
        if state in _LOST:
            return PilotStatus(PilotState.LOST, f"{state} {why}".strip(), None, node)
        if state in ("FAILED", "SPECIAL_EXIT"):
            if sig:
                return PilotStatus(PilotState.LOST, f"{state}: killed by signal {sig} {why}".strip(), None, node)
            return PilotStatus(PilotState.FAILED, f"{state}: exit {code} {why}".strip(), code, node)
        return PilotStatus(PilotState.UNKNOWN, f"unexpected Slurm state {state!r} {why}".strip(), None, node)

    def _vanished(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        """Jobs slurmctld no longer holds: sacct when accounting works, else the status file, else LOST."""
        out: dict[str, PilotStatus] = {}
        if self._sacct_works is not False and find_binary("sacct", self.settings.bin_dir):
            args = [
                self._bin("sacct"),
                "-n",
                "-P",
                "-X",
                "-j",
                ",".join(ids),
                "-o",
                "JobID,State,NodeList,ExitCode",
            ]
            done = run_command(args, env=self._env, check=False, timeout=self.settings.command_timeout)
            if done.returncode != 0:
                self._sacct_works = False
                log.info("slurm backend: sacct unusable (%s); using status files", done.stderr.strip())
            else:
                self._sacct_works = True
                for line in done.stdout.splitlines():
                    fields = line.split("|")
                    if len(fields) == 4 and fields[0] in ids:
                        out[fields[0]] = self._classify(fields[0], fields[1], "", fields[2] or None, fields[3])
        for batch_id in ids:
            if batch_id in out:
                continue
            from_file = read_status_file(self._status_dirs.get(batch_id), batch_id)
            if from_file is not None:
                out[batch_id] = from_file
            elif batch_id in self._cancelled:
                out[batch_id] = PilotStatus(PilotState.CANCELLED, "cancelled; no longer known to Slurm")
            else:
                out[batch_id] = PilotStatus(PilotState.LOST, "no longer known to Slurm and left no exit status")
        return out
