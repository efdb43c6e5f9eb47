"""The resource catalog: Sites -> Computing Elements -> Queues, with their parameters and pilot shapes.

RFC #7's resources description: every level may carry arbitrary parameters (valid for every
community), and per-community (VO) parameters; a queue inherits from its CE and site. Jobs'
free-form requirements are matched against a queue's *effective* parameters, and its consumables
against the queue's pilot *shapes*. The site director reads the same file to know where and how to
start pilots (batch system, its options, how many may wait or run).

TOML layout
-----------
::

    [sites."LCG.CERN.ch"]            # site parameters: apply to all its CEs and queues
    Platform = "EL9"
    SoftwareTag = ["AppVersion1"]
    [sites."LCG.CERN.ch".vo.lhcb]    # parameters for one community only
    MaxMemory = 4000
    [sites."LCG.CERN.ch".ces.ce1]
    batch = "slurm"                  # local | slurm | sge
    [sites."LCG.CERN.ch".ces.ce1.batch_options]   # handed to the backend as they are
    partition = "debug"
    [sites."LCG.CERN.ch".ces.ce1.queues.long]
    MaxCPUTime = 86400
    n_max_queued = 10                # pilots waiting per shape (open-lmake n_max_queued_jobs)
    max_running = 100                # cap on running + waiting pilots of this queue
    wall_granularity = 600           # pilot wall requests are rounded up to this
    [[sites."LCG.CERN.ch".ces.ce1.queues.long.shapes]]
    name = "c4m16"
    cpu = 4
    mem = "16G"                      # sizes and durations as taskqueues.units reads them
    tmp = "50G"
    wall = "24h"
    cost = 0.20                      # per pilot-hour, any currency used consistently

(Names with dots must be quoted in TOML headers. TOML has no ``;`` separator: one key per line,
or an inline table ``shapes = [{ name = "c1m2", cpu = 1, mem = "2G" }]``.)

Keys of a site, CE or queue table
    ``ces`` (site) / ``queues`` (CE)  the next level down; every site needs a CE, every CE a queue.
    ``vo.<name>``                     per-VO section: parameters, ``batch_options``, ``n_max_queued``,
                                      ``max_running``, ``wall_granularity``.
    ``batch``                         ``local`` (default), ``slurm`` or ``sge``.
    ``batch_options``                 a table passed to the backend (partition, qos, repo_key,
                                      use_nice, root, cell, ...); merged key by key down the levels.
    ``shapes``                        array of tables: ``name``, ``cpu``, ``mem`` required; ``tmp``
                                      (default 0), ``wall`` (default 24 h), ``cost`` (default 1.0).
                                      A queue takes the nearest level's list (not merged).
    ``n_max_queued``                  default 10; ``max_running`` default unlimited;
    ``wall_granularity``              seconds or a duration, default 60.
    anything else                     a parameter: number, string or list of strings, validated
                                      like a requirement value (``Max*``/``Min*`` need numbers).

Inheritance: every value is looked up, from most to least specific, in queue/VO, queue, CE/VO, CE,
site/VO, site; the first level that sets it wins ("more specific wins", and a VO section beats the
all-VO values of its own level). ``batch_options`` and the parameters merge key by key that way.
Each queue's effective parameters also hold ``Site``, ``CE`` and ``Queue`` (its names); those three,
the consumables ``cpu``/``mem``/``tmp``/``wall`` and ``BannedSite`` cannot be set as parameters.
Names (sites, CEs, queues, shapes, VOs) are letters, digits and ``. _ + -``: they appear in queue
ids ``Site/CE/Queue``, batch job names and Redis keys.

Error positions
---------------
``tomllib`` reports syntax errors with line and column (kept in our message) but gives no
positions for valid documents. To name the line of a key whose *value* is wrong, :class:`_Positions`
scans the text once with a small lexer that knows just enough TOML (table and array-of-tables
headers, dotted and quoted keys, strings of all four kinds, arrays and inline tables spanning lines,
comments) to map each key path -- ``("sites", "X", "ces", "Y", "queues", "Z", "shapes", 0, "mem")``
-- to the line where it appears. The text has already passed ``tomllib``, so the lexer need not
validate; if it meets something it does not expect it stops, and errors fall back to the nearest
enclosing table it did locate.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from taskqueues.errors import ConfigError, NoEligibleQueue, RequirementError
from taskqueues.requirements import (
    BANNED_SITE,
    CONSUMABLES,
    MAX_CPU,
    MAX_MEM_MB,
    MAX_WALL_S,
    Requirements,
    Value,
    check_name,
    check_value,
    mismatch,
)
from taskqueues.shapes import Shape
from taskqueues.units import parse_duration_s, parse_size_mb

__all__ = ["BATCH_SYSTEMS", "Catalog", "Queue", "UnknownQueue"]

BATCH_SYSTEMS: tuple[str, ...] = ("local", "slurm", "sge")
DEFAULT_N_MAX_QUEUED = 10
DEFAULT_WALL_GRANULARITY = 60
DEFAULT_VO = "default"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_SETTINGS = ("batch", "batch_options", "shapes", "n_max_queued", "max_running", "wall_granularity")
_PER_VO_SETTINGS = frozenset({"batch_options", "n_max_queued", "max_running", "wall_granularity"})
_SHAPE_KEYS = ("name", "cpu", "mem", "tmp", "wall", "cost")
_IMPLICIT = ("Site", "CE", "Queue")

_Path = tuple[str | int, ...]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class UnknownQueue(ConfigError):
    """A queue id names no queue of the catalog."""


# --------------------------------------------------------------------------------------------------
# Where each key is: a tiny TOML lexer (see "Error positions" in the module docstring).


class _Positions:
    """Key path -> line number, for a text tomllib has accepted."""

    def __init__(self, text: str) -> None:
        self.lines: dict[_Path, int] = {}
        self._text = text
        self._i = 0
        self._line = 1
        self._tables: dict[_Path, int] = {}
        # Best effort: if the lexer stumbles, what it located so far still serves.
        with contextlib.suppress(IndexError, ValueError, tomllib.TOMLDecodeError):
            self._document()

    def line_of(self, path: _Path) -> int | None:
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

    def _record(self, path: _Path, *, header: bool = False) -> None:
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
        table: _Path = ()
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
                match = _BARE_KEY.match(self._text, self._i)
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

    def _value(self, path: _Path) -> None:
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


# --------------------------------------------------------------------------------------------------
# Reading the document into levels.


def _dotted(path: _Path) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            bare = _BARE_KEY.fullmatch(part) is not None
            shown = part if bare else '"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"'
            text += ("." if text else "") + shown
    return text


def _reason(error: RequirementError) -> str:
    """The message of a RequirementError without the ``field '...':`` prefix (we say the key ourselves)."""
    text = str(error)
    prefix = f"field {error.field!r}: " if error.field else ""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


@dataclass
class _Settings:
    """What one table (a level, or one VO section of a level) sets."""

    params: dict[str, Value] = field(default_factory=dict)
    batch: str | None = None
    batch_options: dict[str, object] = field(default_factory=dict)
    shapes: tuple[Shape, ...] | None = None
    n_max_queued: int | None = None
    max_running: int | None = None
    wall_granularity: int | None = None


@dataclass
class _Level:
    """A site, CE or queue as written: its own settings, its VO sections and its children."""

    name: str
    path: _Path
    own: _Settings
    per_vo: dict[str, _Settings]
    children: list[_Level]


class _Reader:
    """Turns the parsed TOML mapping into levels, raising ConfigError with file and line."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.positions = _Positions(text)

    def error(self, path: _Path, message: str) -> ConfigError:
        line = self.positions.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        return ConfigError(f"{where}: {_dotted(path)}: {message}" if path else f"{where}: {message}")

    def document(self, data: Mapping[str, object]) -> list[_Level]:
        for key in data:
            if key != "sites":
                raise self.error((key,), 'unknown top-level key; the catalog has one table, "sites"')
        sites = self.table(data.get("sites"), ("sites",), "the catalog")
        if not sites:
            raise self.error((), "the catalog defines no site; add a [sites.NAME] table")
        levels = [self.level(name, value, ("sites", name), "site") for name, value in sites.items()]
        for site in levels:
            for ce in site.children:
                for queue in ce.children:
                    if all(level.own.shapes is None for level in (site, ce, queue)):
                        header = _dotted((*queue.path, "shapes"))
                        raise self.error(
                            queue.path,
                            f"the queue has no pilot shapes; add [[{header}]] here or on its CE or site",
                        )
        return levels

    def table(self, value: object, path: _Path, what: str) -> Mapping[str, object]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(path, f"{what} must be a table, got {type(value).__name__}")
        return value

    def name(self, name: str, path: _Path, what: str) -> str:
        if not _NAME_RE.match(name):
            raise self.error(
                path,
                f"{what} name {name!r} must be 1-128 letters, digits or '._+-', starting with a letter/digit",
            )
        return name

    def level(self, name: str, value: object, path: _Path, kind: str) -> _Level:
        self.name(name, path, kind)
        body = self.table(value, path, f"a {kind}")
        child_key = {"site": "ces", "ce": "queues", "queue": None}[kind]
        children: list[_Level] = []
        if child_key is not None:
            child_kind = "ce" if kind == "site" else "queue"
            kids = self.table(body.get(child_key), (*path, child_key), f"{child_key}")
            if not kids:
                header = _dotted((*path, child_key, "NAME"))
                label = "CE" if child_kind == "ce" else "queue"
                raise self.error(path, f"this {kind} has no {label}; add a [{header}] table")
            children = [self.level(n, v, (*path, child_key, n), child_kind) for n, v in kids.items()]
        per_vo: dict[str, _Settings] = {}
        for vo, section in self.table(body.get("vo"), (*path, "vo"), "vo").items():
            self.name(vo, (*path, "vo", vo), "VO")
            per_vo[vo] = self.settings(
                self.table(section, (*path, "vo", vo), "a VO section"), (*path, "vo", vo), None, True
            )
        own = self.settings(body, path, child_key, False)
        return _Level(name, path, own, per_vo, children)

    def settings(
        self, body: Mapping[str, object], path: _Path, child_key: str | None, per_vo: bool
    ) -> _Settings:
        result = _Settings()
        for key, value in body.items():
            at = (*path, key)
            if key in ("ces", "queues"):
                if key != child_key:
                    raise self.error(at, f"{key!r} is not allowed here (sites hold ces, CEs hold queues)")
            elif key == "vo":
                if per_vo:
                    raise self.error(at, "a VO section cannot hold another vo section")
            elif key in _SETTINGS:
                if per_vo and key not in _PER_VO_SETTINGS:
                    allowed = ", ".join(sorted(_PER_VO_SETTINGS))
                    raise self.error(
                        at, f"{key!r} cannot differ per VO (a VO section may set {allowed} and parameters)"
                    )
                self.setting(result, key, value, at)
            else:
                self.parameter(result, key, value, at)
        return result

    def parameter(self, result: _Settings, key: str, value: object, at: _Path) -> None:
        if isinstance(value, Mapping):
            raise self.error(at, "unknown table: parameters are numbers, strings or lists of strings")
        if key in CONSUMABLES:
            raise self.error(
                at, f"{key!r} is a consumable: give it in the queue's shapes, not as a parameter"
            )
        if key in _IMPLICIT:
            raise self.error(at, f"{key!r} is set from the table names and cannot be given")
        if key == BANNED_SITE:
            raise self.error(at, "BannedSite is a job requirement, not a resource parameter")
        try:
            check_name(key)
            result.params[key] = check_value(key, value)
        except RequirementError as exc:
            raise self.error(at, _reason(exc)) from None

    def setting(self, result: _Settings, key: str, value: object, at: _Path) -> None:
        if key == "batch":
            if value not in BATCH_SYSTEMS:
                raise self.error(at, f"unknown batch system {value!r}; use one of {', '.join(BATCH_SYSTEMS)}")
            result.batch = str(value)
        elif key == "batch_options":
            result.batch_options = dict(self.table(value, at, "batch_options"))
        elif key == "shapes":
            result.shapes = self.shapes(value, at)
        elif key == "wall_granularity":
            result.wall_granularity = self.amount(value, at, duration=True)
        else:
            count = self.amount(value, at, duration=False)
            if key == "n_max_queued":
                result.n_max_queued = count
            else:
                result.max_running = count

    def amount(self, value: object, at: _Path, *, duration: bool) -> int:
        if duration:
            try:
                number = parse_duration_s(value, field=_dotted(at), maximum=MAX_WALL_S)
            except RequirementError as exc:
                raise self.error(at, _reason(exc)) from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise self.error(at, f"must be a whole number, got {value!r}")
        else:
            number = value
        if number < 1:
            raise self.error(at, f"must be at least 1, got {value!r}")
        return number

    def shapes(self, value: object, at: _Path) -> tuple[Shape, ...]:
        if not isinstance(value, list) or not value:
            raise self.error(
                at, 'shapes must be a non-empty array of tables ([[...shapes]] or [{ name = "..." }])'
            )
        shapes: list[Shape] = []
        seen: dict[str, int] = {}
        for index, item in enumerate(value):
            shape = self.shape(item, (*at, index))
            if shape.name in seen:
                raise self.error(
                    (*at, index, "name"),
                    f"duplicate shape name {shape.name!r} (also shapes[{seen[shape.name]}])",
                )
            seen[shape.name] = index
            shapes.append(shape)
        return tuple(shapes)

    def shape(self, item: object, at: _Path) -> Shape:
        if not isinstance(item, Mapping):
            raise self.error(at, f"a shape must be a table, got {item!r}")
        for key in item:
            if key not in _SHAPE_KEYS:
                raise self.error(
                    (*at, key), f"unknown shape key {key!r}; a shape has {', '.join(_SHAPE_KEYS)}"
                )
        for key in ("name", "cpu", "mem"):
            if key not in item:
                raise self.error(at, f"a shape needs {key!r}")
        name = item["name"]
        if not isinstance(name, str):
            raise self.error((*at, "name"), f"a shape name must be a string, got {name!r}")
        self.name(name, (*at, "name"), "shape")
        cpu = item["cpu"]
        if isinstance(cpu, bool) or not isinstance(cpu, int) or not 1 <= cpu <= MAX_CPU:
            raise self.error(
                (*at, "cpu"), f"cpu must be a whole number of cores in 1..{MAX_CPU}, got {cpu!r}"
            )
        try:
            mem = parse_size_mb(item["mem"], field=_dotted((*at, "mem")), maximum=MAX_MEM_MB)
        except RequirementError as exc:
            raise self.error((*at, "mem"), _reason(exc)) from None
        try:
            tmp = parse_size_mb(item.get("tmp", 0), field=_dotted((*at, "tmp")), maximum=MAX_MEM_MB)
        except RequirementError as exc:
            raise self.error((*at, "tmp"), _reason(exc)) from None
        wall = self.amount(item.get("wall", 86400), (*at, "wall"), duration=True)
        cost = item.get("cost", 1.0)
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
            raise self.error((*at, "cost"), f"cost must be a finite number >= 0, got {cost!r}")
        return Shape(name=name, cpu=cpu, mem=mem, tmp=tmp, wall=wall, cost=float(cost))


