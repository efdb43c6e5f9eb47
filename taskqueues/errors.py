"""The one exception tree of Pilotfish.

Every error the project raises on purpose derives from :class:`PilotfishError`, so callers (the CLI
above all) can catch one class and print one clear line. Modules of the other packages subclass
these rather than ``Exception``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

#: How many characters of a user's value a message shows (a value may be a megabyte string).
SHOWN = 80
_SHOWN_ITEMS = 4


def shown(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` cut to about ``limit`` characters, safe on any value a parser can produce.

    User values go into one-line messages: a megabyte string, an integer of 5,000 digits (whose ``repr``
    raises), a list nested 100,000 deep (whose ``repr`` overflows the stack) or text holding control
    characters must still give a short line. Strings keep their head (``'aaaa...'``), containers show their
    first items, nesting is cut at two levels.
    """
    return _shown(value, limit, 2)


def _shown(value: object, limit: int, depth: int) -> str:
    if isinstance(value, str):
        text = repr(value[:limit])
        return text + "..." if len(value) > limit else text
    if isinstance(value, dict):
        if depth == 0:
            return "{...}"
        pairs = [
            f"{_shown(k, limit // 2, depth - 1)}: {_shown(v, limit // 2, depth - 1)}"
            for k, v in itertools.islice(value.items(), _SHOWN_ITEMS)
        ]
        return "{" + ", ".join(pairs) + (", ..." if len(value) > _SHOWN_ITEMS else "") + "}"
    if isinstance(value, list | tuple):
        if depth == 0:
            return "[...]"
        items = [_shown(item, limit // 2, depth - 1) for item in value[:_SHOWN_ITEMS]]
        return "[" + ", ".join(items) + (", ..." if len(value) > _SHOWN_ITEMS else "") + "]"
    try:
        text = repr(value)
    except ValueError:  # an integer over Python's limit of 4300 digits for text
        return "<an integer of more than 4300 digits>"
    return text if len(text) <= limit else text[:limit] + "..."


class PilotfishError(Exception):
    """Root of every error Pilotfish raises on purpose."""


class ConfigError(PilotfishError):
    """A settings or catalog file is wrong: the message names the file, the line and the key."""


class ValidationError(PilotfishError):
    """User input (a job, a requirement, a workflow) is wrong: the message names the job and the field.

    ``problem`` is the message without them, for a caller that names the place its own way.
    """

    def __init__(self, message: str, *, job: str | None = None, field: str | None = None) -> None:
        super().__init__(located(message, job=job, field=field))
        self.problem = message
        self.job = job
        self.field = field


def located(message: str, *, job: object = None, field: object = None, owner: str = "") -> str:
    """``job 'x', field 'mem': message``: where a problem is, then what it is (names cut to 200 characters).

    ``owner`` replaces the job when the problem belongs to something else (``rule 'r'``, ``jobs entry #3``).
    """
    where = owner or (f"job {shown(job, 200)}" if job else "")
    if field is not None:
        where = f"{where}, field {shown(field, 200)}" if where else f"field {shown(field, 200)}"
    return f"{where}: {message}" if where else message


class ProblemList(ValidationError):
    """Every problem of one input, on one line: ``<source>: <first>; <second>; ... and N more``.

    ``problems`` keeps them all, each naming its job and field (:func:`located`); the message lists the
    first :data:`LISTED`, so a user fixes a file in one pass and a terminal still shows one line (any line
    break a problem carries is made a blank).
    """

    LISTED = 10

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        listed = list(problems[: self.LISTED])
        if len(problems) > self.LISTED:
            listed.append(f"... and {len(problems) - self.LISTED} more")
        super().__init__(" ".join(f"{source}: {'; '.join(listed)}".splitlines()))
        self.source = source
        self.problems = list(problems)


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


class JobRefused(StoreError):
    """A hold, release, resubmit or update named a job in a state that refuses it: nothing changed."""


class BackendError(PilotfishError):
    """A batch system (local, Slurm, Grid Engine) refused or failed a command."""


class BackendUnavailable(BackendError):
    """A batch system's binaries or daemons cannot be reached."""


class AuthError(PilotfishError):
    """The API refused a call: who is calling is unknown (:class:`Unauthenticated`) or may not do it
    (:class:`Forbidden`); the message says why, and nothing was stored."""


class Unauthenticated(AuthError):
    """No credential, or one that is expired, revoked, forged or unknown (HTTP 401)."""


class Forbidden(AuthError):
    """A known caller asked for something its role, owner or groups do not allow (HTTP 403)."""
