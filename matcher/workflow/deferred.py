"""Release time: a job's requirements and command completed with what its dependencies reported."""

from __future__ import annotations

from collections.abc import Mapping

from .expr import ExprError, evaluate, render
from .model import JobTemplate
from .values import requirement_kind

__all__ = ["evaluate_deferred", "render_command"]


def evaluate_deferred(job: JobTemplate, dep_outputs: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """The job's full requirements once its dependencies reported ``dep_outputs`` (job -> name -> value).

    Raises :class:`~matcher.workflow.expr.ExprError` naming the job and the requirement when an output is
    missing or an evaluation fails: the caller fails that job with this reason.
    """
    result = dict(job.requirements)
    for name, text in job.deferred.items():
        try:
            result[name] = evaluate(text, job.params, dep_outputs, kind=requirement_kind(name))
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