# --------------------------------------------------------------------------------------------------
# The public objects.


@dataclass(frozen=True)
class Queue:
    """One batch queue as a given VO sees it: effective parameters, how to start pilots, their shapes."""

    id: str
    site: str
    ce: str
    name: str
    params: Mapping[str, Value]
    batch: str
    batch_options: Mapping[str, object]
    shapes: tuple[Shape, ...]
    n_max_queued: int = DEFAULT_N_MAX_QUEUED
    max_running: int | None = None
    wall_granularity: int = DEFAULT_WALL_GRANULARITY

    def __hash__(self) -> int:
        return hash((self.id, self.shapes))

    def holds(self, req: Requirements) -> bool:
        """True when some shape of this queue holds the job's exact consumables."""
        return any(shape.holds(req.cpu, req.mem, req.tmp, req.wall or 0) for shape in self.shapes)

    def reason(self, req: Requirements) -> str | None:
        """None when the queue can run ``req``; else the first requirement that excludes it, in one line."""
        why = mismatch(req, self.params)
        if why is not None:
            return why
        if self.holds(req):
            return None
        wanted = {"cpu": req.cpu, "mem": req.mem, "tmp": req.tmp, "wall": req.wall or 0}
        units = {"cpu": "", "mem": " MB", "tmp": " MB", "wall": " s"}
        asked = ", ".join(
            f"{k}={v}{units[k]}" for k, v in wanted.items() if k != "wall" or req.wall is not None
        )
        short = []
        for shape in self.shapes:
            lacks = [f"{k} {getattr(shape, k)}{units[k]}" for k, v in wanted.items() if getattr(shape, k) < v]
            short.append(f"{shape.name} has {', '.join(lacks)}")
        return f"consumables: wants {asked}; no shape holds it ({'; '.join(short)})"


