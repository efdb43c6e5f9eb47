"""The ``jobs`` entries of a workflow to :class:`~matcher.workflow.model.JobTemplate`: ``foreach`` expansion
and the name, params, deps and key templates of each job; dependency patterns (``deps`` entries with ``*``,
``?`` or ``[``) resolved against the job names within a budget; then each job compiled: deps resolved,
command and requirements compiled, text and edges counted against the request's limits.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matcher.limits import JOB_NAME_RE, JOB_NAME_RULE, MAX_EDGES, MAX_JOBS, MAX_PATTERN_WORK, MAX_RETRIES
from taskqueues.errors import shown
from taskqueues.requirements import MAX_NAMES

from .document import IDENT_RE, RESERVED_PARAMS, parse_params
from .expr import ExprError, evaluate, render, template_dep_refs, template_names
from .model import Collector, JobTemplate, Rule, job_owner
from .values import Deferred, check_names, read_ete_hint, requirement_value

__all__ = ["PATTERN_CHARS", "Patterns", "Raw", "compile_jobs", "expand_jobs", "resolve_deps"]

_JOB_KEYS = frozenset({"name", "rule", "command", "params", "requirements", "deps", "key", "ete", "foreach", "retry"})
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


PATTERN_CHARS = frozenset("*?[")


class Patterns:
    """``deps`` patterns resolved against the job names, within a budget of names tried.

    A pattern's literal head (``"part_3_"`` of ``"part_3_*"``) selects its candidates by bisection in the
    sorted names, so per-job patterns of a fan-in cost what they match; a pattern that starts with a
    wildcard tries every name. Each distinct pattern is resolved once. Matches keep the order of the file.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.position = {name: index for index, name in enumerate(names)}
        self.sorted = sorted(self.position)
        self.found: dict[str, list[str]] = {}
        self.work = 0

    def match(self, pattern: str) -> list[str] | None:
        """The names matching ``pattern``; None once :data:`MAX_PATTERN_WORK` names have been tried."""
        if pattern not in self.found:
            head = pattern[: min((pattern.index(c) for c in PATTERN_CHARS if c in pattern), default=len(pattern))]
            matches = re.compile(fnmatch.translate(pattern)).match
            found = []
            for index in range(bisect.bisect_left(self.sorted, head), len(self.sorted)):
                name = self.sorted[index]
                if not name.startswith(head):
                    break
                self.work += 1
                if self.work > MAX_PATTERN_WORK:
                    return None
                if matches(name):
                    found.append(name)
            self.found[pattern] = sorted(found, key=self.position.__getitem__)
        return self.found[pattern]


def resolve_deps(raw: Raw, patterns: Patterns, out: Collector) -> tuple[str, ...] | None:
    """The job's dependencies with patterns expanded; None when the patterns cost too much to resolve."""
    resolved: dict[str, None] = {}
    for pattern in raw.dep_patterns:
        if PATTERN_CHARS & set(pattern):
            matched = patterns.match(pattern)
            if matched is None:
                out.add(
                    f"matching the deps patterns of the request tries over {MAX_PATTERN_WORK} job names: "
                    "name the dependencies, or use fewer distinct patterns",
                    owner=raw.entry,
                    field="deps",
                )
                return None
            matched = [name for name in matched if name != raw.name]
            if not matched:
                out.add(f"pattern {shown(pattern)} matches no job", owner=raw.entry, field="deps")
            resolved.update(dict.fromkeys(matched))
        else:
            resolved[pattern] = None  # unknown names are reported by the graph check, with the others
    return tuple(resolved)


def compile_jobs(raws: Sequence[Raw], rules: Mapping[str, Rule], out: Collector) -> list[JobTemplate]:
    """The jobs compiled in file order; it stops at the first limit the request passes (edges, patterns, text)."""
    patterns = Patterns([raw.name for raw in raws])
    jobs: list[JobTemplate] = []
    edges = 0
    for raw in raws:
        deps = resolve_deps(raw, patterns, out)
        if deps is None:
            break
        edges += len(deps)
        if edges > MAX_EDGES:
            out.add(f"the request has over {MAX_EDGES} dependency edges by this job", owner=raw.entry, field="deps")
            break
        jobs.append(_compile(raw, deps, rules, out))
        if out.full:
            break
    return jobs


