"""Workflow files: a request of jobs with dependencies, rules, parameters and computed requirements.

A workflow is a TOML or JSON file (the same model; JSON is for programs that generate workflows)::

    name = "montage-small"
    priority = 0                 # optional: shifts every job's score this many seconds earlier
    [params]                     # request-wide parameters
    n = 4
    [rules.project]              # a rule: a command template, requirement templates, an ETE hint
    command = "mProject {input} {output}"
    requirements = { cpu = 1, mem = "max(512M, 2 * size)" }
    ete = "30s"
    [[jobs]]
    name = "p1"
    rule = "project"
    params = { input = "a.fits", output = "p1.fits", size = "300M" }
    key = "project:a.fits"       # optional: names the job across runs, for its run-time estimate
    [[jobs]]
    name = "merge"
    command = "echo merge"
    deps = ["p1"]
    requirements = { cpu = 2, mem = "2 * deps.p1.out_mb" }

Keys of a job: ``name``, ``rule``, ``command``, ``params``, ``requirements``, ``deps``, ``key``, ``ete``,
``foreach``. A job's own ``command``, ``requirements`` and ``ete`` override its rule's, name by name.

Names a template or an expression can read (:mod:`taskqueues.expr`): the request's ``params``, the
``foreach`` variables, the job's ``params`` (these win, in that order), and ``job``, the job's name.
A job's ``name`` is a template over the request's params and the foreach variables; its string
``params``, ``key`` and ``deps`` are templates over those and ``job``.

Requirement values
    * numbers, booleans and lists pass through; the submission chain validates them
      (:func:`taskqueues.requirements.parse_requirements`).
    * For a *numeric* requirement (``cpu``, ``mem``, ``tmp``, ``wall``, ``gpu``, ``ete``, and any
      ``Max*``/``Min*`` name) a string is an expression, unless it is one plain quantity (``"4G"``,
      ``"2h"``, ``"1h30m"``, ``"1:30:00"``), which passes through unchanged. An expression gives a
      number: MB for sizes, seconds for durations (``wall``, ``ete`` and names ending in ``time``; see
      the unit rule in :mod:`taskqueues.expr`).
    * For any other requirement (``Site``, ``Platform``, ``SoftwareTag``...) a string, or each string
      of a list, is a ``{name}`` template.
    An expression that reads no dependency output is evaluated at load time; if that evaluation fails
    (division by zero, a parameter that is not a number...), that job alone is marked failed
    (:attr:`JobTemplate.error`), the rest of the request runs. An expression that reads
    ``deps.<job>.<value>`` is kept in :attr:`JobTemplate.deferred` and evaluated when the job is
    released (:func:`evaluate_deferred`); a command that reads one is rendered then too
    (:func:`render_command`). A job may only read outputs of its own declared dependencies.

Generating jobs: ``foreach``
    * a table of variables, each a list of values or ``"range(start, stop[, step])"`` (its arguments
      are expressions over the request's params): one job per combination, e.g.
      ``foreach = { i = "range(0, n)" }``;
    * or an array of tables, one job per table: ``foreach = [{ a = 0, b = 1 }, { a = 1, b = 2 }]``.
    The job's ``name`` must use a foreach variable, so each generated job has its own name.

Dependencies
    ``deps`` lists job names; an entry with ``*``, ``?`` or ``[`` is a pattern (``"project_*"``) that
    stands for every matching job, and must match at least one. Job names are letters, digits, ``_``
    and ``-`` (so they can appear in ``deps.<job>.<value>``).

Outputs of a payload
    A payload reports named values by writing ``KEY=VALUE`` lines to the file named by the environment
    variable ``$PILOTFISH_OUTPUTS`` (:data:`OUTPUTS_ENV`), which the pilot always sets and reads once the
    payload succeeded (:func:`parse_outputs`). Keys are identifiers; blank lines and ``#`` comments are
    skipped; a repeated key keeps its last value. Example: ``echo "out_mb=42" >> "$PILOTFISH_OUTPUTS"``.
    In a command template, a shell ``${VAR}`` must be written ``${{VAR}}``; plain ``$VAR`` needs nothing.

Validation collects every problem of the file, each naming its job (duplicate names, unknown rules or
dependencies, cycles, missing parameters, bad expressions, unknown keys, an empty request...), and
raises one :class:`WorkflowError` listing them all, so a user fixes a file in one pass.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskqueues.dag import DagError, check_dag
from taskqueues.errors import ValidationError
from taskqueues.expr import (
    ExprError,
    Kind,
    dep_refs,
    evaluate,
    names,
    parse,
    parse_quantity,
    render,
    template_dep_refs,
    template_names,
)

__all__ = [
    "MAX_JOBS",
    "OUTPUTS_ENV",
    "JobTemplate",
    "Rule",
    "Workflow",
    "WorkflowError",
    "evaluate_deferred",
    "is_duration",
    "is_numeric",
    "load_workflow",
    "parse_outputs",
    "parse_workflow",
    "render_command",
]

OUTPUTS_ENV = "PILOTFISH_OUTPUTS"
MAX_JOBS = 100_000
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_OUTPUTS = 100
MAX_OUTPUT_VALUE = 4096
_MAX_LISTED = 50

_TOP_KEYS = frozenset({"name", "description", "priority", "params", "rules", "jobs"})
_RULE_KEYS = frozenset({"command", "requirements", "ete"})
_JOB_KEYS = frozenset({"name", "rule", "command", "params", "requirements", "deps", "key", "ete", "foreach"})
_RESERVED_PARAMS = frozenset({"job", "deps"})
_NUMERIC = frozenset({"cpu", "mem", "tmp", "wall", "gpu", "ete"})
_DURATIONS = frozenset({"wall", "ete"})
_JOB_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,199}")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RANGE_RE = re.compile(r"\s*range\s*\((.*)\)\s*", re.DOTALL)
# One quantity as taskqueues.units reads it: "4G", "10 GB", "1h30m", "1d 12h", "1:30:00", "2-00:00:00".
_PLAIN_QUANTITY_RE = re.compile(
    r"\s*(?:(?:\d+(?:\.\d*)?|\.\d+)\s*[A-Za-z]*"
    r"|(?:\d+(?:\.\d*)?\s*[A-Za-z]\s*)+"
    r"|(?:\d+-)?\d+(?::\d+){1,2})\s*"
)
_PATTERN_CHARS = frozenset("*?[")

Scalar = str | int | float | bool


class WorkflowError(ValidationError):
    """A workflow is wrong; ``problems`` lists every problem found, each naming its job."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        shown = list(problems[:_MAX_LISTED])
        if len(problems) > _MAX_LISTED:
            shown.append(f"... and {len(problems) - _MAX_LISTED} more")
        count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
        super().__init__(f"invalid workflow {source} ({count}):\n  " + "\n  ".join(shown))
        self.source = source
        self.problems = list(problems)


