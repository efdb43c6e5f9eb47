"""The tokenizer: numbers with their unit suffix, names, ``deps.<job>.<value>`` and operators.

What the language refuses at the word level (string literals, attribute and index access, ``lambda``
and the other Python words) is refused here, with the column, before any parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from taskqueues.units import DURATION_UNITS, SIZE_UNITS

from .errors import ExprError

__all__ = ["DEP_RE", "QUANTITY_RE", "Token", "literal", "tokenize"]

# Words that are tempting but not part of the language: named in the error so the user sees why.
_FORBIDDEN_WORDS = frozenset({"lambda", "for", "in", "is", "import", "yield", "await", "def", "class"})


@dataclass(frozen=True)
class Token:
    """One token: its kind, its text and column, and what a number (value, unit) or a dependency holds."""

    kind: str  # "num" | "name" | "dep" | "op" | "end"
    text: str
    pos: int
    number: Fraction | None = None
    unit: str = ""
    job: str = ""
    value: str = ""


# re.ASCII: a number is written with the digits 0-9 ("\u0664", Arabic-Indic four, is refused, not read as 4).
NUMBER_RE = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_SUFFIX_RE = re.compile(r"[A-Za-z]+")
QUANTITY_RE = re.compile(rf"\s*([-+]?)\s*({NUMBER_RE.pattern})\s*([A-Za-z]*)\s*", re.ASCII)
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEP_RE = re.compile(r"deps\.([A-Za-z0-9_][A-Za-z0-9_-]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_OPERATORS = ("**", "//", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "<", ">", "(", ")", ",")


def literal(digits: str, text: str, pos: int | None) -> Fraction:
    """The exact value of a numeric literal, refusing sizes that would be costly to build (``1e999999``)."""
    mantissa, _, exponent = digits.lower().partition("e")
    if len(mantissa) > 40 or (exponent and abs(int(exponent)) > 30):
        raise ExprError("number too long or exponent too large", expression=text, position=pos)
    return Fraction(digits)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with one ``end`` token; ExprError at the first thing the language refuses."""
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while pos < end:
        char = text[pos]
        if char in " \t\r\n":
            pos += 1
            continue
        number = NUMBER_RE.match(text, pos)
        if number is not None:
            suffix = _SUFFIX_RE.match(text, number.end())
            unit = suffix.group().lower() if suffix else ""
            if unit and unit not in SIZE_UNITS and unit not in DURATION_UNITS:
                raise ExprError(
                    f"unknown unit {unit!r} (sizes: K M G T P, Ki..Pi; durations: s m h d w)",
                    expression=text,
                    position=number.end(),
                )
            value = literal(number.group(), text, pos)
            stop = suffix.end() if suffix else number.end()
            tokens.append(Token("num", text[pos:stop], pos, number=value, unit=unit))
            pos = stop
            continue
        if text.startswith("deps.", pos):
            dep = DEP_RE.match(text, pos)
            if dep is None or (dep.end() < end and (text[dep.end()] == "." or text[dep.end()] == "[")):
                raise ExprError("a dependency output is written deps.<job>.<value>", expression=text, position=pos)
            tokens.append(Token("dep", dep.group(), pos, job=dep.group(1), value=dep.group(2)))
            pos = dep.end()
            continue
        ident = _IDENT_RE.match(text, pos)
        if ident is not None:
            word = ident.group()
            if word in _FORBIDDEN_WORDS:
                raise ExprError(f"{word!r} is not part of the language", expression=text, position=pos, name=word)
            after = ident.end()
            if after < end and text[after] in ".[":
                raise ExprError(
                    f"attribute and index access are not allowed (after {word!r})",
                    expression=text,
                    position=after,
                    name=word,
                )
            tokens.append(Token("name", word, pos))
            pos = after
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(Token("op", op, pos))
                pos += len(op)
                break
        else:
            if char in "'\"":
                what = "string literals are not allowed"
            elif char.isdigit():
                what = f"the digit {char!r} is not one of 0-9"
            else:
                what = f"unexpected character {char!r}"
            raise ExprError(what, expression=text, position=pos)
    tokens.append(Token("end", "", end))
    return tokens
