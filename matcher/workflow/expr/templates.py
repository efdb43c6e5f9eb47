"""``{name}`` templates: strict placeholders (names and ``deps.<job>.<value>`` only), bounded output.

A template is parsed once (cached) into literal text and fields; rendering looks up exact names only,
so a template cannot reach an attribute, an item or any object behind a value.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from string import Formatter

from taskqueues.errors import shown

from .errors import ExprError
from .parser import MAX_LENGTH
from .tokens import DEP_RE

__all__ = ["MAX_FORMAT_WIDTH", "MAX_RENDERED", "render", "template_dep_refs", "template_names"]

MAX_FORMAT_WIDTH = 100
MAX_RENDERED = 1024 * 1024

_PLACEHOLDER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FORMAT_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[+\- ]?z?#?0?(?P<width>\d*)[_,]?(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?", re.DOTALL | re.ASCII
)
_CONVERSIONS: dict[str, Callable[[object], str]] = {
    "s": str,
    "r": repr,
    "q": lambda value: shlex.quote(str(value)),
}


@dataclass(frozen=True)
class _Field:
    literal: str
    name: str | None
    spec: str
    conversion: str | None
    dep: tuple[str, str] | None


@lru_cache(maxsize=4096)
def _template_fields(template: str) -> tuple[_Field, ...]:
    if len(template) > 10 * MAX_LENGTH:
        raise ExprError(f"template too long ({len(template)} characters)", expression=template)
    try:
        pieces = list(Formatter().parse(template))
    except ValueError as exc:
        raise ExprError(f"bad braces ({exc}); write {{{{ and }}}} for literal braces", expression=template) from None
    fields: list[_Field] = []
    for literal, name, spec, conversion in pieces:
        if name is None:
            fields.append(_Field(literal, None, "", None, None))
            continue
        dep_match = DEP_RE.fullmatch(name)
        if name == "" or name.isdigit():
            raise ExprError("positional placeholders ({} or {0}) are not allowed; name them", expression=template)
        if dep_match is None and not _PLACEHOLDER_RE.fullmatch(name):
            raise ExprError(
                f"placeholder {{{name}}}: attribute and index access are not allowed",
                expression=template,
                name=name,
            )
        spec = spec or ""
        if "{" in spec or "}" in spec:
            raise ExprError(f"placeholder {{{name}}}: nested placeholders are not allowed", expression=template)
        spec_match = _FORMAT_SPEC_RE.fullmatch(spec)
        if spec_match is None:
            raise ExprError(f"placeholder {{{name}}}: bad format spec {shown(spec)}", expression=template, name=name)
        for part in ("width", "precision"):
            digits = spec_match.group(part)
            if digits and int(digits) > MAX_FORMAT_WIDTH:
                raise ExprError(
                    f"placeholder {{{name}}}: {part} {digits} over the limit of {MAX_FORMAT_WIDTH}",
                    expression=template,
                    name=name,
                )
        if conversion is not None and conversion not in _CONVERSIONS:
            raise ExprError(
                f"placeholder {{{name}}}: unknown conversion !{conversion} (use !s, !r or !q)",
                expression=template,
                name=name,
            )
        dep = (dep_match.group(1), dep_match.group(2)) if dep_match else None
        fields.append(_Field(literal, name, spec, conversion, dep))
    return tuple(fields)


def template_names(template: str) -> set[str]:
    """Every placeholder ``template`` uses (``deps.<job>.<value>`` for dependency outputs)."""
    return {field.name for field in _template_fields(template) if field.name is not None}


def template_dep_refs(template: str) -> set[tuple[str, str]]:
    """The ``(job, value)`` pairs of the dependency outputs ``template`` uses."""
    return {field.dep for field in _template_fields(template) if field.dep is not None}


def render(
    template: str,
    params: Mapping[str, object],
    deps: Mapping[str, Mapping[str, object]] | None = None,
) -> str:
    """``template`` with its placeholders filled from ``params`` (and ``deps`` for ``{deps.<job>.<value>}``).

    Values must be strings, numbers or booleans. Nothing is looked up but the exact names, so a
    template cannot reach an attribute, an item or any object behind a value. A dependency's output
    (``{deps.<job>.<value>}``, written by a payload) is always shell-quoted after formatting
    (:func:`shlex.quote`: one word, its bytes as they are): a job's output is never code in its dependents'
    commands.
    """
    out: list[str] = []
    size = 0
    for field in _template_fields(template):
        out.append(field.literal)
        size += len(field.literal)
        if size > MAX_RENDERED:
            raise ExprError(f"renders to more than {MAX_RENDERED} characters", expression=template)
        if field.name is None:
            continue
        value: object
        if field.dep is not None:
            job, key = field.dep
            if deps is None:
                raise ExprError(
                    f"{{{field.name}}} is only known once job {job!r} has finished",
                    expression=template,
                    name=field.name,
                )
            outputs = deps.get(job, {})
            if key not in outputs:
                raise ExprError(f"dependency {job!r} did not report {key!r}", expression=template, name=field.name)
            value = outputs[key]
        else:
            if field.name not in params:
                raise ExprError(f"unknown placeholder {{{field.name}}}", expression=template, name=field.name)
            value = params[field.name]
        if not isinstance(value, str | int | float | bool):
            raise ExprError(
                f"placeholder {{{field.name}}} holds a {type(value).__name__}; only strings and numbers fit",
                expression=template,
                name=field.name,
            )
        quote = field.dep is not None and field.conversion != "q"
        if field.conversion is not None:
            value = _CONVERSIONS[field.conversion](value)
        try:
            out.append(format(value, field.spec))
        except (ValueError, OverflowError) as exc:  # OverflowError: "{n:c}" of a number past U+10FFFF
            raise ExprError(f"placeholder {{{field.name}}}: {exc}", expression=template, name=field.name) from None
        if quote:  # a value a job produced is data: one shell word whatever bytes it holds, never code
            out[-1] = shlex.quote(out[-1])
        size += len(out[-1])
    if size > MAX_RENDERED:
        raise ExprError(f"renders to more than {MAX_RENDERED} characters", expression=template)
    return "".join(out)