def is_numeric(requirement: str) -> bool:
    """Whether a requirement's string value is an expression (a number) rather than a template."""
    return requirement.lower() in _NUMERIC or is_duration(requirement) or _is_comparison(requirement)


def is_duration(requirement: str) -> bool:
    """Whether a requirement is a duration (seconds, ``s m h d w`` units) rather than a size."""
    lowered = requirement.lower()
    return lowered in _DURATIONS or lowered.endswith("time")


def _is_comparison(requirement: str) -> bool:
    return len(requirement) > 3 and requirement[:3] in ("Max", "Min") and requirement[3].isupper()


def _kind(requirement: str) -> Kind:
    return "duration" if is_duration(requirement) else "size"


@dataclass(frozen=True)
class Rule:
    """What jobs of one kind share: a command template, requirement templates, an ETE hint."""

    name: str
    command: str | None = None
    requirements: Mapping[str, object] = field(default_factory=dict)
    ete: object = None


@dataclass(frozen=True)
class JobTemplate:
    """One job of a workflow, ready for submission.

    ``command`` is rendered, unless ``command_deferred`` (it reads dependency outputs: then it is the
    template, for :func:`render_command`). ``requirements`` holds plain values and the expressions
    already evaluated; ``deferred`` the expressions that wait for dependency outputs, by requirement
    name; ``needs_outputs`` the ``(dependency, value)`` pairs they read. ``ete_hint`` is in seconds.
    ``raw_requirements`` are the values as written (rule and job merged), for display.
    ``error`` is set when something about this job alone failed at load: the job must be failed with
    this reason, not run.
    """

    name: str
    command: str
    requirements: dict[str, object]
    deps: tuple[str, ...] = ()
    raw_requirements: dict[str, object] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    command_deferred: bool = False
    needs_outputs: frozenset[tuple[str, str]] = frozenset()
    key: str | None = None
    rule: str | None = None
    ete_hint: float | None = None
    params: dict[str, object] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Workflow:
    """A validated workflow; ``order`` lists the job names with every dependency before its dependents."""

    name: str
    source: str
    jobs: list[JobTemplate]
    order: list[str]
    priority: float = 0.0
    params: dict[str, object] = field(default_factory=dict)
    rules: dict[str, Rule] = field(default_factory=dict)
    description: str = ""

    def job(self, name: str) -> JobTemplate:
        """The job called ``name`` (KeyError if none)."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    @property
    def deps(self) -> dict[str, tuple[str, ...]]:
        """Dependencies by job name, as :mod:`taskqueues.dag` takes them."""
        return {job.name: job.deps for job in self.jobs}


# ------------------------------------------------------------------------------------------ loading


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate a ``.toml`` or ``.json`` workflow file."""
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise WorkflowError(source, [f"file is {size} bytes, over the limit of {MAX_FILE_BYTES}"])
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkflowError(source, [f"cannot read the file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise WorkflowError(source, [f"not UTF-8 text: {exc.reason} at byte {exc.start}"]) from None
    suffix = path.suffix.lower()
    data: object
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise WorkflowError(source, [f"TOML syntax: {exc}"]) from None
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkflowError(source, [f"JSON syntax: {exc.msg} at line {exc.lineno}, column {exc.colno}"]) from None
    else:
        raise WorkflowError(source, [f"unknown file type {suffix!r}: use .toml or .json"])
    if not isinstance(data, dict):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    return parse_workflow(data, source)


@dataclass
class _Raw:
    """A job after foreach expansion, before its deps are resolved and its templates compiled."""

    name: str
    entry: str  # how problems name the entry it came from, when the name itself failed
    spec: Mapping[str, Any]
    env: dict[str, object]
    dep_patterns: list[str]
    key: str | None


class _Collector:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}" if where else message)


def parse_workflow(data: Mapping[str, Any], source: str = "<workflow>") -> Workflow:
    """Validate a workflow given as a mapping (from TOML, JSON or a program). See the module docstring."""
    out = _Collector()
    if not isinstance(data, Mapping):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    for key in sorted(set(data) - _TOP_KEYS):
        out.add("", f"unknown top-level key {key!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        out.add("", "'name' must be a non-empty string")
        name = ""
    description = data.get("description", "")
    if not isinstance(description, str):
        out.add("", "'description' must be a string")
        description = ""
    priority = data.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int | float) or not math.isfinite(priority):
        out.add("", f"'priority' must be a number of seconds, not {priority!r}")
        priority = 0
    params = _parse_params(data.get("params", {}), "params", out)
    rules = _parse_rules(data.get("rules", {}), out)
    raw_jobs = _expand_jobs(data.get("jobs"), params, rules, out)
    jobs = _compile_jobs(raw_jobs, rules, out)
    order: list[str] = []
    if jobs:
        # Checked even when other problems were found, so cycles and unknown deps are listed with them.
        try:
            order = check_dag([job.name for job in jobs], {job.name: job.deps for job in jobs})
        except DagError as exc:
            out.problems.extend(exc.problems)
    if out.problems:
        raise WorkflowError(source, out.problems)
    return Workflow(
        name=name,
        source=source,
        jobs=jobs,
        order=order,
        priority=float(priority),
        params=params,
        rules=rules,
        description=description,
    )


def _parse_params(value: object, where: str, out: _Collector) -> dict[str, object]:
    if not isinstance(value, Mapping):
        out.add(where, f"must be a table of name = value, not {type(value).__name__}")
        return {}
    params: dict[str, object] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not _IDENT_RE.fullmatch(name):
            out.add(where, f"parameter name {name!r} must be an identifier (letters, digits, _)")
        elif name in _RESERVED_PARAMS:
            out.add(where, f"parameter name {name!r} is reserved")
        elif not isinstance(item, str | int | float | bool):
            out.add(
                where,
                f"parameter {name!r} must be a string, a number or a boolean, not {type(item).__name__}",
            )
        else:
            params[name] = item
    return params


def _parse_rules(value: object, out: _Collector) -> dict[str, Rule]:
    if not isinstance(value, Mapping):
        out.add("rules", f"must be a table of rules, not {type(value).__name__}")
        return {}
    rules: dict[str, Rule] = {}
    for name, spec in value.items():
        where = f"rule {name!r}"
        if not isinstance(spec, Mapping):
            out.add(where, f"must be a table, not {type(spec).__name__}")
            continue
        for key in sorted(set(spec) - _RULE_KEYS):
            out.add(where, f"unknown key {key!r} (known: {', '.join(sorted(_RULE_KEYS))})")
        command = spec.get("command")
        if command is not None and not isinstance(command, str):
            out.add(where, "'command' must be a string")
            command = None
        requirements = spec.get("requirements", {})
        if not isinstance(requirements, Mapping):
            out.add(where, "'requirements' must be a table")
            requirements = {}
        rules[name] = Rule(name, command, dict(requirements), spec.get("ete"))
    return rules


# ------------------------------------------------------------------------------- foreach expansion


def _expand_jobs(value: object, params: dict[str, object], rules: Mapping[str, Rule], out: _Collector) -> list[_Raw]:
    if value is None or (isinstance(value, list) and not value):
        out.add("", "the request has no jobs: add at least one [[jobs]] entry")
        return []
    if not isinstance(value, list):
        out.add("jobs", f"must be an array of tables, not {type(value).__name__}")
        return []
    raws: list[_Raw] = []
    for number, spec in enumerate(value, start=1):
        entry = f"jobs entry #{number}"
        if not isinstance(spec, Mapping):
            out.add(entry, f"must be a table, not {type(spec).__name__}")
            continue
        label = spec.get("name")
        where = f"job {label!r}" if isinstance(label, str) else entry
        for key in sorted(set(spec) - _JOB_KEYS):
            out.add(where, f"unknown key {key!r} (known: {', '.join(sorted(_JOB_KEYS))})")
        if not isinstance(label, str):
            out.add(entry, "'name' must be a string")
            continue
        rule = spec.get("rule")
        if rule is not None and rule not in rules:
            known = ", ".join(sorted(rules)) or "none defined"
            out.add(where, f"unknown rule {rule!r} (rules: {known})")
        job_params = spec.get("params", {})
        if not isinstance(job_params, Mapping):
            out.add(where, "'params' must be a table")
            job_params = {}
        deps = spec.get("deps", [])
        if isinstance(deps, str):
            deps = [deps]
        if not isinstance(deps, list) or not all(isinstance(dep, str) for dep in deps):
            out.add(where, "'deps' must be a list of job names")
            deps = []
        key = spec.get("key")
        if key is not None and not isinstance(key, str):
            out.add(where, "'key' must be a string")
            key = None
        bindings = _foreach(spec.get("foreach"), params, where, out)
        if bindings is None:
            continue
        if "foreach" in spec and not (_template_names_safe(label) & set(bindings[0])):
            out.add(where, "a foreach entry must use a foreach variable in its name, e.g. 'project_{i}'")
            continue
        if len(raws) + len(bindings) > MAX_JOBS:
            out.add(where, f"the request would have more than {MAX_JOBS} jobs")
            return raws
        for binding in bindings:
            raw = _expand_one(label, where, spec, params, binding, job_params, deps, key, out)
            if raw is not None:
                raws.append(raw)
    return raws


def _template_names_safe(template: str) -> set[str]:
    try:
        return template_names(template)
    except ExprError:
        return set()


def _foreach(
    value: object, params: Mapping[str, object], where: str, out: _Collector
) -> list[dict[str, object]] | None:
    """The variable bindings of a foreach (one empty binding when there is none); None after an error."""
    if value is None:
        return [{}]
    if isinstance(value, list):
        if not value or not all(isinstance(row, Mapping) for row in value):
            out.add(where, "a foreach array must be a non-empty list of tables")
            return None
        rows: list[dict[str, object]] = []
        for row in value:
            checked = _parse_params(row, f"{where}, foreach", out)
            if len(checked) != len(row):
                return None
            rows.append(checked)
        if any(set(row) != set(rows[0]) for row in rows):
            out.add(where, "every table of a foreach array must bind the same variables")
            return None
        return rows
    if not isinstance(value, Mapping) or not value:
        out.add(where, "'foreach' must be a non-empty table of lists or an array of tables")
        return None
    axes: list[tuple[str, list[object]]] = []
    for name, values in value.items():
        if not isinstance(name, str) or not _IDENT_RE.fullmatch(name) or name in _RESERVED_PARAMS:
            out.add(where, f"foreach variable {name!r} must be an identifier and not 'job' or 'deps'")
            return None
        axis = _axis(values, params, f"{where}, foreach {name!r}", out)
        if axis is None:
            return None
        axes.append((name, axis))
    total = 1
    for _, axis in axes:
        total *= len(axis)
    if total > MAX_JOBS:
        out.add(where, f"foreach gives {total} jobs, over the limit of {MAX_JOBS}")
        return None
    keys = [name for name, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axis for _, axis in axes))]