def _text_size(value: object) -> int:
    """About how many characters ``value`` takes in a stored record."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(map(_text_size, value)) + 2
    return 8


def _env_text(env: Mapping[str, object]) -> int:
    """About how much text ``env`` adds to a stored job (its deferred requirements keep it whole)."""
    return sum(len(name) + _text_size(value) for name, value in env.items())


def _compile(raw: Raw, deps: tuple[str, ...], rules: Mapping[str, Rule], out: Collector) -> JobTemplate:
    spec, env, where = raw.spec, raw.env, raw.entry
    rule = rules.get(spec["rule"]) if isinstance(spec.get("rule"), str) else None
    needs: set[tuple[str, str]] = set()

    command = spec.get("command", rule.command if rule else None)
    command_deferred = False
    if not isinstance(command, str) or not command.strip():
        out.add("no command: give 'command' or a 'rule' that has one", owner=where, field="command")
        command = ""
    else:
        try:
            refs = template_dep_refs(command)
            command_problems = check_names(template_names(command), refs, env, deps)
            for problem in command_problems:
                out.add(problem, owner=where, field="command")
            needs |= refs
            command_deferred = bool(refs)
            if not command_deferred and not command_problems:
                command = render(command, env)
        except ExprError as exc:
            out.add(str(exc), owner=where, field="command")

    requirements: dict[str, object] = {}
    deferred: dict[str, str] = {}
    own = spec.get("requirements", {})
    if not isinstance(own, Mapping):
        out.add(f"must be a table, not {type(own).__name__}", owner=where, field="requirements")
        own = {}
    merged = {**(rule.requirements if rule else {}), **own}
    if len(merged) > MAX_NAMES:
        out.add(
            f"at most {MAX_NAMES} requirement names are allowed, got {len(merged)}", owner=where, field="requirements"
        )
        merged = {}
    for name, value in merged.items():
        if not isinstance(name, str) or not name:
            out.add(
                f"a requirement name must be a non-empty string, not {shown(name)}", owner=where, field="requirements"
            )
            continue
        outcome = requirement_value(name, value, env, deps, where, out)
        if isinstance(outcome, Deferred):
            deferred[name] = outcome.text
            needs |= outcome.refs
        else:
            requirements[name] = outcome

    ete_hint = read_ete_hint(spec.get("ete", rule.ete if rule else None), requirements, env, where, out)
    retry_on, retry_max = _retry(spec.get("retry"), where, out)
    stored = len(command) + sum(map(_text_size, requirements.values()))
    if deferred or command_deferred:
        stored += _env_text(env) + sum(map(len, deferred.values()))
    out.spend(stored, where)
    return JobTemplate(
        name=raw.name,
        command=command,
        requirements=requirements,
        deps=deps,
        raw_requirements=merged,
        deferred=deferred,
        command_deferred=command_deferred,
        needs_outputs=frozenset(needs),
        key=raw.key,
        rule=rule.name if rule else None,
        ete_hint=ete_hint,
        params=env,
        retry_on=retry_on,
        retry_max=retry_max,
    )


def _retry(value: object, where: str, out: Collector) -> tuple[tuple[int, ...], int]:
    """A job's ``retry = {on_exit = [3, 137], max = 2}``: exit codes 0..255, at most MAX_RETRIES runs more."""
    if value is None:
        return (), 0
    if not isinstance(value, Mapping) or set(value) != {"on_exit", "max"}:
        out.add(f"must be a table {{on_exit = [codes], max = N}}, not {shown(value)}", owner=where, field="retry")
        return (), 0
    codes, most = value["on_exit"], value["max"]
    if (
        not isinstance(codes, list)
        or not codes
        or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes)
    ):
        out.add(f"on_exit must list exit codes 0..255, not {shown(codes)}", owner=where, field="retry")
        return (), 0
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= MAX_RETRIES:
        out.add(f"max must be a whole number within 1..{MAX_RETRIES}, not {shown(most)}", owner=where, field="retry")
        return (), 0
    return tuple(sorted(set(codes))), most
