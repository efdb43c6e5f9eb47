"""Dependency patterns: ``deps`` entries with ``*``, ``?`` or ``[`` resolved against the job names, within a
budget.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections.abc import Sequence

from matcher.limits import MAX_PATTERN_WORK
from taskqueues.errors import shown

from .foreach import Raw
from .model import Collector

__all__ = ["PATTERN_CHARS", "Patterns", "resolve_deps"]

PATTERN_CHARS = frozenset("*?[")


class Patterns:
    """``deps`` patterns resolved against the job names, within a budget of names tried.

    A pattern's literal head (``"part_3_"`` of ``"part_3_*"``) selects its candidates by bisection in the
    sorted names, so per-job patterns of a fan-in cost what they match; a pattern that starts with a
    wildcard tries every name. Each distinct pattern is resolved once. Matches keep the order of the file.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.position = {name: index for index, name in enumerate(names)}
        self.sorted = sorted(self.position)
        self.found: dict[str, list[str]] = {}
        self.work = 0

    def match(self, pattern: str) -> list[str] | None:
        """The names matching ``pattern``; None once :data:`MAX_PATTERN_WORK` names have been tried."""
        if pattern not in self.found:
            head = pattern[: min((pattern.index(c) for c in PATTERN_CHARS if c in pattern), default=len(pattern))]
            matches = re.compile(fnmatch.translate(pattern)).match
            found = []
            for index in range(bisect.bisect_left(self.sorted, head), len(self.sorted)):
                name = self.sorted[index]
                if not name.startswith(head):
                    break
                self.work += 1
                if self.work > MAX_PATTERN_WORK:
                    return None
                if matches(name):
                    found.append(name)
            self.found[pattern] = sorted(found, key=self.position.__getitem__)
        return self.found[pattern]


def resolve_deps(raw: Raw, patterns: Patterns, out: Collector) -> tuple[str, ...] | None:
    """The job's dependencies with patterns expanded; None when the patterns cost too much to resolve."""
    resolved: dict[str, None] = {}
    for pattern in raw.dep_patterns:
        if PATTERN_CHARS & set(pattern):
            matched = patterns.match(pattern)
            if matched is None:
                out.add(
                    f"matching the deps patterns of the request tries over {MAX_PATTERN_WORK} job names: "
                    "name the dependencies, or use fewer distinct patterns",
                    owner=raw.entry,
                    field="deps",
                )
                return None
            matched = [name for name in matched if name != raw.name]
            if not matched:
                out.add(f"pattern {shown(pattern)} matches no job", owner=raw.entry, field="deps")
            resolved.update(dict.fromkeys(matched))
        else:
            resolved[pattern] = None  # unknown names are reported by the graph check, with the others
    return tuple(resolved)