def _axis(values: object, params: Mapping[str, object], where: str, out: _Collector) -> list[object] | None:
    if isinstance(values, list):
        if not values or not all(isinstance(v, str | int | float | bool) for v in values):
            out.add(where, "must be a non-empty list of strings or numbers")
            return None
        return list(values)
    match = _RANGE_RE.fullmatch(values) if isinstance(values, str) else None
    if match is None:
        out.add(where, f"must be a list or 'range(start, stop[, step])', not {values!r}")
        return None
    bounds: list[int] = []
    for text in _split_args(match.group(1)):
        try:
            number = evaluate(text, params)
        except ExprError as exc:
            out.add(where, str(exc))
            return None
        if not isinstance(number, int):
            out.add(where, f"range() bounds must be whole numbers, {text.strip()!r} is {number!r}")
            return None
        bounds.append(number)
    if not 1 <= len(bounds) <= 3 or (len(bounds) == 3 and bounds[2] == 0):
        out.add(where, "range() takes 1 to 3 whole numbers and a non-zero step")
        return None
    span = range(*bounds)
    if len(span) > MAX_JOBS:
        out.add(where, f"range gives {len(span)} values, over the limit of {MAX_JOBS}")
        return None
    if not span:
        out.add(where, f"range({match.group(1).strip()}) is empty")
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
    out: _Collector,
) -> _Raw | None:
    scope = {**params, **binding}
    try:
        name = render(label, scope)
    except ExprError as exc:
        out.add(where, f"name: {exc}")
        return None
    if not _JOB_NAME_RE.fullmatch(name):
        out.add(f"job {name!r}", "a job name is 1 to 200 letters, digits, '_' or '-', not starting with '-'")
        return None
    where = f"job {name!r}"
    scope["job"] = name
    env: dict[str, object] = dict(scope)
    for param, value in _parse_params(job_params, f"{where}, params", out).items():
        if isinstance(value, str):
            try:
                value = render(value, scope)
            except ExprError as exc:
                out.add(where, f"param {param!r}: {exc}")
                continue
        env[param] = value
    patterns: list[str] = []
    for dep in deps:
        try:
            patterns.append(render(dep, scope))
        except ExprError as exc:
            out.add(where, f"deps: {exc}")
    rendered_key: str | None = None
    if key is not None:
        try:
            rendered_key = render(key, env)
        except ExprError as exc:
            out.add(where, f"key: {exc}")
    return _Raw(name, where, spec, env, patterns, rendered_key)


