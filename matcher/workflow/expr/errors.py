"""The one error of the expression language: what is wrong, in which text, at which column."""

from __future__ import annotations

from taskqueues.errors import ValidationError

__all__ = ["ExprError"]


class ExprError(ValidationError):
    """An expression or a template is wrong or cannot be evaluated.

    ``expression`` is the text, ``position`` the 0-based column of the culprit (None when it is the
    whole text), ``name`` the parameter, dependency output or function concerned (None when none is).
    """

    def __init__(
        self,
        message: str,
        *,
        expression: str,
        position: int | None = None,
        name: str | None = None,
        job: str | None = None,
        field: str | None = None,
    ) -> None:
        shown = expression if len(expression) <= 80 else expression[:77] + "..."
        where = f" at column {position}" if position is not None else ""
        super().__init__(f"{message} in {shown!r}{where}", job=job, field=field)
        self.reason = message
        self.expression = expression
        self.position = position
        self.name = name

    def located(self, *, job: str | None, field: str | None) -> ExprError:
        """The same error, told where it happened (which job, which requirement)."""
        return ExprError(
            self.reason,
            expression=self.expression,
            position=self.position,
            name=self.name,
            job=job,
            field=field,
        )
