"""Release time: the outputs a payload reports (``KEY=VALUE`` lines in the file named by
``$PILOTFISH_OUTPUTS``), and a dependent job's requirements and command completed with them.
"""

from __future__ import annotations

from collections.abc import Mapping

from taskqueues.errors import ValidationError

from .document import IDENT_RE
from .expr import ExprError, evaluate, render
from .model import JobTemplate
from .values import requirement_kind

__all__ = ["MAX_OUTPUTS", "MAX_OUTPUT_VALUE", "OUTPUTS_ENV", "evaluate_deferred", "parse_outputs", "render_command"]

OUTPUTS_ENV = "PILOTFISH_OUTPUTS"
MAX_OUTPUTS = 100
MAX_OUTPUT_VALUE = 4096


def parse_outputs(text: str, *, job: str | None = None) -> dict[str, str]:
    """The ``KEY=VALUE`` lines a payload wrote to ``$PILOTFISH_OUTPUTS`` (see :mod:`matcher.workflow`).

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
        if not sep or not IDENT_RE.fullmatch(key):
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