# -------------------------------------------------------------------------------------- compiling


def _resolve_deps(raw: _Raw, all_names: Sequence[str], out: _Collector) -> tuple[str, ...]:
    resolved: dict[str, None] = {}
    for pattern in raw.dep_patterns:
        if _PATTERN_CHARS & set(pattern):
            matched = [name for name in all_names if name != raw.name and fnmatch.fnmatchcase(name, pattern)]
            if not matched:
                out.add(raw.entry, f"dependency pattern {pattern!r} matches no job")
            resolved.update(dict.fromkeys(matched))
        else:
            resolved[pattern] = None  # unknown names are reported by the graph check, with the others
    return tuple(resolved)


def _compile_jobs(raws: Sequence[_Raw], rules: Mapping[str, Rule], out: _Collector) -> list[JobTemplate]:
    all_names = [raw.name for raw in raws]
    return [_compile(raw, _resolve_deps(raw, all_names, out), rules, out) for raw in raws]


def _check_names(
    used: set[str], refs: set[tuple[str, str]], env: Mapping[str, object], deps: Sequence[str]
) -> list[str]:
    """Problems with the names a template or expression reads: missing params, outputs of non-deps."""
    problems = [f"missing param {name!r}" for name in sorted(used) if not name.startswith("deps.") and name not in env]
    problems.extend(
        f"reads deps.{job}.{value} but {job!r} is not one of its deps" for job, value in sorted(refs) if job not in deps
    )
    return problems


