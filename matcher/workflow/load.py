"""A workflow to a :class:`~matcher.workflow.model.Workflow`, the entry points: :func:`parse_workflow` takes
a document (a mapping, from TOML, JSON or a program) through header, params and rules, foreach expansion,
compilation, then the dependency graph, every problem gathered into one error; :func:`load_workflow` reads
a file first: its size, its encoding and its TOML or JSON syntax, each refusal naming the file.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matcher.limits import MAX_NAME
from taskqueues.dag import DagError, check_dag
from taskqueues.errors import located, shown

from .document import parse_header, parse_identity, parse_notify, parse_params, parse_rules
from .jobs import compile_jobs, expand_jobs
from .model import Collector, Workflow, WorkflowError, job_owner

__all__ = ["MAX_FILE_BYTES", "load_workflow", "parse_workflow"]

MAX_FILE_BYTES = 16 * 1024 * 1024
_TWICE = "the key is given twice in one JSON object; give it once"


def parse_workflow(data: Mapping[str, Any], source: str = "<workflow>") -> Workflow:
    """Validate a workflow given as a mapping (from TOML, JSON or a program). See :mod:`matcher.workflow`."""
    out = Collector()
    if not isinstance(data, Mapping):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    name, description, priority = parse_header(data, out)
    owner, group = parse_identity(data, out)
    notify = parse_notify(data, out)
    params = parse_params(data.get("params", {}), out, "", "params")
    rules = parse_rules(data.get("rules", {}), out)
    raw_jobs = expand_jobs(data.get("jobs"), params, rules, out)
    jobs = compile_jobs(raw_jobs, rules, out)
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
        priority=priority,
        params=params,
        rules=rules,
        description=description,
        owner=owner,
        group=group,
        notify=notify,
    )


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate a ``.toml`` or ``.json`` workflow file; every refusal names the file first."""
    return parse_workflow(*read_document(path))


def read_document(path: str | Path) -> tuple[dict[str, Any], str]:
    """The table a ``.toml`` or ``.json`` workflow file holds, and its name for messages (what
    :func:`load_workflow` validates; the API's client sends it as JSON)."""
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
    reader = _JsonReader()
    data = _decode(text, suffix, source, reader)
    _refuse_duplicates(data, reader, source)
    if not isinstance(data, dict):
        raise WorkflowError(source, [f"the top level must be a table, not {type(data).__name__}"])
    return data, source


def _decode(text: str, suffix: str, source: str, reader: _JsonReader) -> object:
    """The document a TOML or JSON text holds; its syntax errors, and the values no Python object can
    hold (an integer of more than 4300 digits, arrays nested past the recursion limit), as WorkflowError."""
    syntax = "TOML" if suffix == ".toml" else "JSON"
    try:
        if suffix == ".toml":
            return tomllib.loads(text)  # TOML itself refuses a key defined twice
        return json.loads(text, object_pairs_hook=reader.pairs)
    except json.JSONDecodeError as exc:
        problem = f"JSON syntax: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except tomllib.TOMLDecodeError as exc:
        problem = f"TOML syntax: {exc}"
    except RecursionError:
        problem = f"{syntax} syntax: arrays or tables nested too deeply to read"
    except ValueError as exc:  # int() of a number over Python's limit of 4300 digits
        problem = f"{syntax} syntax: a number is too long to read ({str(exc).split(';')[0]})"
    raise WorkflowError(source, [problem])


class _JsonReader:
    """Reads JSON keeping the keys each object was given more than once (``json`` keeps the last silently).

    The objects stay plain dicts (problems name them "table"/"dict" as for TOML); their duplicates are kept
    here by identity, the objects themselves held so that no identity is reused while the reader lives.
    """

    def __init__(self) -> None:
        self.duplicates: dict[int, tuple[str, ...]] = {}
        self.objects: list[dict[str, object]] = []

    def pairs(self, pairs: list[tuple[str, object]]) -> dict[str, object]:
        made = dict(pairs)
        if len(made) < len(pairs):
            counts = Counter(key for key, _ in pairs)
            self.duplicates[id(made)] = tuple(key for key in made if counts[key] > 1)
            self.objects.append(made)
        return made

    def twice(self, value: dict[str, object]) -> tuple[str, ...]:
        return self.duplicates.get(id(value), ())


def _refuse_duplicates(data: object, reader: _JsonReader, source: str) -> None:
    """Refuse a JSON document that gives a key twice in one object, naming the job (or rule) and the key."""
    if not reader.duplicates:
        return
    problems: list[str] = []

    def walk(top: object, owner: str) -> None:  # without recursion: JSON may nest as deep as it parsed
        stack = [top]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                problems.extend(located(_TWICE, owner=owner, field=key) for key in reader.twice(value))
                stack.extend(reversed(value.values()))
            elif isinstance(value, list):
                stack.extend(reversed(value))

    if not isinstance(data, dict):
        walk(data, "")
    else:
        problems.extend(located(_TWICE, field=key) for key in reader.twice(data))
        for key, value in data.items():
            if key == "jobs" and isinstance(value, list):
                for number, job in enumerate(value, start=1):
                    name = job.get("name") if isinstance(job, dict) else None
                    walk(job, job_owner(name) if isinstance(name, str) else f"jobs entry #{number}")
            elif key == "rules" and isinstance(value, dict):
                problems.extend(located(_TWICE, field=f"rules.{rule}") for rule in reader.twice(value))
                for rule, spec in value.items():
                    walk(spec, f"rule {shown(rule, MAX_NAME)}")
            else:
                walk(value, "")
    raise WorkflowError(source, problems)
