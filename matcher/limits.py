"""Limits of the submission path: how big a request may be, and why each limit is what it is.

Every limit refuses a request before anything is stored: :mod:`matcher.submission` checks what would reach
the store, and :mod:`matcher.workflow` counts what a file expands to *while* it expands, so that a small
file (one ``foreach`` over 100,000 values, one 60 KB parameter in every command) cannot build a huge
request in memory first. Requirement values keep their limits beside their rules in
:mod:`taskqueues.requirements` (cpu 1..4096, mem and tmp up to 64 TB, wall up to a year, strings up to 256
characters, 64 names per job), expressions theirs in :mod:`matcher.workflow.expr` (1,000 characters, 40 levels
of nesting, every value within 1e18, exponents within 64, templates rendering at most 64 KiB).

=====================  =============  ==================================================================
limit                  value          why
=====================  =============  ==================================================================
``MAX_JOBS``           100,000        jobs per request (one submission is one Lua call: 100,000 jobs held
                                      Redis 8 s in it here; split bigger work, requests share task queues)
``MAX_COMMAND_BYTES``  65,536 bytes   a pilot runs a command as the one argument of ``sh -c``, and Linux
                                      refuses an argument over 128 KiB (MAX_ARG_STRLEN): half of it leaves
                                      the pilot its margin; a longer command belongs in a script
``MAX_NAME``           200 chars      job, rule and request names: they appear in every listing, log line
                                      and ``deps.<job>.<value>`` reference
``MAX_KEY``            1,024 chars    a job's key (its name across runs, for its run-time estimate) is a
                                      field of a Redis hash and often embeds input paths
``MAX_REQUEST_TEXT``   64 MiB         the text all the jobs of one request hold (commands, names, keys,
                                      parameters kept for deferred requirements, requirements): 100,000
                                      jobs of 600 bytes each; it bounds the one JSON document the store
                                      decodes (1,040 commands of 64 KB held Redis 0.43 s here) and what
                                      a file may expand to in memory
``MAX_EDGES``          1,000,000      dependency edges per request: each is stored twice (a dependent and
                                      a dependency id) and walked when the job completes
``MAX_PATTERN_WORK``   1,000,000      job names tried against ``deps`` patterns (``"project_*"``) in one
                                      request, about a second: a pattern's literal head selects its
                                      candidates, so only patterns that start with a wildcard try every
                                      name; a pattern many jobs share is matched once
``MAX_PRIORITY``       1e9 s          a shift of the score of more than 31 years means nothing to a queue,
                                      and it keeps scores (dates near 1.7e9) exact to the millisecond
``MAX_ETE``            one year       a run-time estimate longer than the longest wall a job may ask for
                                      (:data:`taskqueues.requirements.MAX_WALL_S`) says nothing more
``MAX_RETRIES``        100            retries per job: more is a loop, not resilience
=====================  =============  ==================================================================

Text that reaches the store must be text a shell, Redis's JSON and a terminal can all carry
(:func:`check_text`): no NUL (no ``exec`` can pass one), no lone surrogate (a JSON file may write
``"\\ud800"``, which is not a character and cannot be encoded as UTF-8).
"""

from __future__ import annotations

import re

from taskqueues.errors import ValidationError, shown
from taskqueues.requirements import MAX_WALL_S

MAX_JOBS = 100_000
MAX_COMMAND_BYTES = 64 * 1024
MAX_NAME = 200
MAX_KEY = 1024
MAX_REQUEST_TEXT = 64 * 1024 * 1024
MAX_EDGES = 1_000_000
MAX_PATTERN_WORK = 1_000_000
MAX_PRIORITY = 1e9
MAX_ETE = float(MAX_WALL_S)
MAX_RETRIES = 100

#: A job name: letters, digits, ``_`` and ``-``, not starting with ``-`` (it must fit ``deps.<job>.<value>``).
JOB_NAME_RE = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_-]{{0,{MAX_NAME - 1}}}")
#: A rule name: a job name's letters and ``.`` (it is part of a Redis key and of every job's record).
RULE_NAME_RE = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}")
JOB_NAME_RULE = f"a job name is 1 to {MAX_NAME} letters, digits, '_' or '-', not starting with '-'"
RULE_NAME_RULE = f"a rule name is 1 to {MAX_NAME} letters, digits, '_', '.' or '-', not starting with '-' or '.'"


def check_text(value: object, *, job: str | None, field: str, limit: int, line: bool = False) -> str:
    """``value`` when it is text the store and a shell can carry, else a ValidationError naming job and field.

    Refused: anything but a string, a NUL, a lone surrogate, more than ``limit`` bytes of UTF-8, and with
    ``line=True`` (names, keys) any character that is not printable (control characters, line breaks).
    """
    if not isinstance(value, str):
        raise ValidationError(f"must be a string, not {type(value).__name__}", job=job, field=field)
    if len(value) > limit:
        raise ValidationError(f"is {len(value)} characters long, over the limit of {limit}", job=job, field=field)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"holds a lone surrogate {value[exc.start]!r} at character {exc.start}, which is not text",
            job=job,
            field=field,
        ) from None
    if size > limit:
        raise ValidationError(f"is {size} bytes long, over the limit of {limit}", job=job, field=field)
    if "\x00" in value:
        raise ValidationError(f"holds a NUL character at character {value.index(chr(0))}", job=job, field=field)
    if line and not value.isprintable():
        bad = next(char for char in value if not char.isprintable())
        raise ValidationError(f"holds the control character {bad!r} in {shown(value)}", job=job, field=field)
    return value


def check_number(value: object, *, job: str | None, field: str, low: float, high: float, what: str) -> float:
    """``value`` as a float when it is a finite number in ``low..high``, else a ValidationError naming job and field."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"must be {what}, not {shown(value)}", job=job, field=field)
    if not low <= value <= high:  # NaN fails too
        raise ValidationError(f"must be {what} within {low:g}..{high:g}, not {shown(value)}", job=job, field=field)
    return float(value)
