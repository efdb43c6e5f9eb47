"""Sizes and durations as people write them, turned into the integers the rest of Pilotfish uses.

Sizes become whole megabytes and durations whole seconds, because those are the units of Machine/Job
Features and of the open-lmake backends, and because integers hash, compare and travel through Redis
and Lua without surprises.

Sizes (``parse_size_mb``)
    * ``int`` or ``float``: already MB (a fraction is rounded up: ``1.2`` -> 2).
    * A string ``<number>[<unit>]``, blanks allowed between, the unit letter case-insensitive:

      ==========================  =====================================================
      unit                        meaning
      ==========================  =====================================================
      none, ``M``, ``MB``         megabytes (``"300"`` is 300 MB)
      ``B``                       bytes
      ``K`` ``KB``                kilobytes, 1 K = 1000 B
      ``G`` ``GB``                1 G = 1000 M  (decimal, as MJF counts: 1 GB = 1000 MB)
      ``T`` ``TB`` / ``P`` ``PB`` 1 T = 1000 G, 1 P = 1000 T
      ``Ki`` ``Mi`` ``Gi``        binary (Kubernetes style): 1 Gi = 2**30 B = 1073.741824 MB
      ``Ti`` ``Pi`` (+ ``B``)
      ==========================  =====================================================

      We accept ``GB`` and ``Gi`` rather than reject them: ``GB`` is what people type and means the
      same decimal unit, and ``Gi`` is what Kubernetes manifests (our Helm chart) use; reading it exactly
      is safer than refusing it. ``m`` means megabytes here, never Kubernetes' "milli".
      The result is rounded *up* to a whole MB: a requirement must never shrink in conversion.

Durations (``parse_duration_s``)
    * ``int`` or ``float``: seconds (a fraction is rounded up).
    * ``"300"`` (seconds), ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``, ``"1w"`` and sums of them
      written together: ``"1h30m"``, ``"1d 12h"``.
    * Clock form ``"H:MM:SS"`` (``"1:30:00"``, hours may exceed 23) and Slurm's ``"D-HH:MM:SS"``.
      Two-field ``"MM:SS"`` is refused: Slurm reads ``"30:00"`` as minutes, people often mean hours.

Every refusal is a :class:`~taskqueues.errors.RequirementError` that names the field and the job,
so the caller (the submission chain, the catalog loader) can show where the bad value came from.

This module is the one home of units: the workflow expression language reads its suffixes from
:data:`SIZE_UNITS` and :data:`DURATION_UNITS`, and a batch system that counts in binary units reads its
sizes with :func:`read_size` (``binary_letters=True``: Slurm's ``2G`` is 2 GiB) and converts them with
:func:`to_mib` or :func:`to_mb`, so every place that counts 1024 says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType

from taskqueues.errors import RequirementError, shown

__all__ = [
    "DURATION_UNITS",
    "MB",
    "MIB",
    "SIZE_UNITS",
    "parse_duration_s",
    "parse_size_mb",
    "read_size",
    "to_mb",
    "to_mib",
]

#: Bytes in a megabyte as Pilotfish, Machine/Job Features and the catalog count it.
MB = 10**6
#: Bytes in a mebibyte: the "MB" of Slurm (``--mem=1024`` is 1 GiB) and Grid Engine's upper-case ``M``.
MIB = 2**20

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}

#: Bytes per size unit, by lower-cased suffix: ``b``; ``k m g t p`` decimal (and ``kb`` ... ``pb``);
#: ``ki mi gi ti pi`` binary (and ``kib`` ... ``pib``).
SIZE_UNITS: Mapping[str, int] = MappingProxyType(
    {
        "b": 1,
        **{suffix: size for letter, size in _DECIMAL.items() for suffix in (letter, letter + "b")},
        **{suffix: size for letter, size in _BINARY.items() for suffix in (letter + "i", letter + "ib")},
    }
)
#: Seconds per duration unit, by lower-cased suffix.
DURATION_UNITS: Mapping[str, int] = MappingProxyType({"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400})

_MAX_TEXT = 64

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
# re.ASCII: only the digits 0-9 are digits here ("\u0664", Arabic-Indic four, is no 4 cores).
_SIZE_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*)\s*$", re.ASCII)
_PART_RE = re.compile(rf"\s*({_NUMBER})\s*([a-zA-Z]?)\s*", re.ASCII)
_CLOCK_RE = re.compile(r"^\s*(?:(\d+)-)?(\d+):([0-5]?\d):([0-5]?\d)\s*$", re.ASCII)


def _unit_bytes(unit: str, *, bare: str, binary_letters: bool) -> int | None:
    """Bytes per ``unit`` (``bare`` when it is empty); None when it is no size unit."""
    unit = unit.lower() or bare
    if binary_letters and unit[:1] in _BINARY and unit[1:] in ("", "b"):
        return _BINARY[unit[0]]
    return SIZE_UNITS.get(unit)


def read_size(text: str, *, bare: str = "m", binary_letters: bool = False) -> Fraction | None:
    """The exact number of bytes ``text`` (``<number>[<unit>]``, blanks allowed, the unit case-insensitive)
    stands for; None when it is not such a size or its unit is unknown.

    ``bare`` is the unit of a number written without one (``"m"``: MB, ``"b"``: bytes). With
    ``binary_letters`` the letters ``K M G T P`` (and ``KB`` ...) count 1024, as batch systems read them
    (Slurm's ``2G`` is 2 GiB), like ``Ki`` ... ``Pi`` always do.
    """
    match = _SIZE_RE.match(text) if len(text) <= _MAX_TEXT else None
    if match is None:
        return None
    digits, unit = match.groups()
    factor = _unit_bytes(unit, bare=bare, binary_letters=binary_letters)
    return None if factor is None else Fraction(digits) * factor


def to_mb(size_bytes: Fraction | int) -> Fraction:
    """``size_bytes`` in MB of 10^6 bytes (:data:`MB`), exactly."""
    return Fraction(size_bytes) / MB


def to_mib(size_bytes: Fraction | int) -> Fraction:
    """``size_bytes`` in MiB of 2^20 bytes (:data:`MIB`), exactly: the unit of Slurm's ``--mem``."""
    return Fraction(size_bytes) / MIB


def _fail(message: str, field: str, job: str | None) -> RequirementError:
    return RequirementError(message, job=job, field=field)


def _check_text(text: str, field: str, job: str | None) -> None:
    """Refuse what no form reads, with the reason: absurdly long strings (before any digit conversion),
    digits other than 0-9 (``"\u0664"`` is no 4), doubled signs (``"--1"`` is no 1) and negative amounts."""
    if len(text) > _MAX_TEXT:
        raise _fail(f"a size or duration string must be at most {_MAX_TEXT} characters, got {len(text)}", field, job)
    if any(char.isdigit() and not char.isascii() for char in text):
        raise _fail(f"only the digits 0-9 are read in a size or duration, got {shown(text)}", field, job)
    signs = text.lstrip()[:2]
    if signs[:1] in ("-", "+") and len(signs) == 2 and signs[1] in "-+":
        raise _fail(f"malformed sign in {shown(text)}: write one number, without doubled signs", field, job)
    if signs.startswith("-"):
        raise _fail(f"must not be negative, got {shown(text)}", field, job)


def _plain_number(value: object, field: str, job: str | None, what: str) -> Fraction | None:
    """The value as an exact fraction when it is a Python number, None when it is something else."""
    if isinstance(value, bool):
        raise _fail(f"{what} must be a number or a string, not a boolean ({shown(value)})", field, job)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(f"{what} must be finite, got {shown(value)}", field, job)
        return Fraction(value)
    return None


def _check_range(number: Fraction, value: object, field: str, job: str | None, maximum: int | None, unit: str) -> int:
    """``number`` rounded up to a whole ``unit``, refused when negative (before rounding: -0.5 is no 0)."""
    if number < 0:
        raise _fail(f"must not be negative, got {shown(value)}", field, job)
    result = math.ceil(number)
    if maximum is not None and result > maximum:
        raise _fail(f"{shown(value)} is {shown(result)} {unit}, over the limit of {maximum} {unit}", field, job)
    return result


def parse_size_mb(value: object, *, field: str, job: str | None = None, maximum: int | None = None) -> int:
    """A memory or disk size in whole MB (rounded up); see the module docstring for the accepted forms.

    ``maximum`` (MB), when given, is an upper limit whose breach is reported like a bad unit.
    """
    number = _plain_number(value, field, job, "a size")
    if number is None:
        if not isinstance(value, str):
            raise _fail(f"a size must be a number (MB) or a string like '4G', not {type(value).__name__}", field, job)
        _check_text(value, field, job)
        match = _SIZE_RE.match(value)
        if match is None:
            raise _fail(f"cannot read {shown(value)} as a size; write e.g. '512M', '4G', '1.5T' or '4Gi'", field, job)
        digits, unit = match.groups()
        factor = _unit_bytes(unit, bare="m", binary_letters=False)
        if factor is None:
            known = "B, K, M, G, T, P (decimal, optional B) or Ki, Mi, Gi, Ti, Pi (binary)"
            raise _fail(f"unknown size unit {unit!r} in {shown(value)}; use {known}", field, job)
        number = to_mb(Fraction(digits) * factor)
    return _check_range(number, value, field, job, maximum, "MB")


def parse_duration_s(value: object, *, field: str, job: str | None = None, maximum: int | None = None) -> int:
    """A duration in whole seconds (rounded up); see the module docstring for the accepted forms.

    ``maximum`` (seconds), when given, is an upper limit whose breach is reported like a bad unit.
    """
    number = _plain_number(value, field, job, "a duration")
    if number is None:
        if not isinstance(value, str):
            raise _fail(
                f"a duration must be a number (seconds) or a string like '2h', not {type(value).__name__}",
                field,
                job,
            )
        number = _parse_duration_text(value, field, job)
    return _check_range(number, value, field, job, maximum, "s")


def _parse_duration_text(text: str, field: str, job: str | None) -> Fraction:
    _check_text(text, field, job)
    clock = _CLOCK_RE.match(text)
    if clock is not None:
        days, hours, minutes, seconds = (int(part) if part else 0 for part in clock.groups())
        return Fraction(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    if ":" in text:
        raise _fail(f"cannot read {shown(text)} as a clock duration; write 'H:MM:SS' or 'D-HH:MM:SS'", field, job)
    hint = "write e.g. '90s', '30m', '2h', '1d', '1h30m', '1:30:00' or a number of seconds"
    stripped = text.strip()
    if not stripped:
        raise _fail(f"an empty string is not a duration; {hint}", field, job)
    position, total = 0, Fraction(0)
    while position < len(stripped):
        part = _PART_RE.match(stripped, position)
        if part is None:
            raise _fail(f"cannot read {shown(text)} as a duration; {hint}", field, job)
        digits, unit = part.groups()
        if not unit and (position != 0 or part.end() != len(stripped)):
            # "1h30" could mean 30 s or 30 min: refuse rather than guess.
            raise _fail(
                f"cannot read {shown(text)} as a duration: a number without a unit must stand alone", field, job
            )
        factor = DURATION_UNITS.get(unit.lower() or "s")
        if factor is None:
            raise _fail(f"unknown duration unit {unit!r} in {shown(text)}; use s, m, h, d or w", field, job)
        total += Fraction(digits) * factor
        position = part.end()
    return total