class Catalog:
    """Sites, CEs and queues read from TOML; answers "which queues can run this requirement class"."""

    def __init__(self, sites: Sequence[_Level], source: str) -> None:
        self._sites = tuple(sites)
        self.source = source
        self._by_vo: dict[str, list[Queue]] = {}
        self.queues(DEFAULT_VO)  # resolve once now so a broken catalog fails at load

    @classmethod
    def load(cls, path: str | Path) -> Catalog:
        """Read a catalog file; ConfigError names the file and line of any problem."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the catalog: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: the catalog is not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        return cls.loads(text, source=str(path))

    @classmethod
    def loads(cls, text: str, source: str = "<catalog>") -> Catalog:
        """Read a catalog from TOML text; ``source`` names it in error messages."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            where = f"{source}:{found.group(1)}:{found.group(2)}" if found else source
            raise ConfigError(f"{where}: TOML syntax error: {exc}") from None
        reader = _Reader(text, source)
        return cls(reader.document(data), source)

    @classmethod
    def local_default(cls) -> Catalog:
        """One queue, ``local/localhost/local``, whose one shape is this whole host (``pilotfish run``).

        Cores from the CPU affinity mask, memory from sysconf, disk from the free space of the
        temporary directory, all in decimal MB; wall 7 days; cost 0.
        """
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 10**6
        tmp = shutil.disk_usage(tempfile.gettempdir()).free // 10**6
        text = (
            "[sites.local.ces.localhost.queues.local]\n"
            'batch = "local"\n'
            "[[sites.local.ces.localhost.queues.local.shapes]]\n"
            'name = "host"\n'
            f"cpu = {min(max(cores, 1), MAX_CPU)}\n"
            f"mem = {min(mem, MAX_MEM_MB)}\n"
            f"tmp = {min(tmp, MAX_MEM_MB)}\n"
            f"wall = {7 * 86400}\n"
            "cost = 0.0\n"
        )
        return cls.loads(text, source="<local default catalog>")

    def vos(self) -> frozenset[str]:
        """The communities with a VO section somewhere in the catalog."""
        return frozenset(vo for level in self._walk() for vo in level.per_vo)

    def _walk(self) -> Iterator[_Level]:
        stack = list(reversed(self._sites))
        while stack:
            level = stack.pop()
            yield level
            stack.extend(reversed(level.children))

    def queues(self, vo: str = DEFAULT_VO) -> list[Queue]:
        """Every queue as ``vo`` sees it, in file order."""
        if vo not in self._by_vo:
            self._by_vo[vo] = [
                self._resolve(site, ce, queue, vo)
                for site in self._sites
                for ce in site.children
                for queue in ce.children
            ]
        return list(self._by_vo[vo])

    def _resolve(self, site: _Level, ce: _Level, queue: _Level, vo: str) -> Queue:
        layers = [
            layer for level in (site, ce, queue) for layer in (level.own, level.per_vo.get(vo)) if layer
        ]
        params: dict[str, Value] = {}
        options: dict[str, object] = {}
        for layer in layers:
            params.update(layer.params)
            options.update(layer.batch_options)
        params.update({"Site": site.name, "CE": ce.name, "Queue": queue.name})

        def nearest(attr: str) -> object:
            for layer in reversed(layers):
                value = getattr(layer, attr)
                if value is not None:
                    return value
            return None

        shapes = nearest("shapes")
        assert isinstance(shapes, tuple), "the reader refuses queues without shapes"
        n_max_queued, max_running, granularity = (
            nearest(a) for a in ("n_max_queued", "max_running", "wall_granularity")
        )
        return Queue(
            id=f"{site.name}/{ce.name}/{queue.name}",
            site=site.name,
            ce=ce.name,
            name=queue.name,
            params=MappingProxyType(dict(sorted(params.items()))),
            batch=str(nearest("batch") or "local"),
            batch_options=MappingProxyType(options),
            shapes=shapes,
            n_max_queued=n_max_queued if isinstance(n_max_queued, int) else DEFAULT_N_MAX_QUEUED,
            max_running=max_running if isinstance(max_running, int) else None,
            wall_granularity=granularity if isinstance(granularity, int) else DEFAULT_WALL_GRANULARITY,
        )

    def queue(self, queue_id: str, vo: str = DEFAULT_VO) -> Queue:
        """The queue ``Site/CE/Queue``; UnknownQueue (a ConfigError) if the catalog has none such."""
        for queue in self.queues(vo):
            if queue.id == queue_id:
                return queue
        ids = [queue.id for queue in self.queues(vo)]
        close = difflib.get_close_matches(queue_id, ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(ids[:10])}"
        raise UnknownQueue(f"{self.source}: no queue {queue_id!r}{hint}")

    def offered_names(self, vo: str = DEFAULT_VO) -> frozenset[str]:
        """Every parameter name some queue offers to ``vo`` (Site, CE and Queue included)."""
        return frozenset(name for queue in self.queues(vo) for name in queue.params)

    def check_names(self, req: Requirements, *, job: str, vo: str = DEFAULT_VO) -> None:
        """RequirementError when the job requires a name no queue offers (RFC #7: most likely a typo).

        Consumables and BannedSite are always allowed.
        """
        offered = self.offered_names(vo)
        unknown = sorted(n for n in req.free_form() if n != BANNED_SITE and n not in offered)
        if not unknown:
            return
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(offered), n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise RequirementError(
            f"no queue of {self.source} offers {', '.join(parts)} to VO {vo!r}", job=job, field=unknown[0]
        )

    def eligible_queues(self, req: Requirements, vo: str = DEFAULT_VO) -> list[Queue]:
        """Queues whose parameters satisfy the free-form requirements and one of whose shapes fits the job."""
        return [queue for queue in self.queues(vo) if queue.reason(req) is None]

    def explain(self, req: Requirements, vo: str = DEFAULT_VO) -> dict[str, str | None]:
        """Queue id -> None if eligible, else the one-line reason it is not."""
        return {queue.id: queue.reason(req) for queue in self.queues(vo)}

    def require_eligible(self, req: Requirements, *, job: str, vo: str = DEFAULT_VO) -> list[Queue]:
        """The eligible queues; NoEligibleQueue naming, per queue, what excluded it, when there is none.

        The error's field is the first requirement that alone stands in the way (without it some queue
        could run the job), when there is one: ``job 'x', field 'cpu': no queue ... can run it``.
        """
        eligible = self.eligible_queues(req, vo)
        if eligible:
            return eligible
        reasons = [f"{queue_id}: {why}" for queue_id, why in self.explain(req, vo).items()]
        shown = reasons[:20] + ([f"... and {len(reasons) - 20} more"] if len(reasons) > 20 else [])
        culprit = next((name for name in sorted(req.values) if self.eligible_queues(req.without(name), vo)), None)
        raise NoEligibleQueue(
            f"no queue of {self.source} can run it for VO {vo!r} -- " + " | ".join(shown), job=job, field=culprit
        )