def _compile(raw: _Raw, deps: tuple[str, ...], rules: Mapping[str, Rule], out: _Collector) -> JobTemplate:
    spec, env, where = raw.spec, raw.env, raw.entry
    rule = rules.get(spec["rule"]) if isinstance(spec.get("rule"), str) else None
    errors: list[str] = []  # failures of this job alone, at evaluation
    needs: set[tuple[str, str]] = set()

    command = spec.get("command", rule.command if rule else None)
    command_deferred = False
    if not isinstance(command, str) or not command.strip():
        out.add(where, "no command: give 'command' or a 'rule' that has one")
        command = ""
    else:
        try:
            refs = template_dep_refs(command)
            command_problems = _check_names(template_names(command), refs, env, deps)
            for problem in command_problems:
                out.add(where, f"command: {problem}")
            needs |= refs
            command_deferred = bool(refs)
            if not command_deferred and not command_problems:
                command = render(command, env)
        except ExprError as exc:
            out.add(where, f"command: {exc}")

    requirements: dict[str, object] = {}
    deferred: dict[str, str] = {}
    own = spec.get("requirements", {})
    if not isinstance(own, Mapping):
        out.add(where, "'requirements' must be a table")
        own = {}
    merged = {**(rule.requirements if rule else {}), **own}
    for name, value in merged.items():
        if not isinstance(name, str) or not name:
            out.add(where, f"requirement name {name!r} must be a non-empty string")
            continue
        outcome = _requirement(name, value, env, deps, where, out)
        if isinstance(outcome, _Deferred):
            deferred[name] = outcome.text
            needs |= outcome.refs
        elif isinstance(outcome, _Failed):
            errors.append(outcome.reason)
        else:
            requirements[name] = outcome

    ete_hint = _ete_hint(spec.get("ete", rule.ete if rule else None), requirements, env, where, out, errors)
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
        error="; ".join(errors) or None,
    )


