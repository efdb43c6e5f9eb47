"""Job requirements: parse and validate them, bucket them, name their task queue, match them (RFC #7).

A job's requirements are a flat mapping ``name -> number | string | list of strings``. Four names
are *consumables*, resources a pilot hands out and takes back: ``cpu`` (cores, default 1), ``mem``
(MB, default 0, accepts ``"4G"``), ``tmp`` (MB of scratch disk, default 0) and ``wall`` (seconds of
normalised run time, default none, accepts ``"2h"``). Every other name is *free-form*: the catalog's
sites, CEs and queues (and the pilots started there) describe themselves with arbitrary parameters,
and a job may require any of them without any change of code or schema (RFC #7's point).

Matching rules of a free-form requirement against a resource description (a catalog queue's
effective parameters, or what a pilot says it is), exactly as RFC #7 states them:

=====================  =====================  ==========================================================
job says               resource has           the resource is eligible when
=====================  =====================  ==========================================================
``Name = v``           nothing named Name     never: a required parameter the resource lacks excludes it
``Name = v``           ``Name = r``           ``r == v``
``Name = v``           ``Name = [r1, r2]``    ``v`` is one of ``r1, r2`` (a queue may offer several tags)
``Name = [v1, v2]``    ``Name = r``           ``r`` is one of ``v1, v2`` ("any of")
``Name = [v1, v2]``    ``Name = [r1, r2]``    the two lists share a value
``MaxName = n``        ``MaxName = r``        ``r >= n`` (numbers; e.g. MaxMemory = 4000 needs >= 4000)
``MinName = n``        ``MinName = r``        ``r <= n`` (numbers)
``BannedSite = [s…]``  ``Site = r`` or none   ``r`` is none of ``s…``; a resource without Site is eligible
=====================  =====================  ==========================================================

``Max``/``Min`` rules apply to names that *start with* ``Max``/``Min`` followed by at least one more
character (case-sensitive, as in the RFC: ``MaxMemory``, ``MinDiskSpace``). On the resource side a
list of numbers is eligible when any of them passes, and numeric strings are read as numbers (pilots
publish their description through Redis, where everything is a string). Equality compares numbers
as numbers (``4000 == 4000.0 == "4000"``) and everything else as text, case-sensitively.

Consumables are not matched by these rules: they are capacities, checked against a catalog shape
(:meth:`taskqueues.catalog.Catalog.eligible_queues`) or against what a pilot has free.

Task queue identity (open-lmake's resource buckets): jobs are grouped by :meth:`Requirements.canonical`
-- sorted names, sorted lists, free-form values exact, the four consumables rounded up by
:func:`bucket` (keep the 3 most significant bits) so that jobs asking 1000 and 1001 MB share a queue.
The hash of that canonical form names the task queue. The exact values stay with the job: a pilot
reserves what the job asked, the bucket only groups.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from taskqueues import sandbox
from taskqueues.errors import RequirementError, shown
from taskqueues.store.records import canonical_json
from taskqueues.units import parse_duration_s, parse_size_mb

__all__ = [
    "CONSUMABLES",
    "MAX_CPU",
    "MAX_MEM_MB",
    "MAX_NAMES",
    "MAX_STRING",
    "MAX_WALL_S",
    "Requirements",
    "Value",
    "bucket",
    "check_name",
    "check_value",
    "mismatch",
    "parse_requirements",
]

CONSUMABLES: tuple[str, ...] = ("cpu", "mem", "tmp", "wall")

Value = int | float | str | tuple[str, ...]

MAX_CPU = 4096
MAX_MEM_MB = 64 * 1000 * 1000  # 64 TB, decimal as everywhere else
MAX_WALL_S = 365 * 86400  # one year
MAX_STRING = 256
MAX_NAMES = 64
MAX_LIST = 64
# Free-form numbers travel through Lua, whose numbers are doubles: keep them exact there.
MAX_NUMBER = 2**53

BANNED_SITE = "BannedSite"


def bucket(n: int) -> int:
    """Round ``n`` up, keeping only its 3 most significant bits (open-lmake's resource buckets).

    ``0..8`` are unchanged, ``9 -> 10``, ``100 -> 112``, ``1025 -> 1280``: less than 25 % above the
    input, and only 4 buckets per doubling however finely jobs compute their memory.
    """
    if n < 0:
        raise RequirementError(f"bucket() needs a non-negative amount, got {n}")
    if n <= 8:
        return n
    drop = n.bit_length() - 3
    return -(-n >> drop) << drop


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_name(name: object, *, job: str | None = None) -> str:
    """Return ``name`` if it can name a requirement or a resource parameter, else raise RequirementError.

    Names are keys in Redis hashes, in TOML and in one-line messages: no blanks, no control
    characters, at most 256 characters.
    """
    if not isinstance(name, str):
        raise RequirementError(f"a requirement name must be a string, got {name!r}", job=job, field=repr(name))
    if not name:
        raise RequirementError("a requirement name must not be empty", job=job, field=name)
    if len(name) > MAX_STRING:
        raise RequirementError(f"a requirement name must be at most {MAX_STRING} characters", job=job, field=name)
    if any(ch.isspace() or not ch.isprintable() for ch in name):
        raise RequirementError("a requirement name must not contain blanks or control characters", job=job, field=name)
    return name


def _is_comparison(name: str) -> bool:
    return len(name) > 3 and name[:3] in ("Max", "Min")


def _check_text(text: str, name: str, job: str | None) -> str:
    if not text:
        raise RequirementError("an empty string is not a requirement value", job=job, field=name)
    if len(text) > MAX_STRING:
        raise RequirementError(
            f"a string value must be at most {MAX_STRING} characters, got {len(text)}", job=job, field=name
        )
    if not text.isprintable():
        raise RequirementError(f"the value {shown(text)} contains control characters", job=job, field=name)
    return text


def _check_number(value: int | float, name: str, job: str | None) -> int | float:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RequirementError(f"the value must be a finite number, got {shown(value)}", job=job, field=name)
        if value.is_integer() and abs(value) <= MAX_NUMBER:
            value = int(value)  # 4000.0 and 4000 are one requirement, and must hash alike
    if value < 0:
        raise RequirementError(f"the value must not be negative, got {shown(value)}", job=job, field=name)
    if value > MAX_NUMBER:
        raise RequirementError(f"the value {shown(value)} is over the limit of 2**53", job=job, field=name)
    return value


def check_value(name: str, value: object, *, job: str | None = None) -> Value:
    """Validate and normalise one free-form value (the same rules serve the catalog's parameters).

    Numbers stay numbers (integral floats become ints), strings stay exact, lists become sorted tuples
    without duplicates. ``Max*``/``Min*`` need a number; ``BannedSite`` a site name or a list of them.
    """
    if isinstance(value, bool):
        raise RequirementError(
            f"a boolean ({shown(value)}) is not a requirement value; use a string such as 'yes'",
            job=job,
            field=name,
        )
    if isinstance(value, Mapping):
        raise RequirementError("nested mappings are not allowed: requirements are flat", job=job, field=name)
    comparison = _is_comparison(name)
    if comparison and not _is_number(value):
        raise RequirementError(
            f"{name} is compared with >= or <= and needs a number, got {shown(value)}", job=job, field=name
        )
    if name == BANNED_SITE and not isinstance(value, str | list | tuple):
        raise RequirementError(
            f"BannedSite needs a site name or a list of them, got {shown(value)}", job=job, field=name
        )
    if name in sandbox.DIRECTIVES:
        sandbox.check_requirement(name, value, job)
    if isinstance(value, int | float):
        return _check_number(value, name, job)
    if isinstance(value, str):
        return _check_text(value, name, job)
    if isinstance(value, list | tuple):
        if not value:
            raise RequirementError("an empty list matches nothing", job=job, field=name)
        if len(value) > MAX_LIST:
            raise RequirementError(f"a list must have at most {MAX_LIST} values, got {len(value)}", job=job, field=name)
        for item in value:
            if not isinstance(item, str):
                raise RequirementError(f"list values must be strings, got {shown(item)}", job=job, field=name)
            _check_text(item, name, job)
        return tuple(sorted(set(value)))
    raise RequirementError(
        f"a value must be a number, a string or a list of strings, not {type(value).__name__}",
        job=job,
        field=name,
    )


def _consumable(name: str, value: object, job: str | None) -> int:
    if name == "cpu":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise RequirementError(f"cpu must be a whole number of cores, got {shown(value)}", job=job, field=name)
        if isinstance(value, str):
            if not (value.strip().isdigit() and value.isascii()):  # "\u0664" (Arabic-Indic four) is no 4 cores
                what = "with the digits 0-9" if value.strip().isdigit() else "of cores"
                raise RequirementError(f"cpu must be a whole number {what}, got {shown(value)}", job=job, field=name)
            if len(value.strip()) > len(str(MAX_CPU)):  # and int() refuses text of over 4300 digits
                raise RequirementError(
                    f"cpu must be between 1 and {MAX_CPU} cores, got {shown(value)}", job=job, field=name
                )
            value = int(value.strip())
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise RequirementError(f"cpu must be a whole number of cores, got {shown(value)}", job=job, field=name)
        cores = int(value)
        if not 1 <= cores <= MAX_CPU:
            raise RequirementError(
                f"cpu must be between 1 and {MAX_CPU} cores, got {shown(value)}", job=job, field=name
            )
        return cores
    if name == "wall":
        seconds = parse_duration_s(value, field=name, job=job, maximum=MAX_WALL_S)
        if seconds < 1:
            raise RequirementError("wall must be at least one second; leave it out if unknown", job=job, field=name)
        return seconds
    return parse_size_mb(value, field=name, job=job, maximum=MAX_MEM_MB)


def _validate(raw: object, job: str | None) -> dict[str, Value]:
    if not isinstance(raw, Mapping):
        raise RequirementError(f"requirements must be a mapping of names to values, got {type(raw).__name__}", job=job)
    if len(raw) > MAX_NAMES:
        raise RequirementError(f"at most {MAX_NAMES} requirement names are allowed, got {len(raw)}", job=job)
    values: dict[str, Value] = {}
    for name in sorted(raw, key=str):
        check_name(name, job=job)
        value = raw[name]
        values[name] = _consumable(name, value, job) if name in CONSUMABLES else check_value(name, value, job=job)
    return values


@dataclass(frozen=True)
class Requirements:
    """Validated requirements of one job: exact values, their canonical (bucketed) form and its hash.

    Build one with :func:`parse_requirements` (which names the job in errors); the constructor
    validates and normalises too, so ``Requirements({"mem": "4G"})`` is the same as ``{"mem": 4000}``.
    """

    values: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(_validate(self.values, None)))

    def __hash__(self) -> int:
        # Consistent with the generated __eq__, which compares the exact (normalised) values.
        return hash(tuple(self.values.items()))

    def _amount(self, name: str, default: int) -> int:
        value = self.values.get(name, default)
        assert isinstance(value, int), "validation makes every consumable an int"
        return value

    @property
    def cpu(self) -> int:
        """Cores (default 1)."""
        return self._amount("cpu", 1)

    @property
    def mem(self) -> int:
        """Memory in MB (default 0)."""
        return self._amount("mem", 0)

    @property
    def tmp(self) -> int:
        """Scratch disk in MB (default 0)."""
        return self._amount("tmp", 0)

    @property
    def wall(self) -> int | None:
        """Normalised run time in seconds, None when the job did not say."""
        return self._amount("wall", 0) if "wall" in self.values else None

    def without(self, name: str) -> Requirements:
        """The same requirements with ``name`` left out (its default, for a consumable)."""
        return Requirements({key: value for key, value in self.values.items() if key != name})

    def free_form(self) -> dict[str, Value]:
        """The non-consumable names with their exact values: what :func:`mismatch` checks (the sandbox's
        directions to the pilot, :data:`taskqueues.sandbox.DIRECTIVES`, are not matched)."""
        return {
            name: value
            for name, value in self.values.items()
            if name not in CONSUMABLES and name not in sandbox.DIRECTIVES
        }

    def canonical(self) -> dict[str, object]:
        """The requirement class: sorted names and lists, free-form exact, consumables bucketed.

        ``cpu``, ``mem`` and ``tmp`` are always present (with their defaults), so leaving out
        ``cpu = 1`` or ``mem = 0`` does not make a different task queue; ``wall`` only when given.
        """
        result: dict[str, object] = {
            "cpu": bucket(self.cpu),
            "mem": bucket(self.mem),
            "tmp": bucket(self.tmp),
        }
        if self.wall is not None:
            result["wall"] = bucket(self.wall)
        for name, value in self.values.items():
            if name not in CONSUMABLES:  # free-form and the sandbox's directions: both make the class
                result[name] = list(value) if isinstance(value, tuple) else value
        return dict(sorted(result.items()))

    def canonical_json(self) -> str:
        """The canonical form as compact JSON with sorted keys: the same text in every process."""
        return canonical_json(self.canonical())

    @property
    def tq_id(self) -> str:
        """The task-queue id: 16 hex digits of SHA-256 of :meth:`canonical_json` (RFC #7's SubmitPool id)."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).hexdigest()[:16]


def parse_requirements(raw: Mapping[str, object], *, job: str = "?") -> Requirements:
    """Validate a job's raw requirements; every refusal is a RequirementError naming the field and ``job``.

    Refused: non-mappings, more than 64 names, empty names or names with blanks/control characters,
    booleans, nested mappings, negative or non-finite numbers, bad size/duration units, empty lists
    or lists holding non-strings, strings longer than 256 characters, ``Max*``/``Min*`` with a
    non-number, ``cpu`` outside 1..4096, ``mem``/``tmp`` over 64 TB, ``wall`` over one year.
    """
    return Requirements(MappingProxyType(_validate(raw, job)))


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _as_number(value: object) -> float | None:
    if _is_number(value):
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _same(wanted: object, offered: object) -> bool:
    left, right = _as_number(wanted), _as_number(offered)
    if left is not None and right is not None and (_is_number(wanted) or _is_number(offered)):
        return left == right
    return str(wanted) == str(offered)


def _show(value: object) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    return repr(value)


def _one(name: str, wanted: object, resource: Mapping[str, object], noun: str) -> str | None:
    if name == BANNED_SITE:
        site = resource.get("Site")
        if site is None:
            return None
        banned = [s for s in _as_list(site) if any(_same(b, s) for b in _as_list(wanted))]
        if banned:
            return f"BannedSite: bans {_show(banned[0])}, {noun} has Site {_show(site)}"
        return None
    if name not in resource:
        return f"{name}: wants {_show(wanted)}, {noun} has no {name}"
    offered = resource[name]
    if _is_comparison(name):
        want = _as_number(wanted)
        offers = [_as_number(item) for item in _as_list(offered)]
        if want is None:
            return f"{name}: wants {_show(wanted)}, which is not a number"
        numbers = [number for number in offers if number is not None]
        if not numbers:
            return f"{name}: wants {_show(wanted)}, {noun} has {_show(offered)}, which is not a number"
        fits = any(n >= want for n in numbers) if name.startswith("Max") else any(n <= want for n in numbers)
        if fits:
            return None
        sign = ">=" if name.startswith("Max") else "<="
        return f"{name}: wants {sign} {_show(wanted)}, {noun} has {_show(offered)}"
    if any(_same(w, o) for w in _as_list(wanted) for o in _as_list(offered)):
        return None
    prefix = "one of " if isinstance(wanted, list | tuple) and len(wanted) > 1 else ""
    return f"{name}: wants {prefix}{_show(wanted)}, {noun} has {_show(offered)}"


def mismatch(
    req: Requirements | Mapping[str, object], resource: Mapping[str, object], *, noun: str = "queue"
) -> str | None:
    """None when ``resource`` satisfies every free-form requirement, else why not, in one line.

    Names are checked in sorted order and the first failure is reported, naming the requirement and
    the resource's value, e.g. ``"Platform: wants 'EL9', queue has 'EL8'"``. ``noun`` names the kind
    of resource in the message ("queue", "pilot"). Consumables and the sandbox's directions to the pilot
    (:data:`taskqueues.sandbox.DIRECTIVES`) are not checked here. A plain mapping
    is taken as already valid (lists or tuples alike); pass a Requirements to have it validated.
    """
    wanted: Mapping[str, object] = req.free_form() if isinstance(req, Requirements) else req
    names: Iterable[str] = sorted(n for n in wanted if n not in CONSUMABLES and n not in sandbox.DIRECTIVES)
    for name in names:
        reason = _one(name, wanted[name], resource, noun)
        if reason is not None:
            return reason
    return None
