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

Validation collects every problem of the file, each naming its job and field (duplicate names, unknown
rules or dependencies, cycles, missing parameters, bad expressions, unknown keys, an empty request...), and
raises one :class:`WorkflowError` listing them all on one line after the file's name, so a user fixes a
file in one pass: ``bad.toml: job 'x', field 'mem': ...; job 'y', field 'deps': ...``. What a file expands
to is bounded while it expands (:mod:`matcher.limits`: jobs, text, dependency edges, pattern matching),
so a small file cannot build a huge request in memory before it is refused.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import json
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskqueues.dag import DagError, check_dag
from taskqueues.errors import ProblemList, ValidationError, located, shown
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
from taskqueues.requirements import MAX_NAMES

from .limits import (
    JOB_NAME_RE,
    JOB_NAME_RULE,
    MAX_EDGES,
    MAX_ETE,
    MAX_JOBS,
    MAX_NAME,
    MAX_PATTERN_WORK,
    MAX_PRIORITY,
    MAX_REQUEST_TEXT,
    RULE_NAME_RE,
    RULE_NAME_RULE,
    check_number,
    check_text,
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
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_OUTPUTS = 100
MAX_OUTPUT_VALUE = 4096

_TOP_KEYS = frozenset({"name", "description", "priority", "params", "rules", "jobs"})
_RULE_KEYS = frozenset({"command", "requirements", "ete"})
_JOB_KEYS = frozenset({"name", "rule", "command", "params", "requirements", "deps", "key", "ete", "foreach"})
_RESERVED_PARAMS = frozenset({"job", "deps"})
_NUMERIC = frozenset({"cpu", "mem", "tmp", "wall", "gpu", "ete"})
_DURATIONS = frozenset({"wall", "ete"})
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


class WorkflowError(ProblemList):
    """A workflow is wrong: one line, ``<file>: <problem>; <problem>...``, each problem naming its job
    and field; ``problems`` lists them all."""


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
    """Read and validate a ``.toml`` or ``.json`` workflow file; every refusal names the file first."""
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
    if suffix not in (".toml", ".json"):
        raise WorkflowError(source, [f"unknown file type {shown(suffix)}: use .toml or .json"])
    data = _decode(text, suffix, source)
    if not isinstance(data, dict):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    return parse_workflow(data, source)


def _decode(text: str, suffix: str, source: str) -> object:
    """The document a TOML or JSON text holds; its syntax errors, and the values no Python object can
    hold (an integer of more than 4300 digits, arrays nested past the recursion limit), as WorkflowError."""
    syntax = "TOML" if suffix == ".toml" else "JSON"
    try:
        return tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"JSON syntax: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"TOML syntax: {exc}"
    except RecursionError:
        problem = f"{syntax} syntax: arrays or tables nested too deeply to read"
    except ValueError as exc:  # int() of a number over Python's limit of 4300 digits
        problem = f"{syntax} syntax: a number is too long to read ({str(exc).split(';')[0]})"
    raise WorkflowError(source, [problem])


@dataclass
class _Raw:
    """A job after foreach expansion, before its deps are resolved and its templates compiled."""

    name: str
    entry: str  # how problems name the job ("job 'x'")
    spec: Mapping[str, Any]
    env: dict[str, object]
    dep_patterns: list[str]
    key: str | None


class _Collector:
    """The problems found so far, each located (``job 'x', field 'mem': ...``), and the text spent.

    ``spend`` counts the text the request's jobs hold as the file expands (see
    :data:`matcher.limits.MAX_REQUEST_TEXT`); once over, it records one problem and says to stop.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.text = 0
        self.full = False

    def add(self, message: str, *, owner: str = "", field: object = None) -> None:
        self.problems.append(located(message, owner=owner, field=field))

    def spend(self, size: int, owner: str) -> bool:
        """Count ``size`` characters of stored text; False (and one problem) once the request is over its limit."""
        self.text += size
        if self.text > MAX_REQUEST_TEXT and not self.full:
            self.full = True
            self.add(f"the request's jobs hold over {MAX_REQUEST_TEXT // 2**20} MiB of text (commands, names, "
                     "keys, parameters) by this job: split it into smaller requests", owner=owner)
        return not self.full


def _job_owner(name: object) -> str:
    return f"job {shown(name, MAX_NAME)}"


def parse_workflow(data: Mapping[str, Any], source: str = "<workflow>") -> Workflow:
    """Validate a workflow given as a mapping (from TOML, JSON or a program). See the module docstring."""
    out = _Collector()
    if not isinstance(data, Mapping):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    for key in sorted(set(data) - _TOP_KEYS, key=str):
        out.add(f"unknown top-level field (known: {', '.join(sorted(_TOP_KEYS))})", field=key)
    try:
        name = check_text(data.get("name"), job=None, field="name", limit=MAX_NAME, line=True)
        if not name.strip():
            raise ValidationError("must not be blank", field="name")
    except ValidationError as exc:
        out.problems.append(str(exc))
        name = ""
    description = data.get("description", "")
    if not isinstance(description, str):
        out.add(f"must be a string, not {type(description).__name__}", field="description")
        description = ""
    priority = data.get("priority", 0)
    try:
        check_number(priority, job=None, field="priority", low=-MAX_PRIORITY, high=MAX_PRIORITY,
                     what="a number of seconds")
    except ValidationError as exc:
        out.problems.append(str(exc))
        priority = 0
    params = _parse_params(data.get("params", {}), out, "", "params")
    rules = _parse_rules(data.get("rules", {}), out)
    raw_jobs = _expand_jobs(data.get("jobs"), params, rules, out)
    jobs = _compile_jobs(raw_jobs, rules, out)
    order: list[str] = []
    if jobs and not out.full:
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


def _parse_params(value: object, out: _Collector, owner: str, field: str) -> dict[str, object]:
    if not isinstance(value, Mapping):
        out.add(f"must be a table of name = value, not {type(value).__name__}", owner=owner, field=field)
        return {}
    params: dict[str, object] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not _IDENT_RE.fullmatch(name):
            out.add(f"parameter name {shown(name)} must be an identifier (letters, digits, _)", owner=owner,
                    field=field)
        elif name in _RESERVED_PARAMS:
            out.add(f"parameter name {name!r} is reserved", owner=owner, field=field)
        elif not isinstance(item, str | int | float | bool):
            out.add(f"parameter {shown(name)} must be a string, a number or a boolean, not {type(item).__name__}",
                    owner=owner, field=field)
        else:
            params[name] = item
    return params


def _parse_rules(value: object, out: _Collector) -> dict[str, Rule]:
    if not isinstance(value, Mapping):
        out.add(f"must be a table of rules, not {type(value).__name__}", field="rules")
        return {}
    rules: dict[str, Rule] = {}
    for name, spec in value.items():
        where = f"rule {shown(name, MAX_NAME)}"
        if not isinstance(name, str) or not RULE_NAME_RE.fullmatch(name):
            out.add(RULE_NAME_RULE, owner=where)
            continue
        if not isinstance(spec, Mapping):
            out.add(f"must be a table, not {type(spec).__name__}", owner=where)
            continue
        for key in sorted(set(spec) - _RULE_KEYS, key=str):
            out.add(f"unknown field (known: {', '.join(sorted(_RULE_KEYS))})", owner=where, field=key)
        command = spec.get("command")
        if command is not None and not isinstance(command, str):
            out.add(f"must be a string, not {type(command).__name__}", owner=where, field="command")
            command = None
        requirements = spec.get("requirements", {})
        if not isinstance(requirements, Mapping):
            out.add(f"must be a table, not {type(requirements).__name__}", owner=where, field="requirements")
            requirements = {}
        rules[name] = Rule(name, command, dict(requirements), spec.get("ete"))
    return rules


# ------------------------------------------------------------------------------- foreach expansion


def _expand_jobs(value: object, params: dict[str, object], rules: Mapping[str, Rule], out: _Collector) -> list[_Raw]:
    if value is None or (isinstance(value, list) and not value):
        out.add("the request has no jobs: add at least one [[jobs]] entry", field="jobs")
        return []
    if not isinstance(value, list):
        out.add(f"must be an array of tables, not {type(value).__name__}", field="jobs")
        return []
    raws: list[_Raw] = []
    for number, spec in enumerate(value, start=1):
        entry = f"jobs entry #{number}"
        if not isinstance(spec, Mapping):
            out.add(f"must be a table, not {type(spec).__name__}", owner=entry)
            continue
        label = spec.get("name")
        where = _job_owner(label) if isinstance(label, str) else entry
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


def _foreach(
    value: object, params: Mapping[str, object], where: str, out: _Collector
) -> list[dict[str, object]] | None:
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
            checked = _parse_params(row, out, where, "foreach")
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
        if not isinstance(name, str) or not _IDENT_RE.fullmatch(name) or name in _RESERVED_PARAMS:
            out.add(f"variable {shown(name)} must be an identifier and not 'job' or 'deps'", owner=where,
                    field="foreach")
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


def _axis(values: object, params: Mapping[str, object], name: str, where: str,
          out: _Collector) -> list[object] | None:
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
    out: _Collector,
) -> _Raw | None:
    scope = {**params, **binding}
    try:
        name = render(label, scope)
    except ExprError as exc:
        out.add(str(exc), owner=where, field="name")
        return None
    if not JOB_NAME_RE.fullmatch(name):
        out.add(JOB_NAME_RULE, owner=_job_owner(name), field="name")
        return None
    where = _job_owner(name)
    scope["job"] = name
    env: dict[str, object] = dict(scope)
    spent = len(name)
    for param, value in _parse_params(job_params, out, where, "params").items():
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
    return _Raw(name, where, spec, env, patterns, rendered_key)


# -------------------------------------------------------------------------------------- compiling


class _Patterns:
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
            head = pattern[: min((pattern.index(c) for c in _PATTERN_CHARS if c in pattern), default=len(pattern))]
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


def _resolve_deps(raw: _Raw, patterns: _Patterns, out: _Collector) -> tuple[str, ...] | None:
    """The job's dependencies with patterns expanded; None when the patterns cost too much to resolve."""
    resolved: dict[str, None] = {}
    for pattern in raw.dep_patterns:
        if _PATTERN_CHARS & set(pattern):
            matched = patterns.match(pattern)
            if matched is None:
                out.add(f"matching the deps patterns of the request tries over {MAX_PATTERN_WORK} job names: "
                        "name the dependencies, or use fewer distinct patterns", owner=raw.entry, field="deps")
                return None
            matched = [name for name in matched if name != raw.name]
            if not matched:
                out.add(f"pattern {shown(pattern)} matches no job", owner=raw.entry, field="deps")
            resolved.update(dict.fromkeys(matched))
        else:
            resolved[pattern] = None  # unknown names are reported by the graph check, with the others
    return tuple(resolved)


def _compile_jobs(raws: Sequence[_Raw], rules: Mapping[str, Rule], out: _Collector) -> list[JobTemplate]:
    patterns = _Patterns([raw.name for raw in raws])
    jobs: list[JobTemplate] = []
    edges = 0
    for raw in raws:
        deps = _resolve_deps(raw, patterns, out)
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


def _check_names(
    used: set[str], refs: set[tuple[str, str]], env: Mapping[str, object], deps: Sequence[str]
) -> list[str]:
    """Problems with the names a template or expression reads: missing params, outputs of non-deps."""
    problems = [f"missing param {name!r}" for name in sorted(used) if not name.startswith("deps.") and name not in env]
    problems.extend(
        f"reads deps.{job}.{value} but {job!r} is not one of its deps" for job, value in sorted(refs) if job not in deps
    )
    return problems


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


def _compile(raw: _Raw, deps: tuple[str, ...], rules: Mapping[str, Rule], out: _Collector) -> JobTemplate:
    spec, env, where = raw.spec, raw.env, raw.entry
    rule = rules.get(spec["rule"]) if isinstance(spec.get("rule"), str) else None
    errors: list[str] = []  # failures of this job alone, at evaluation
    needs: set[tuple[str, str]] = set()

    command = spec.get("command", rule.command if rule else None)
    command_deferred = False
    if not isinstance(command, str) or not command.strip():
        out.add("no command: give 'command' or a 'rule' that has one", owner=where, field="command")
        command = ""
    else:
        try:
            refs = template_dep_refs(command)
            command_problems = _check_names(template_names(command), refs, env, deps)
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
        out.add(f"at most {MAX_NAMES} requirement names are allowed, got {len(merged)}", owner=where,
                field="requirements")
        merged = {}
    for name, value in merged.items():
        if not isinstance(name, str) or not name:
            out.add(f"a requirement name must be a non-empty string, not {shown(name)}", owner=where,
                    field="requirements")
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
            out.add(str(exc), owner=where, field=name)
            return value
        problems = _check_names(used, refs, env, deps)
        for problem in problems:
            out.add(f"{problem} in {shown(value)}", owner=where, field=name)
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


def _ete_hint(
    value: object,
    requirements: Mapping[str, object],
    env: Mapping[str, object],
    where: str,
    out: _Collector,
    errors: list[str],
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
    problems = _check_names(names(value), set(), env, ())
    if refs:
        problems.append("an ETE hint is needed at submission, it cannot read dependency outputs")
    for problem in problems:
        out.add(problem, owner=where, field="ete")
    if problems:
        return None
    try:
        hint = evaluate(value, env, kind="duration")
    except ExprError as exc:
        errors.append(f"ete: {exc}")
        return None
    if not 0 <= hint <= MAX_ETE:
        errors.append(f"ete: {shown(value)} gives {hint} s, outside 0..{MAX_ETE:g}")
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
