"""The history of ended jobs (issue 28): pages of the jobs that ended in a time window, oldest end first.

Two indexes answer it, both kept by ``_lib.lua``'s ``save`` wherever a final state is written and forgotten
with the record (``forget.lua``):

* ``ended`` (score = end time, member = job id): the window of every owner, read with ZRANGEBYSCORE;
* ``endedby`` (all scores 0, read with ZRANGEBYLEX): per ended job ``o:<owner>:<end>:<id>:<state>:<group>`` and
  ``g:<group>:<end>:<id>:<state>:<owner>``, ``<end>`` as ``%014.3f`` so that text order is time order. One owner's
  or one group's window is one range of it, whatever the number of other jobs; the state and the other half
  of the account are in the entry, so ``--state`` and ``--owner`` with ``--group`` filter without loading a
  record.

A page holds at most ``limit`` jobs and a cursor (``next``) to pass as ``after`` for the following one (None:
nothing more in the window). Only the records of the jobs shown are loaded, except for ``--state`` without an
owner or group, which reads records a page at a time until the page is full (a scan bounded by the page).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from ..errors import ValidationError
from .guard import guarded
from .keys import Keys
from .records import Job
from .records import text as _text

#: Index entries (or ids) read per round trip while a filter drops some.
SCAN = 2000


def end_text(seconds: float) -> str:
    """An end time as the ``endedby`` entries hold it (``_lib.lua``'s ``history_entries``)."""
    return f"{seconds:014.3f}"


@dataclass(frozen=True)
class HistoryPage:
    """Ended jobs in end order, and the cursor of the next page (None when the window holds no more)."""

    jobs: list[Job] = field(default_factory=list)
    next: str | None = None


def _cursor(text: str) -> tuple[float, str]:
    """(end, job id) of a cursor ``END:ID``; a ValidationError for anything else."""
    end, _, job = text.partition(":")
    try:
        seconds = float(end)
    except ValueError:
        seconds = float("nan")
    if not job or seconds != seconds:
        raise ValidationError(f"--after {text!r} is not a history cursor (the END:ID a previous page printed)")
    return seconds, job


def _state(raw: Any) -> str | None:
    """The state a stored record names (None: unreadable)."""
    try:
        rec = json.loads(raw)
    except (TypeError, ValueError):
        return None
    state = rec.get("s") if isinstance(rec, dict) else None
    return state if isinstance(state, str) else None


class History:
    """Reads of the history indexes of one community (``Store.history``)."""

    def __init__(self, client: redis.Redis, keys: Keys, where: str, jobs: Callable[[Sequence[str]], list[Job]]) -> None:
        self.client, self.keys, self.where = client, keys, where
        self._jobs = jobs

    @guarded("reading the history of ended jobs")
    def page(
        self,
        since: float,
        until: float,
        *,
        owner: str | None = None,
        group: str | None = None,
        states: frozenset[str] | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> HistoryPage:
        """Jobs that ended in [``since``, ``until``] (unix seconds), of ``owner`` and/or ``group`` and in one of
        ``states`` when given, after the cursor ``after``; at most ``limit``."""
        if limit < 1:
            raise ValidationError(f"--limit must be at least 1, got {limit}")
        if owner is not None or group is not None:
            found = self._by_account(since, until, owner, group, states, after, limit)
        else:
            found = self._by_time(since, until, states, after, limit)
        ids = [job for job, _ in found[:limit]]
        more = len(found) > limit
        return HistoryPage(self._jobs(ids), found[limit - 1][1] if more else None)

    @guarded("reading the history of ended jobs")
    def latest(self, owner: str | None, group: str | None, start: int, count: int) -> tuple[list[str], bool]:
        """Ids of ranks ``start`` .. ``start + count - 1`` of one owner's (else one group's) ended jobs, latest
        end first (those of the other half of the account dropped when both are given), and whether the
        index may hold more after them."""
        prefix = f"o:{owner}:" if owner is not None else f"g:{group}:"
        entries = self.client.zrevrangebylex(
            self.keys.endedby, f"({prefix[:-1]};", f"[{prefix}", start=start, num=count
        )
        out = []
        for entry in map(_text, entries):
            parts = entry[len(prefix) :].split(":")
            if len(parts) == 4 and (owner is None or group is None or parts[3] == group):
                out.append(parts[1])
        return out, len(entries) == count

    def _by_account(
        self,
        since: float,
        until: float,
        owner: str | None,
        group: str | None,
        states: frozenset[str] | None,
        after: str | None,
        limit: int,
    ) -> list[tuple[str, str]]:
        """(job id, cursor) of up to ``limit`` + 1 entries of one owner's (else one group's) range."""
        prefix = f"o:{owner}:" if owner is not None else f"g:{group}:"
        low = f"[{prefix}{end_text(since)}"
        if after is not None:
            end, job = _cursor(after)
            if end >= since:
                low = f"({prefix}{end_text(end)}:{job};"
        high = f"[{prefix}{end_text(until)};"
        out: list[tuple[str, str]] = []
        size = limit + 1 if states is None and (owner is None or group is None) else SCAN
        while len(out) <= limit:
            entries = [_text(e) for e in self.client.zrangebylex(self.keys.endedby, low, high, start=0, num=size)]
            for entry in entries:
                parts = entry[len(prefix) :].split(":")
                if len(parts) != 4:
                    continue  # not an entry this version writes
                stamp, job, state, other = parts
                if states is not None and state not in states:
                    continue
                if owner is not None and group is not None and other != group:
                    continue
                out.append((job, f"{stamp}:{job}"))
            if len(entries) < size:
                break
            low = f"({entries[-1]}"
            size = SCAN
        return out

    def _by_time(
        self, since: float, until: float, states: frozenset[str] | None, after: str | None, limit: int
    ) -> list[tuple[str, str]]:
        """(job id, cursor) of up to ``limit`` + 1 jobs of the ``ended`` index's window."""
        low, skip = since, None
        if after is not None:
            skip = _cursor(after)
            low = max(since, skip[0])
        size = limit + 1 if states is None else SCAN
        out: list[tuple[str, str]] = []
        batch: list[tuple[str, str]] = []
        for job, end in self._window(low, until, size):
            if skip is not None and (end, job) <= skip:
                continue
            batch.append((job, f"{end!r}:{job}"))
            if len(batch) == size:
                out += self._in_states(batch, states)
                batch = []
                if len(out) > limit:
                    return out[: limit + 1]
        out += self._in_states(batch, states)
        return out[: limit + 1]

    def _in_states(self, batch: list[tuple[str, str]], states: frozenset[str] | None) -> list[tuple[str, str]]:
        """The entries of ``batch`` whose job is in one of ``states`` (all of them when None)."""
        if states is None or not batch:
            return batch
        raws = self.client.hmget(self.keys.jobs, [job for job, _ in batch])
        return [entry for entry, raw in zip(batch, raws, strict=True) if raw is not None and _state(raw) in states]

    def _window(self, low: float, high: float, size: int) -> Iterator[tuple[str, float]]:
        """(id, end) of the ``ended`` index from ``low`` to ``high``, ``size`` per round trip, lazily."""
        offset = 0
        while True:
            page: Any = self.client.zrangebyscore(self.keys.ended, low, high, start=offset, num=size, withscores=True)
            yield from ((_text(m), float(s)) for m, s in page)
            if len(page) < size:
                return
            offset += size
