"""Where each key of a catalog file is: key path -> line, for error messages.

``tomllib`` reports syntax errors with line and column (kept in our message) but gives no
positions for valid documents. To name the line of a key whose *value* is wrong, :class:`Positions`
scans the text once with a small lexer that knows just enough TOML (table and array-of-tables
headers, dotted and quoted keys, strings of all four kinds, arrays and inline tables spanning lines,
comments) to map each key path -- ``("sites", "X", "ces", "Y", "queues", "Z", "shapes", 0, "mem")``
-- to the line where it appears. The text has already passed ``tomllib``, so the lexer need not
validate; if it meets something it does not expect it stops, and errors fall back to the nearest
enclosing table it did locate.
"""

from __future__ import annotations

import contextlib
import re
import tomllib

__all__ = ["BARE_KEY", "KeyPath", "Positions", "dotted"]

KeyPath = tuple[str | int, ...]
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class Positions:
    """Key path -> line number, for a text tomllib has accepted."""

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        self._text = text
        self._i = 0
        self._line = 1
        self._tables: dict[KeyPath, int] = {}
        # Best effort: if the lexer stumbles, what it located so far still serves.
        with contextlib.suppress(IndexError, ValueError, tomllib.TOMLDecodeError):
            self._document()

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest located ancestor; None if nothing was located."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def _peek(self, offset: int = 0) -> str:
        at = self._i + offset
        return self._text[at] if at < len(self._text) else ""

    def _advance(self, count: int = 1) -> None:
        chunk = self._text[self._i : self._i + count]
        self._line += chunk.count("\n")
        self._i += len(chunk)

    def _record(self, path: KeyPath, *, header: bool = False) -> None:
        for end in range(1, len(path)):
            self.lines.setdefault(path[:end], self._line)
        if header:
            self.lines[path] = self._line
        else:
            self.lines.setdefault(path, self._line)

    def _blank(self, newlines: bool) -> None:
        while self._i < len(self._text):
            char = self._peek()
            if char in " \t" or (newlines and char in "\r\n"):
                self._advance()
            elif char == "#":
                while self._peek() not in ("", "\n"):
                    self._advance()
            else:
                return

    def _document(self) -> None:
        table: KeyPath = ()
        while True:
            self._blank(newlines=True)
            if self._i >= len(self._text):
                return
            if self._peek() == "[" and self._peek(1) == "[":
                self._advance(2)
                key = self._key()
                self._expect("]]")
                index = self._tables.get(key, 0)
                self._tables[key] = index + 1
                self.lines.setdefault(key, self._line)
                table = (*key, index)
                self._record(table, header=True)
            elif self._peek() == "[":
                self._advance()
                key = self._key()
                self._expect("]")
                table = key
                self._record(table, header=True)
            else:
                key = self._key()
                self._record(table + key)
                self._expect("=")
                self._value(table + key)

    def _expect(self, token: str) -> None:
        self._blank(newlines=False)
        if not self._text.startswith(token, self._i):
            raise ValueError(f"expected {token!r} at line {self._line}")
        self._advance(len(token))

    def _key(self) -> tuple[str, ...]:
        parts: list[str] = []
        while True:
            self._blank(newlines=False)
            char = self._peek()
            if char in ('"', "'"):
                raw = self._string()
                parts.append(tomllib.loads(f"k = {raw}")["k"])
            else:
                match = BARE_KEY.match(self._text, self._i)
                if match is None:
                    raise ValueError(f"no key at line {self._line}")
                parts.append(match.group())
                self._advance(match.end() - self._i)
            self._blank(newlines=False)
            if self._peek() != ".":
                return tuple(parts)
            self._advance()

    def _string(self) -> str:
        start, quote = self._i, self._peek()
        if self._text.startswith(quote * 3, self._i):
            self._advance(3)
            while not self._text.startswith(quote * 3, self._i):
                if self._i >= len(self._text):
                    raise ValueError("unterminated string")
                self._advance(2 if quote == '"' and self._peek() == "\\" else 1)
            self._advance(3)
            while self._peek() == quote:  # up to two quotes may close the content itself
                self._advance()
        else:
            self._advance()
            while self._peek() != quote:
                if self._peek() in ("", "\n"):
                    raise ValueError("unterminated string")
                self._advance(2 if quote == '"' and self._peek() == "\\" else 1)
            self._advance()
        return self._text[start : self._i]

    def _value(self, path: KeyPath) -> None:
        self._blank(newlines=False)
        char = self._peek()
        if char in ('"', "'"):
            self._string()
        elif char == "[":
            self._advance()
            index = 0
            while True:
                self._blank(newlines=True)
                if self._peek() == "]":
                    self._advance()
                    return
                self._record((*path, index))
                self._value((*path, index))
                self._blank(newlines=True)
                if self._peek() == ",":
                    self._advance()
                    index += 1
        elif char == "{":
            self._advance()
            while True:
                self._blank(newlines=False)
                if self._peek() == "}":
                    self._advance()
                    return
                key = self._key()
                self._record(path + key)
                self._expect("=")
                self._value(path + key)
                self._blank(newlines=False)
                if self._peek() == ",":
                    self._advance()
        else:
            while self._peek() not in ("", ",", "]", "}", "\n", "\r", "#"):
                self._advance()


def dotted(path: KeyPath) -> str:
    """A key path as TOML writes it: ``sites."LCG.CERN.ch".ces.ce1.queues.long.shapes[0].mem``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            bare = BARE_KEY.fullmatch(part) is not None
            shown = part if bare else '"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"'
            text += ("." if text else "") + shown
    return text
