"""The merged Machine/Job Features view: every key of the HEPiX spec, its value and where it came from.

The spec (seed ``hepix-machine-job-features.txt``) names six machine keys and ten job keys. This module
holds their names, their types and units, and the frozen :class:`Features` result that
:class:`pilot.mjf.source.FeatureReader` builds by merging, in order of trust, the site's MJF files, the
batch system and the host. Every value carries a *source label* so an operator can see why the pilot
believes what it believes (``pilotfish mjf``).

Units are the spec's, never converted on the way in: seconds and UNIX seconds, MB and GB counted with
1000 (4 GB = 4000 MB), cores as counts, ``hs06`` for the whole machine, ``cpufactor_lrms`` dimensionless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pilot.mjf import formulas

#: A value of any MJF key: counts and UNIX seconds are ints, hs06/cpufactor/disk are floats, the
#: shutdown command is a string.
Value = int | float | str

#: Machine keys ($MACHINEFEATURES) and the Python type each value has.
MACHINE_KEYS: dict[str, type] = {
    "hs06": float,
    "shutdowntime": int,
    "jobslots": int,
    "phys_cores": int,
    "log_cores": int,
    "shutdown_command": str,
}

#: Job keys ($JOBFEATURES) and the Python type each value has.
JOB_KEYS: dict[str, type] = {
    "cpufactor_lrms": float,
    "cpu_limit_secs_lrms": int,
    "cpu_limit_secs": int,
    "wall_limit_secs_lrms": int,
    "wall_limit_secs": int,
    "disk_limit_GB": float,
    "jobstart_secs": int,
    "mem_limit_MB": int,
    "allocated_CPU": int,
    "shutdowntime_job": int,
}

#: Keys the spec calls dynamic: the site may change them at any time, so they are re-read on refresh.
DYNAMIC_MACHINE_KEYS = frozenset({"shutdowntime", "jobslots"})
DYNAMIC_JOB_KEYS = frozenset({"shutdowntime_job"})

#: Keys that may legitimately be zero (``log_cores`` is 0 when hyper-threading is off, says the spec;
#: a limit of 0 or a timestamp of 0 makes no sense and is rejected as malformed).
ZERO_ALLOWED = frozenset({"log_cores"})


class MalformedValue(ValueError):
    """A feature file's content is not a valid value for its key (the reader turns it into a warning)."""


