"""The one exception tree of Pilotfish.

Every error the project raises on purpose derives from :class:`PilotfishError`, so callers (the CLI
above all) can catch one class and print one clear line. Modules of the other packages subclass
these rather than ``Exception``.
"""

from __future__ import annotations


class PilotfishError(Exception):
    """Root of every error Pilotfish raises on purpose."""


class ConfigError(PilotfishError):
    """A settings or catalog file is wrong: the message names the file, the line and the key."""


class ValidationError(PilotfishError):
    """User input (a job, a requirement, a workflow) is wrong: the message names the job and the field."""

    def __init__(self, message: str, *, job: str | None = None, field: str | None = None) -> None:
        where = ", ".join(part for part in (f"job {job!r}" if job else "", f"field {field!r}" if field else "") if part)
        super().__init__(f"{where}: {message}" if where else message)
        self.job = job
        self.field = field


class RequirementError(ValidationError):
    """A requirement value or name is not acceptable."""


class NoEligibleQueue(ValidationError):
    """No queue of the resource catalog can run a requirement class."""


class StoreError(PilotfishError):
    """The task-queue store refused an operation or could not reach Redis."""


class StoreUnavailable(StoreError):
    """Redis could not be reached."""


class StoreAccessDenied(StoreError):
    """Redis refused our credentials or this user's right to an operation (ACL)."""


class NotFound(StoreError):
    """A job, request or pilot id is unknown."""


class StaleReport(StoreError):
    """A report names an attempt or a state the job is no longer in: it changed nothing."""


class BackendError(PilotfishError):
    """A batch system (local, Slurm, Grid Engine) refused or failed a command."""


class BackendUnavailable(BackendError):
    """A batch system's binaries or daemons cannot be reached."""