@dataclass(frozen=True)
class _Deferred:
    text: str
    refs: set[tuple[str, str]]


@dataclass(frozen=True)
class _Failed:
    reason: str


def _requirement(
    name: str, value: object, env: Mapping[str, object], deps: Sequence[str], where: str, out: _Collector
) -> object:
    """The load-time value of one requirement, a :class:`_Deferred`, or a :class:`_Failed` evaluation."""
    if isinstance(value, str) and is_numeric(name):
        if _PLAIN_QUANTITY_RE.fullmatch(value):
            return value
        try:
            used, refs = names(value), dep_refs(value)
        except ExprError as exc:
            out.add(where, f"requirement {name!r}: {exc}")
            return value
        problems = _check_names(used, refs, env, deps)
        for problem in problems:
            out.add(where, f"requirement {name!r}: {problem} in {value!r}")
        if problems:
            return value
        if refs:
            return _Deferred(value, refs)
        try:
            return evaluate(value, env, kind=_kind(name))
        except ExprError as exc:
            return _Failed(f"requirement {name!r}: {exc}")
    if isinstance(value, str):
        return _render_free(name, value, env, where, out)
    if isinstance(value, list):
        return [_render_free(name, item, env, where, out) if isinstance(item, str) else item for item in value]
    return value


def _render_free(name: str, value: str, env: Mapping[str, object], where: str, out: _Collector) -> str:
    try:
        used = template_names(value)
        if any(item.startswith("deps.") for item in used):
            out.add(
                where,
                f"requirement {name!r}: only commands and numeric requirements may read dependency outputs",
            )
            return value
        missing = sorted(item for item in used if item not in env)
        if missing:
            out.add(where, f"requirement {name!r}: missing param {missing[0]!r} in {value!r}")
            return value
        return render(value, env)
    except ExprError as exc:
        out.add(where, f"requirement {name!r}: {exc}")
        return value


