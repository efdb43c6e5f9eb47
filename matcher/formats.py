"""``--format`` of the listing commands (``jobs``, ``history``, ``status``): ``table`` (the command's own
layout), ``json``, or a ``sacct``-like list of fields, ``--format id,state,owner,exit,elapsed`` (names are
case-insensitive; a wrong one is refused with the list). A field list prints a header and one aligned line per row.

Each command names its fields once, as a :class:`Columns` of its row type; the job fields, shared by ``jobs``
and ``history``, are :data:`JOB_COLUMNS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from taskqueues.errors import ValidationError

from .joblist import JobRow

__all__ = ["FORMAT_HELP", "JOB_COLUMNS", "Columns", "Format", "duration", "stamp"]

Row = TypeVar("Row")

#: The two formats that are not field lists.
TABLE, JSON = "table", "json"
#: The ``--format`` option's help.
FORMAT_HELP = "table, json, or fields: id,state,owner,exit,elapsed... (a wrong name lists them)."


def stamp(seconds: float | None) -> str:
    """A time as the field lists print it (local time, to the second), "-" for none."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds)) if seconds else "-"


def duration(seconds: float | None) -> str:
    """Seconds as ``[D-]HH:MM:SS`` (``sacct``'s elapsed), "-" for none."""
    if seconds is None:
        return "-"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


@dataclass(frozen=True)
class Format:
    """A parsed ``--format``: ``kind`` table, json or fields (then ``fields`` names them, in order)."""

    kind: str
    fields: tuple[str, ...] = ()


class Columns(Generic[Row]):
    """The fields a command's rows offer: name -> (header, cell)."""

    def __init__(self, what: str, fields: dict[str, tuple[str, Callable[[Row], str]]]) -> None:
        self.what = what
        self.fields = fields

    def parse(self, text: str) -> Format:
        """``table``, ``json`` or a comma-separated field list; a ValidationError names an unknown field and
        lists the known ones."""
        words = [w.strip().lower() for w in text.split(",") if w.strip()]
        if words in ([TABLE], [JSON]):
            return Format(words[0])
        unknown = [w for w in words if w not in self.fields]
        if unknown or not words:
            raise ValidationError(
                f"--format {text!r}: {'no field named' if words else 'empty'}"
                + (f" {', '.join(map(repr, unknown))}" if unknown else "")
                + f"; use table, json or a comma-separated list of the {self.what} fields: {', '.join(self.fields)}"
            )
        return Format("fields", tuple(words))

    def render(self, rows: Sequence[Row], fields: Sequence[str]) -> list[str]:
        """A header and one aligned line per row (no line for no row)."""
        table = [[self.fields[f][0] for f in fields], *([self.fields[f][1](row) for f in fields] for row in rows)]
        widths = [max(len(cells[i]) for cells in table) for i in range(len(fields))]
        return ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in table]


def _opt(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


JOB_COLUMNS: Columns[JobRow] = Columns(
    "job",
    {
        "id": ("ID", lambda r: r.id),
        "name": ("NAME", lambda r: _opt(r.name)),
        "request": ("REQUEST", lambda r: _opt(r.request)),
        "owner": ("OWNER", lambda r: r.owner),
        "group": ("GROUP", lambda r: r.group),
        "state": ("STATE", lambda r: r.state),
        "taskqueue": ("TASKQUEUE", lambda r: _opt(r.task_queue)),
        "pilot": ("PILOT", lambda r: _opt(r.pilot)),
        "attempt": ("ATT", lambda r: str(r.attempt)),
        "submit": ("SUBMIT", lambda r: stamp(r.submitted)),
        "start": ("START", lambda r: stamp(r.started)),
        "end": ("END", lambda r: stamp(r.ended)),
        "elapsed": ("ELAPSED", lambda r: duration(r.run_time)),
        "exit": ("EXIT", lambda r: _opt(r.exit_code)),
        "reason": ("REASON", lambda r: _opt(r.reason)),
    },
)
