"""A workflow document to a :class:`~matcher.workflow.model.Workflow`: header, params and rules, foreach
expansion, compilation, then the dependency graph, every problem gathered into one error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskqueues.dag import DagError, check_dag

from .compile import compile_jobs
from .document import parse_header, parse_identity, parse_notify, parse_params, parse_rules
from .foreach import expand_jobs
from .model import Workflow, WorkflowError
from .problems import Collector

__all__ = ["parse_workflow"]


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
