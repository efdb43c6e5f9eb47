"""``pilotfish history``: the jobs that ended in a time window, like ``sacct -S … -E … -u …``, oldest end first.

A page at a time from the store's history indexes (:mod:`taskqueues.store.history`): one owner's or one
group's window is one range of an index whatever the number of other jobs; only the records shown are loaded.
A page that is not the last ends with the cursor of the next (``--after``).

Times (``--since``, ``--until``) are a duration back from now (``90s``, ``30m``, ``6h``, ``2d``, ``1w``), a
local date or date and time (``2026-11-27``, ``2026-11-27T08:00``, ``2026-11-27 08:00:00``), ``now``, or unix
seconds (``@1764300000``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taskqueues.errors import ValidationError
from taskqueues.store import Store

from .formats import JOB_COLUMNS
from .joblist import FINISHED, Accounts, JobRow, parse_states

__all__ = ["DEFAULT_FIELDS", "HistoryFilter", "HistoryListing", "list_history", "parse_time", "render_history"]

#: The fields ``history`` prints when no ``--format`` names others (``sacct``'s default, about).
DEFAULT_FIELDS = ("id", "name", "request", "owner", "group", "state", "start", "end", "elapsed", "exit")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_time(text: str, now: float, what: str = "--since") -> float:
    """Unix seconds from a duration back from ``now``, a local date (and time), ``now`` or ``@<unix seconds>``;
    a ValidationError names ``what`` and the forms it takes."""
    value = text.strip()
    ago = _AGO.fullmatch(value)
    if ago:
        return now - float(ago.group(1)) * _UNITS[ago.group(2)]
    if value == "now":
        return now
    if value.startswith("@"):
        try:
            return float(value[1:])
        except ValueError:
            pass
    else:
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    raise ValidationError(
        f"{what} {text!r} is not a time: give a duration back from now (90s, 30m, 6h, 2d, 1w), a date "
        "(2026-11-27), a date and time (2026-11-27T08:00), now, or unix seconds (@1764300000)"
    )


@dataclass(frozen=True)
class HistoryFilter:
    """Ended jobs whose end is in [``since``, ``until``] (unix seconds), of one owner and/or group, in
    ``states`` (ended ones), after a cursor; at most ``limit``."""

    since: float
    until: float
    owner: str | None = None
    group: str | None = None
    states: frozenset[str] = frozenset(s.value for s in FINISHED)
    after: str | None = None
    limit: int = 100

    @classmethod
    def of(
        cls,
        since: str,
        until: str = "now",
        *,
        states: Iterable[str] = (),
        now: float | None = None,
        **kw: Any,
    ) -> HistoryFilter:
        """From the command's words: times as :func:`parse_time` takes them, states as ``--state`` (ended
        ones only: ``finished``, ``done``, ``failed``...)."""
        now = time.time() if now is None else now
        wanted = parse_states(states) if states else FINISHED
        if not wanted <= FINISHED:
            raise ValidationError(
                f"--state {', '.join(sorted(s.value for s in wanted - FINISHED))}: history lists ended jobs only "
                f"({', '.join(s.value for s in sorted(FINISHED))})"
            )
        low, high = parse_time(since, now), parse_time(until, now, "--until")
        if high < low:
            raise ValidationError(f"--until {until!r} is before --since {since!r}")
        return cls(low, high, states=frozenset(s.value for s in wanted), **kw)


@dataclass(frozen=True)
class HistoryListing:
    """One page of ended jobs, oldest end first, and the cursor of the next page (None: the last one)."""

    rows: list[JobRow] = field(default_factory=list)
    next: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [r.to_json() for r in self.rows], "next": self.next}


def list_history(store: Store, flt: HistoryFilter, now: float | None = None) -> HistoryListing:
    """A page of the jobs that ``flt`` selects."""
    states = None if flt.states == frozenset(s.value for s in FINISHED) else flt.states
    page = store.history.page(
        flt.since, flt.until, owner=flt.owner, group=flt.group, states=states, after=flt.after, limit=flt.limit
    )
    account = Accounts(store)
    now = time.time() if now is None else now
    return HistoryListing([JobRow.of(job, now, account(job)) for job in page.jobs], page.next)


def render_history(listing: HistoryListing, fields: Iterable[str] = DEFAULT_FIELDS) -> list[str]:
    """Human lines: a header and one line per job, then how to read the next page."""
    if not listing.rows:
        return ["no job ended in that window"]
    lines = JOB_COLUMNS.render(listing.rows, list(fields))
    if listing.next is not None:
        lines.append(f"... more: add --after {listing.next}")
    return lines
