"""Workflow files: a request of jobs with dependencies, rules, parameters and computed requirements.

A workflow is a TOML or JSON file (the same model; JSON is for programs that generate workflows)::

    name = "montage-small"
    priority = 0                 # optional: shifts every job's score this many seconds earlier
    owner = "alice"              # optional: who submits (default: the local user; --owner overrides)
    group = "analysis"           # optional: the group charged, whose share serves it (default "default")
    notify = "https://hooks.example.org/pf"  # optional: POSTed the summary when the request ends (--notify)
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

Names a template or an expression can read (:mod:`matcher.workflow.expr`): the request's ``params``, the
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
      the unit rule in :mod:`matcher.workflow.expr`).
    * For any other requirement (``Site``, ``Platform``, ``SoftwareTag``...) a string, or each string
      of a list, is a ``{name}`` template.
    An expression that reads no dependency output is evaluated at load time; if that evaluation fails
    (division by zero, an exponent or a result out of range, a parameter that is not a number...), the
    request is refused, naming the job and the requirement; nothing is stored. An expression that reads
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

Modules
    ``load`` (the entry points, a document or a file, and the steps in order), ``document`` (header,
    ``params``, ``rules``), ``jobs`` (``foreach`` expansion, ``deps`` patterns, compiling to
    :class:`JobTemplate`), ``values`` (requirement values and the ETE hint), ``model`` (the objects, and
    gathering problems with the text budget), ``outputs`` (``$PILOTFISH_OUTPUTS`` and release time), and
    ``expr``, the expression and template language.
"""

from matcher.limits import MAX_JOBS

from .load import load_workflow, parse_workflow
from .model import JobTemplate, Rule, Workflow, WorkflowError
from .outputs import OUTPUTS_ENV, evaluate_deferred, parse_outputs, render_command
from .values import is_duration, is_numeric

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
