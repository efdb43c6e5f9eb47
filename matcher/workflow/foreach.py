"""Jobs entries to jobs: ``foreach`` expansion, and the name, params, deps and key templates of each job."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matcher.limits import JOB_NAME_RE, JOB_NAME_RULE, MAX_JOBS
from taskqueues.errors import shown

from .document import IDENT_RE, RESERVED_PARAMS, parse_params
from .expr import ExprError, evaluate, render, template_names
from .model import Collector, Rule, job_owner

__all__ = ["Raw", "expand_jobs"]

_JOB_KEYS = frozenset({"name", "rule", "command", "params", "requirements", "deps", "key", "ete", "foreach"})
_RANGE_RE = re.compile(r"\s*range\s*\((.*)\)\s*", re.DOTALL)


@dataclass
class Raw:
    """A job after foreach expansion, before its deps are resolved and its templates compiled."""

    name: str
    entry: str  # how problems name the job ("job 'x'")
    spec: Mapping[str, Any]
    env: dict[str, object]
    dep_patterns: list[str]
    key: str | None


def expand_jobs(value: object, params: dict[str, object], rules: Mapping[str, Rule], out: Collector) -> list[Raw]:
    """The jobs the ``jobs`` array stands for, one per foreach binding, with their templates rendered."""
    if value is None or (isinstance(value, list) and not value):
        out.add("the request has no jobs: add at least one [[jobs]] entry", field="jobs")
        return []
    if not isinstance(value, list):
        out.add(f"must be an array of tables, not {type(value).__name__}", field="jobs")
        return []
    raws: list[Raw] = []
    for number, spec in enumerate(value, start=1):
        entry = f"jobs entry #{number}"
        if not isinstance(spec, Mapping):
            out.add(f"must be a table, not {type(spec).__name__}", owner=entry)
            continue
        label = spec.get("name")
        where = job_owner(label) if isinstance(label, str) else entry
        for key in sorted(set(spec) - _JOB_KEYS, key=str):
            out.add(f"unknown field (known: {', '.join(sorted(_JOB_KEYS))})", owner=where, field=key)
        if not isinstance(label, str):
            out.add(f"must be a string, not {type(label).__name__}", owner=entry, field="name")
            continue
        rule = spec.get("rule")
        if rule is not None and (not isinstance(rule, str) or rule not in rules):
            known = ", ".join(sorted(rules)) or "none defined"
            out.add(f"unknown rule {shown(rule)} (rules: {shown(known, 200)[1:-1]})", owner=where, field="rule")
        job_params = spec.get("params", {})
        if not isinstance(job_params, Mapping):
            out.add(f"must be a table, not {type(job_params).__name__}", owner=where, field="params")
            job_params = {}
        deps = spec.get("deps", [])
        if isinstance(deps, str):
            deps = [deps]
        if not isinstance(deps, list) or not all(isinstance(dep, str) for dep in deps):
            out.add("must be a list of job names", owner=where, field="deps")
            deps = []
        key = spec.get("key")
        if key is not None and not isinstance(key, str):
            out.add(f"must be a string, not {type(key).__name__}", owner=where, field="key")
            key = None
        bindings = _foreach(spec.get("foreach"), params, where, out)
        if bindings is None:
            continue
        if "foreach" in spec and not (_template_names_safe(label) & set(bindings[0])):
            out.add("the job's name must use a foreach variable, e.g. 'project_{i}'", owner=where, field="foreach")
            continue
        if len(raws) + len(bindings) > MAX_JOBS:
            out.add(f"the request would have more than {MAX_JOBS} jobs", owner=where, field="foreach")
            return raws
        for binding in bindings:
            raw = _expand_one(label, where, spec, params, binding, job_params, deps, key, out)
            if raw is not None:
                raws.append(raw)
            if out.full:
                return raws
    return raws


def _template_names_safe(template: str) -> set[str]:
    try:
        return template_names(template)
    except ExprError:
        return set()


def _foreach(value: object, params: Mapping[str, object], where: str, out: Collector) -> list[dict[str, object]] | None:
    """The variable bindings of a foreach (one empty binding when there is none); None after an error."""
    if value is None:
        return [{}]
    if isinstance(value, list):
        if not value or not all(isinstance(row, Mapping) for row in value):
            out.add("a foreach array must be a non-empty list of tables", owner=where, field="foreach")
            return None
        if len(value) > MAX_JOBS:
            out.add(f"foreach gives {len(value)} jobs, over the limit of {MAX_JOBS}", owner=where, field="foreach")
            return None
        rows: list[dict[str, object]] = []
        for row in value:
            checked = parse_params(row, out, where, "foreach")
            if len(checked) != len(row):
                return None
            rows.append(checked)
        if any(set(row) != set(rows[0]) for row in rows):
            out.add("every table of a foreach array must bind the same variables", owner=where, field="foreach")
            return None
        return rows
    if not isinstance(value, Mapping) or not value:
        out.add("must be a non-empty table of lists or an array of tables", owner=where, field="foreach")
        return None
    axes: list[tuple[str, list[object]]] = []
    for name, values in value.items():
        if not isinstance(name, str) or not IDENT_RE.fullmatch(name) or name in RESERVED_PARAMS:
            out.add(
                f"variable {shown(name)} must be an identifier and not 'job' or 'deps'", owner=where, field="foreach"
            )
            return None
        axis = _axis(values, params, name, where, out)
        if axis is None:
            return None
        axes.append((name, axis))
    total = 1
    for _, axis in axes:
        total *= len(axis)
    if total > MAX_JOBS:
        out.add(f"foreach gives {total} jobs, over the limit of {MAX_JOBS}", owner=where, field="foreach")
        return None
    keys = [name for name, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axis for _, axis in axes))]


def _axis(values: object, params: Mapping[str, object], name: str, where: str, out: Collector) -> list[object] | None:
    def problem(message: str) -> None:
        out.add(f"variable {name!r}: {message}", owner=where, field="foreach")

    if isinstance(values, list):
        if not values or not all(isinstance(v, str | int | float | bool) for v in values):
            problem("must be a non-empty list of strings or numbers")
            return None
        if len(values) > MAX_JOBS:
            problem(f"has {len(values)} values, over the limit of {MAX_JOBS}")
            return None
        return list(values)
    match = _RANGE_RE.fullmatch(values) if isinstance(values, str) else None
    if match is None:
        problem(f"must be a list or 'range(start, stop[, step])', not {shown(values)}")
        return None
    bounds: list[int] = []
    for text in _split_args(match.group(1)):
        try:
            number = evaluate(text, params)
        except ExprError as exc:
            problem(str(exc))
            return None
        if not isinstance(number, int):
            problem(f"range() bounds must be whole numbers, {shown(text.strip())} is {number!r}")
            return None
        bounds.append(number)
    if not 1 <= len(bounds) <= 3 or (len(bounds) == 3 and bounds[2] == 0):
        problem("range() takes 1 to 3 whole numbers and a non-zero step")
        return None
    span = range(*bounds)
    if len(span) > MAX_JOBS:
        problem(f"range gives {len(span)} values, over the limit of {MAX_JOBS}")
        return None
    if not span:
        problem(f"range({shown(match.group(1).strip())[1:-1]}) is empty")
        return None
    return list(span)


def _split_args(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            yield text[start:index]
            start = index + 1
    yield text[start:]


def _expand_one(
    label: str,
    where: str,
    spec: Mapping[str, Any],
    params: Mapping[str, object],
    binding: Mapping[str, object],
    job_params: Mapping[str, object],
    deps: Sequence[str],
    key: str | None,
    out: Collector,
) -> Raw | None:
    scope = {**params, **binding}
    try:
        name = render(label, scope)
    except ExprError as exc:
        out.add(str(exc), owner=where, field="name")
        return None
    if not JOB_NAME_RE.fullmatch(name):
        out.add(JOB_NAME_RULE, owner=job_owner(name), field="name")
        return None
    where = job_owner(name)
    scope["job"] = name
    env: dict[str, object] = dict(scope)
    spent = len(name)
    for param, value in parse_params(job_params, out, where, "params").items():
        if isinstance(value, str):
            try:
                value = render(value, scope)
            except ExprError as exc:
                out.add(f"parameter {param!r}: {exc}", owner=where, field="params")
                continue
            spent += len(value)
        env[param] = value
    patterns: list[str] = []
    for dep in deps:
        try:
            patterns.append(render(dep, scope))
        except ExprError as exc:
            out.add(str(exc), owner=where, field="deps")
    rendered_key: str | None = None
    if key is not None:
        try:
            rendered_key = render(key, env)
        except ExprError as exc:
            out.add(str(exc), owner=where, field="key")
    if not out.spend(spent + sum(map(len, patterns)) + len(rendered_key or ""), where):
        return None
    return Raw(name, where, spec, env, patterns, rendered_key)
