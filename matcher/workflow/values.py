"""Requirement values of a job: numeric expressions evaluated at load or deferred to release, templates
rendered, and the ETE hint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matcher.limits import MAX_ETE, check_number
from taskqueues.errors import ValidationError, shown

from .expr import ExprError, Kind, dep_refs, evaluate, names, parse, parse_quantity, render, template_names
from .model import Collector

__all__ = [
    "Deferred",
    "check_names",
    "is_duration",
    "is_numeric",
    "read_ete_hint",
    "requirement_kind",
    "requirement_value",
]

_NUMERIC = frozenset({"cpu", "mem", "tmp", "wall", "gpu", "ete"})
_DURATIONS = frozenset({"wall", "ete"})
# One quantity as taskqueues.units reads it: "4G", "10 GB", "1h30m", "1d 12h", "1:30:00", "2-00:00:00".
_PLAIN_QUANTITY_RE = re.compile(
    r"\s*(?:(?:\d+(?:\.\d*)?|\.\d+)\s*[A-Za-z]*"
    r"|(?:\d+(?:\.\d*)?\s*[A-Za-z]\s*)+"
    r"|(?:\d+-)?\d+(?::\d+){1,2})\s*",
    re.ASCII,
)


def is_numeric(requirement: str) -> bool:
    """Whether a requirement's string value is an expression (a number) rather than a template."""
    return requirement.lower() in _NUMERIC or is_duration(requirement) or _is_comparison(requirement)


def is_duration(requirement: str) -> bool:
    """Whether a requirement is a duration (seconds, ``s m h d w`` units) rather than a size."""
    lowered = requirement.lower()
    return lowered in _DURATIONS or lowered.endswith("time")


def _is_comparison(requirement: str) -> bool:
    return len(requirement) > 3 and requirement[:3] in ("Max", "Min") and requirement[3].isupper()


def requirement_kind(requirement: str) -> Kind:
    """How an expression for ``requirement`` reads its units: as a duration or as a size."""
    return "duration" if is_duration(requirement) else "size"


def check_names(
    used: set[str], refs: set[tuple[str, str]], env: Mapping[str, object], deps: Sequence[str]
) -> list[str]:
    """Problems with the names a template or expression reads: missing params, outputs of non-deps."""
    problems = [f"missing param {name!r}" for name in sorted(used) if not name.startswith("deps.") and name not in env]
    problems.extend(
        f"reads deps.{job}.{value} but {job!r} is not one of its deps" for job, value in sorted(refs) if job not in deps
    )
    return problems


@dataclass(frozen=True)
class Deferred:
    """An expression that reads dependency outputs: evaluated when the job is released."""

    text: str
    refs: set[tuple[str, str]]


def requirement_value(
    name: str, value: object, env: Mapping[str, object], deps: Sequence[str], where: str, out: Collector
) -> object:
    """The load-time value of one requirement, or a :class:`Deferred`; a failed evaluation (division by zero,
    an exponent or a result out of range...) is a problem of the request, which is refused whole."""
    if isinstance(value, str) and is_numeric(name):
        if _PLAIN_QUANTITY_RE.fullmatch(value):
            return value
        try:
            used, refs = names(value), dep_refs(value)
        except ExprError as exc:
            out.add(str(exc), owner=where, field=name)
            return value
        problems = check_names(used, refs, env, deps)
        for problem in problems:
            out.add(f"{problem} in {shown(value)}", owner=where, field=name)
        if problems:
            return value
        if refs:
            return Deferred(value, refs)
        try:
            return evaluate(value, env, kind=requirement_kind(name))
        except ExprError as exc:
            out.add(str(exc), owner=where, field=name)
            return value
    if isinstance(value, str):
        return _render_free(name, value, env, where, out)
    if isinstance(value, list):
        return [_render_free(name, item, env, where, out) if isinstance(item, str) else item for item in value]
    return value


def _render_free(name: str, value: str, env: Mapping[str, object], where: str, out: Collector) -> str:
    try:
        used = template_names(value)
        if any(item.startswith("deps.") for item in used):
            out.add("only commands and numeric requirements may read dependency outputs", owner=where, field=name)
            return value
        missing = sorted(item for item in used if item not in env)
        if missing:
            out.add(f"missing param {missing[0]!r} in {shown(value)}", owner=where, field=name)
            return value
        return render(value, env)
    except ExprError as exc:
        out.add(str(exc), owner=where, field=name)
        return value


def read_ete_hint(
    value: object,
    requirements: Mapping[str, object],
    env: Mapping[str, object],
    where: str,
    out: Collector,
) -> float | None:
    """The job's ETE hint in seconds (within :data:`matcher.limits.MAX_ETE`): its ``ete``, else its
    ``wall`` requirement when that is readable."""
    if value is None:
        wall = requirements.get("wall")
        seconds: float | None = None
        if isinstance(wall, int | float) and not isinstance(wall, bool):
            seconds = float(wall)
        elif isinstance(wall, str):
            try:
                seconds = float(parse_quantity(wall, "duration"))
            except ExprError:
                return None  # a clock form like "1:30:00": the requirement check reads it, no hint
        # The wall requirement itself is checked at submission; an unusable one gives no hint.
        return seconds if seconds is not None and 0 <= seconds <= MAX_ETE else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        out.add(f"must be seconds or a duration expression, not {shown(value)}", owner=where, field="ete")
        return None
    if isinstance(value, int | float):
        try:
            return check_number(value, job=None, field="ete", low=0, high=MAX_ETE, what="a number of seconds")
        except ValidationError as exc:
            out.add(exc.problem, owner=where, field="ete")
            return None
    try:
        parse(value)
        refs = dep_refs(value)
    except ExprError as exc:
        out.add(str(exc), owner=where, field="ete")
        return None
    problems = check_names(names(value), set(), env, ())
    if refs:
        problems.append("an ETE hint is needed at submission, it cannot read dependency outputs")
    for problem in problems:
        out.add(problem, owner=where, field="ete")
    if problems:
        return None
    try:
        hint = evaluate(value, env, kind="duration")
    except ExprError as exc:
        out.add(str(exc), owner=where, field="ete")
        return None
    if not 0 <= hint <= MAX_ETE:
        out.add(f"{shown(value)} gives {hint} s, outside 0..{MAX_ETE:g}", owner=where, field="ete")
        return None
    return float(hint)