def parse_value(key: str, text: str) -> Value:
    """Parse the content of one feature file for ``key``.

    Integers are accepted written as floats when they are whole (``"3600.0"``) because some site scripts
    print them so; UNIX times may carry a fraction and are floored. Negative, non-finite and (except
    ``log_cores``) zero numbers are malformed: no key of the spec can take them.
    """
    kind = MACHINE_KEYS.get(key) or JOB_KEYS.get(key)
    if kind is None:
        raise MalformedValue(f"{key!r} is not a Machine/Job Features key")
    stripped = text.strip()
    if not stripped:
        raise MalformedValue("empty value")
    if kind is str:
        return stripped
    try:
        number = float(stripped)
    except ValueError:
        raise MalformedValue(f"{stripped[:40]!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise MalformedValue(f"{stripped[:40]!r} is not a finite non-negative number")
    if number == 0 and key not in ZERO_ALLOWED:
        raise MalformedValue("0 is not a meaningful value for this key")
    if kind is float:
        return number
    if number.is_integer():
        return int(number)
    if key in ("shutdowntime", "shutdowntime_job", "jobstart_secs"):
        return math.floor(number)
    raise MalformedValue(f"{stripped[:40]!r} is not a whole number")


def format_value(value: Value) -> str:
    """The file content the pilot writes for a value (payload $JOBFEATURES, local $MACHINEFEATURES copy)."""
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() else repr(value)
    return str(value)


@dataclass(frozen=True)
class MachineFeatures:
    """The $MACHINEFEATURES keys (None = absent: no shutdown foreseen, rating unknown, ...)."""

    hs06: float | None = None
    shutdowntime: int | None = None
    jobslots: int | None = None
    phys_cores: int | None = None
    log_cores: int | None = None
    shutdown_command: str | None = None


@dataclass(frozen=True)
class JobFeatures:
    """The $JOBFEATURES keys (None = absent: no such limit known)."""

    cpufactor_lrms: float | None = None
    cpu_limit_secs_lrms: int | None = None
    cpu_limit_secs: int | None = None
    wall_limit_secs_lrms: int | None = None
    wall_limit_secs: int | None = None
    disk_limit_GB: float | None = None
    jobstart_secs: int | None = None
    mem_limit_MB: int | None = None
    allocated_CPU: int | None = None
    shutdowntime_job: int | None = None


def _as_dict(obj: MachineFeatures | JobFeatures) -> dict[str, Value | None]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass(frozen=True)
class Features:
    """What the pilot knows about its machine and its batch job, with the source of every value.

    ``sources`` maps each present key to a label: ``"machinefeatures:<dir or URL>"``,
    ``"jobfeatures:<dir or URL>"``, ``"slurm"``, ``"slurm:scontrol"``, ``"sge"``, ``"sge:qstat"``,
    ``"host"``, ``"default"``, or ``"derived:<formula>"`` when computed from other keys.
    ``warnings`` lists every malformed or unreadable value met while reading (the pilot never fails on
    them; it logs them and prints them in ``pilotfish mjf``).
    """

    machine: MachineFeatures = field(default_factory=MachineFeatures)
    job: JobFeatures = field(default_factory=JobFeatures)
    sources: Mapping[str, str] = field(default_factory=dict)
    machinefeatures: str | None = None
    jobfeatures: str | None = None
    warnings: tuple[str, ...] = ()

    def get(self, key: str) -> Value | None:
        """The value of any machine or job key, None when absent."""
        if key in MACHINE_KEYS:
            value: Value | None = getattr(self.machine, key)
            return value
        if key in JOB_KEYS:
            value = getattr(self.job, key)
            return value
        raise KeyError(f"{key!r} is not a Machine/Job Features key")

    def source(self, key: str) -> str | None:
        """Where the value of ``key`` came from, None when the key is absent."""
        return self.sources.get(key)

    @property
    def cpufactor(self) -> float:
        """``cpufactor_lrms``, or 1.0 (the reference machine) when the site gives none."""
        return self.job.cpufactor_lrms if self.job.cpufactor_lrms is not None else 1.0

    def end_time(self) -> float | None:
        """The earliest of jobstart + wall limit, ``shutdowntime_job``, ``shutdowntime``; None if unknown."""
        return formulas.earliest_end(
            jobstart_secs=self.job.jobstart_secs,
            wall_limit_secs=self.job.wall_limit_secs,
            shutdowntime_job=self.job.shutdowntime_job,
            shutdowntime=self.machine.shutdowntime,
        )

    def time_left(self, now: float, stop_margin: float = 0.0) -> float | None:
        """Real (wall-clock) seconds the pilot may still use, keeping ``stop_margin``; None = unbounded."""
        return formulas.time_left(self.end_time(), now, stop_margin)

    def time_left_normalised(self, now: float, stop_margin: float = 0.0) -> float | None:
        """:meth:`time_left` in reference-machine seconds: real x ``cpufactor_lrms`` (see formulas)."""
        left = self.time_left(now, stop_margin)
        return None if left is None else formulas.normalise(left, self.cpufactor)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view: ``{"machine": {key: {"value", "source"}}, "job": {...}, ...}``."""

        def section(values: dict[str, Value | None]) -> dict[str, dict[str, Value | str | None]]:
            return {key: {"value": value, "source": self.sources.get(key)} for key, value in values.items()}

        return {
            "machinefeatures": self.machinefeatures,
            "jobfeatures": self.jobfeatures,
            "machine": section(_as_dict(self.machine)),
            "job": section(_as_dict(self.job)),
            "warnings": list(self.warnings),
        }


def build_features(
    values: Mapping[str, Value],
    sources: Mapping[str, str],
    *,
    machinefeatures: str | None = None,
    jobfeatures: str | None = None,
    warnings: tuple[str, ...] = (),
) -> Features:
    """Assemble :class:`Features` from a flat key -> value mapping (an unknown key is a bug)."""
    unknown = set(values) - set(MACHINE_KEYS) - set(JOB_KEYS)
    if unknown:
        raise KeyError(f"not Machine/Job Features keys: {sorted(unknown)}")
    machine = MachineFeatures(**{k: v for k, v in values.items() if k in MACHINE_KEYS})  # type: ignore[arg-type]
    job = JobFeatures(**{k: v for k, v in values.items() if k in JOB_KEYS})  # type: ignore[arg-type]
    return Features(
        machine=machine,
        job=job,
        sources={k: sources[k] for k in values},
        machinefeatures=machinefeatures,
        jobfeatures=jobfeatures,
        warnings=warnings,
    )