def _ete_hint(
    value: object,
    requirements: Mapping[str, object],
    env: Mapping[str, object],
    where: str,
    out: _Collector,
    errors: list[str],
) -> float | None:
    """The job's ETE hint in seconds: its ``ete``, else its ``wall`` requirement when that is readable."""
    if value is None:
        wall = requirements.get("wall")
        if isinstance(wall, int | float) and not isinstance(wall, bool):
            return float(wall)
        if isinstance(wall, str):
            try:
                return float(parse_quantity(wall, "duration"))
            except ExprError:
                return None  # a clock form like "1:30:00": the requirement check reads it, no hint
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        out.add(where, f"'ete' must be seconds or a duration expression, not {value!r}")
        return None
    if isinstance(value, int | float):
        if not 0 <= value < float("inf"):
            out.add(where, f"'ete' must be a finite number of seconds >= 0, not {value!r}")
            return None
        return float(value)
    try:
        parse(value)
        refs = dep_refs(value)
    except ExprError as exc:
        out.add(where, f"ete: {exc}")
        return None
    problems = _check_names(names(value), set(), env, ())
    if refs:
        problems.append("an ETE hint is needed at submission, it cannot read dependency outputs")
    for problem in problems:
        out.add(where, f"ete: {problem}")
    if problems:
        return None
    try:
        hint = evaluate(value, env, kind="duration")
    except ExprError as exc:
        errors.append(f"ete: {exc}")
        return None
    if hint < 0:
        errors.append(f"ete: {value!r} gives {hint}, a negative duration")
        return None
    return float(hint)


# --------------------------------------------------------------------------------- release time


def evaluate_deferred(job: JobTemplate, dep_outputs: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """The job's full requirements once its dependencies reported ``dep_outputs`` (job -> name -> value).

    Raises :class:`~taskqueues.expr.ExprError` naming the job and the requirement when an output is
    missing or an evaluation fails: the caller fails that job with this reason.
    """
    result = dict(job.requirements)
    for name, text in job.deferred.items():
        try:
            result[name] = evaluate(text, job.params, dep_outputs, kind=_kind(name))
        except ExprError as exc:
            raise exc.located(job=job.name, field=name) from None
    return result


def render_command(job: JobTemplate, dep_outputs: Mapping[str, Mapping[str, object]]) -> str:
    """The job's command, with the dependency outputs it reads filled in (unchanged when it reads none)."""
    if not job.command_deferred:
        return job.command
    try:
        return render(job.command, job.params, dep_outputs)
    except ExprError as exc:
        raise exc.located(job=job.name, field="command") from None


def parse_outputs(text: str, *, job: str | None = None) -> dict[str, str]:
    """The ``KEY=VALUE`` lines a payload wrote to ``$PILOTFISH_OUTPUTS`` (see the module docstring).

    Raises :class:`~taskqueues.errors.ValidationError` naming the line for a malformed line, a key that
    is not an identifier, a value over :data:`MAX_OUTPUT_VALUE` characters or more than
    :data:`MAX_OUTPUTS` keys: the pilot decides whether that fails the job.
    """
    outputs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not _IDENT_RE.fullmatch(key):
            raise ValidationError(
                f"line {number} is not KEY=VALUE with an identifier key: {line[:80]!r}",
                job=job,
                field=OUTPUTS_ENV,
            )
        if len(value) > MAX_OUTPUT_VALUE:
            raise ValidationError(
                f"line {number}: value of {key!r} over {MAX_OUTPUT_VALUE} characters",
                job=job,
                field=OUTPUTS_ENV,
            )
        outputs[key] = value.strip()
        if len(outputs) > MAX_OUTPUTS:
            raise ValidationError(f"more than {MAX_OUTPUTS} outputs", job=job, field=OUTPUTS_ENV)
    return outputs
