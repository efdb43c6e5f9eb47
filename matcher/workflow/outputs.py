"""The outputs a payload reports: ``KEY=VALUE`` lines in the file named by ``$PILOTFISH_OUTPUTS``."""

from __future__ import annotations

from taskqueues.errors import ValidationError

from .document import IDENT_RE

__all__ = ["MAX_OUTPUTS", "MAX_OUTPUT_VALUE", "OUTPUTS_ENV", "parse_outputs"]

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
