"""The API's errors on the wire, for both sides: the HTTP status each error class answers with
(:mod:`matcher.api.app`) and, by the ``kind`` the answer names, the class the remote client raises again
(:mod:`matcher.api.remote`). Any other PilotfishError is a 400 (and a ValidationError again)."""

from __future__ import annotations

from taskqueues.errors import (
    ConfigError,
    Forbidden,
    JobRefused,
    NotFound,
    PilotfishError,
    StoreUnavailable,
    Unauthenticated,
    ValidationError,
)

from ..cli.control import AlreadyEnded

__all__ = ["KINDS", "STATUS"]

#: HTTP status by error class (the first that matches).
STATUS: tuple[tuple[type[PilotfishError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (AlreadyEnded, 409),
    (JobRefused, 409),
    (StoreUnavailable, 503),
    (ValidationError, 400),
    (ConfigError, 400),
)

#: The class an answer's ``kind`` names.
KINDS: dict[str, type[PilotfishError]] = {cls.__name__: cls for cls, _ in STATUS}
