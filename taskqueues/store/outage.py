"""Riding out a Redis outage: one log line when it starts, one when it ends, and capped back-off between.

Every long-running component (pilot, director, Celery worker and beat) keeps one :class:`Outage` per
thing it does against the store. It calls :meth:`Outage.failed` with the error when the store cannot be
reached and waits what it returns before trying again (doubling from ``first`` up to ``cap`` seconds), and
:meth:`Outage.ok` when a call went through. Only the transitions are logged, so a minute-long outage is two
lines in the log, not a traceback per attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis


class Outage:
    """The state of one component's connection to the store (see the module doc)."""

    def __init__(
        self,
        log: logging.Logger,
        who: str,
        *,
        first: float = 0.5,
        cap: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_start: Callable[[], object] = lambda: None,
    ) -> None:
        """``on_start`` runs when an outage starts: e.g. drop every pooled connection, so that none of those
        to the server that went away is tried again after it is back (each would fail once)."""
        if not 0 < first <= cap:
            raise ValueError(f"outage back-off: need 0 < first <= cap, got first={first}, cap={cap}")
        self.log = log
        self.who = who
        self.first = first
        self.cap = cap
        self.clock = clock
        self.on_start = on_start
        self.since: float | None = None
        self._delay = first

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, error: BaseException) -> float:
        """The store could not be reached; returns the seconds to wait before the next attempt."""
        if self.since is None:
            self.since = self.clock()
            self.on_start()
            self.log.warning(
                "%s: the store is unreachable (%s); retrying with back-off up to %g s", self.who, error, self.cap
            )
        delay = self._delay
        self._delay = min(self.cap, self._delay * 2)
        return delay

    def ok(self) -> bool:
        """A call went through: ends an outage (one line), resets the back-off; True if it ended one."""
        self._delay = self.first
        if self.since is None:
            return False
        self.log.warning("%s: the store answers again after %.1f s", self.who, self.clock() - self.since)
        self.since = None
        return True


def is_outage(error: BaseException | None) -> bool:
    """Whether ``error`` (or an error it was raised from) means the store or broker could not be reached."""
    from kombu.exceptions import OperationalError

    from ..errors import StoreUnavailable

    seen = 0
    while error is not None and seen < 10:
        if isinstance(
            error, StoreUnavailable | redis.ConnectionError | redis.TimeoutError | OperationalError | ConnectionError
        ):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


#: What Celery's worker and beat log about a broker they cannot reach, each time they retry.
_CELERY_RETRY_TEXT = ("Cannot connect to", "Connection to broker lost", "Couldn't apply scheduled task")


class OutageLogFilter(logging.Filter):
    """Turns the log records a library writes at every retry during an outage (Celery's consumer and beat,
    with tracebacks) into the two lines of an :class:`Outage`: install it on the process's log handlers."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(self.outage.log.name):
            return True  # the outage's own lines
        error = record.exc_info[1] if record.exc_info else None
        text = record.getMessage()
        if is_outage(error) or any(part in text for part in _CELERY_RETRY_TEXT):
            self.outage.failed(error or ConnectionError(text.splitlines()[0]))
            return False
        return True
