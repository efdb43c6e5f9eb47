"""Logs of the long-running components as text, or as one JSON object a line (``log_format = "json"``).

Every line of a component (pilot, director, worker, beat) goes through one handler on standard error whose
:class:`ContextFilter` adds what the line is about: the component, the community (``vo``), the pilot and the
job where they apply. A job is named by ``extra={"job": id}``, or found in a message that starts with
``job %s`` (how every per-job line of Pilotfish begins), so the call sites need not change. The JSON form
has the fields ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``component``, ``logger``,
``message``, then ``vo``, ``pilot``, ``job`` when known and ``exception`` (the traceback) when there is one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Context a record may carry (set by :class:`ContextFilter`, or given with ``extra``).
CONTEXT = ("vo", "pilot", "job")


class ContextFilter(logging.Filter):
    """Puts the component and the context fields on every record that passes (never drops one)."""

    def __init__(self, component: str, **context: str) -> None:
        super().__init__()
        self.component = component
        self.context = {k: v for k, v in context.items() if v}

    def set(self, **context: str) -> None:
        """Known later (a pilot's id once it has one): added to every record from now on."""
        self.context.update({k: v for k, v in context.items() if v})

    def filter(self, record: logging.LogRecord) -> bool:
        record.component = self.component
        for key, value in self.context.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        if not hasattr(record, "job") and isinstance(record.msg, str) and record.msg.startswith("job %s"):
            args = record.args if isinstance(record.args, tuple) else ()
            if args:
                record.job = str(args[0])
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "component": getattr(record, "component", ""),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT:
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = str(value)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False)


_configured: dict[str, ContextFilter] = {}


def setup(component: str, log_format: str, level: int | str | None = None, **context: str) -> ContextFilter:
    """Send every log record of this process to standard error in ``log_format``, tagged with ``component``
    and ``context`` (replaces the root logger's handlers; ``level`` None keeps the root's level). Returns the
    filter, to add context found later (a pilot's id)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT))
    tags = ContextFilter(component, **context)
    handler.addFilter(tags)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    if level is not None:
        root.setLevel(level.upper() if isinstance(level, str) else level)
    logging.captureWarnings(True)  # a warning is a log line too, not a raw line on standard error
    _configured["tags"] = tags
    return tags


def configured() -> bool:
    """Whether :func:`setup` ran in this process."""
    return "tags" in _configured


def announce(name: str, message: str) -> None:
    """A line written whatever the level (a component's last word), through the root logger's handlers."""
    record = logging.getLogger(name).makeRecord(name, logging.INFO, "", 0, message, (), None)
    for handler in logging.getLogger().handlers:
        handler.handle(record)
