"""Reading a catalog: TOML text to validated levels, every refusal naming the file, the line and the key."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping

from taskqueues.errors import ConfigError, RequirementError
from taskqueues.requirements import BANNED_SITE, CONSUMABLES, MAX_CPU, MAX_MEM_MB, MAX_WALL_S, check_name, check_value
from taskqueues.shapes import Shape
from taskqueues.units import parse_duration_s, parse_size_mb

from .levels import Level, Settings
from .positions import KeyPath, Positions, dotted
from .queue import BATCH_SYSTEMS

__all__ = ["Reader", "read_levels"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_SETTINGS = ("batch", "batch_options", "shapes", "n_max_queued", "max_running", "wall_granularity", "pilot_lifetime")
_PER_VO_SETTINGS = frozenset({"batch_options", "n_max_queued", "max_running", "wall_granularity", "pilot_lifetime"})
_SHAPE_KEYS = ("name", "cpu", "mem", "tmp", "wall", "cost")
_IMPLICIT = ("Site", "CE", "Queue")


def _reason(error: RequirementError) -> str:
    """The message of a RequirementError without the ``field '...':`` prefix (we say the key ourselves)."""
    text = str(error)
    prefix = f"field {error.field!r}: " if error.field else ""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


class Reader:
    """Turns the parsed TOML mapping into levels, raising ConfigError with file and line."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.positions = Positions(text)

    def error(self, path: KeyPath, message: str) -> ConfigError:
        line = self.positions.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        return ConfigError(f"{where}: {dotted(path)}: {message}" if path else f"{where}: {message}")

    def document(self, data: Mapping[str, object]) -> list[Level]:
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
                        header = dotted((*queue.path, "shapes"))
                        raise self.error(
                            queue.path,
                            f"the queue has no pilot shapes; add [[{header}]] here or on its CE or site",
                        )
        return levels

    def table(self, value: object, path: KeyPath, what: str) -> Mapping[str, object]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(path, f"{what} must be a table, got {type(value).__name__}")
        return value

    def name(self, name: str, path: KeyPath, what: str) -> str:
        if not _NAME_RE.match(name):
            raise self.error(
                path,
                f"{what} name {name!r} must be 1-128 letters, digits or '._+-', starting with a letter/digit",
            )
        return name

    def level(self, name: str, value: object, path: KeyPath, kind: str) -> Level:
        self.name(name, path, kind)
        body = self.table(value, path, f"a {kind}")
        child_key = {"site": "ces", "ce": "queues", "queue": None}[kind]
        children: list[Level] = []
        if child_key is not None:
            child_kind = "ce" if kind == "site" else "queue"
            kids = self.table(body.get(child_key), (*path, child_key), f"{child_key}")
            if not kids:
                header = dotted((*path, child_key, "NAME"))
                label = "CE" if child_kind == "ce" else "queue"
                raise self.error(path, f"this {kind} has no {label}; add a [{header}] table")
            children = [self.level(n, v, (*path, child_key, n), child_kind) for n, v in kids.items()]
        per_vo: dict[str, Settings] = {}
        for vo, section in self.table(body.get("vo"), (*path, "vo"), "vo").items():
            self.name(vo, (*path, "vo", vo), "VO")
            per_vo[vo] = self.settings(
                self.table(section, (*path, "vo", vo), "a VO section"), (*path, "vo", vo), None, True
            )
        own = self.settings(body, path, child_key, False)
        return Level(name, path, own, per_vo, children)

    def settings(self, body: Mapping[str, object], path: KeyPath, child_key: str | None, per_vo: bool) -> Settings:
        result = Settings()
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

    def parameter(self, result: Settings, key: str, value: object, at: KeyPath) -> None:
        if isinstance(value, Mapping):
            raise self.error(at, "unknown table: parameters are numbers, strings or lists of strings")
        if key in CONSUMABLES:
            raise self.error(at, f"{key!r} is a consumable: give it in the queue's shapes, not as a parameter")
        if key in _IMPLICIT:
            raise self.error(at, f"{key!r} is set from the table names and cannot be given")
        if key == BANNED_SITE:
            raise self.error(at, "BannedSite is a job requirement, not a resource parameter")
        try:
            check_name(key)
            result.params[key] = check_value(key, value)
        except RequirementError as exc:
            raise self.error(at, _reason(exc)) from None

    def setting(self, result: Settings, key: str, value: object, at: KeyPath) -> None:
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
        elif key == "pilot_lifetime":
            result.pilot_lifetime = self.amount(value, at, duration=True)
        else:
            count = self.amount(value, at, duration=False)
            if key == "n_max_queued":
                result.n_max_queued = count
            else:
                result.max_running = count

    def amount(self, value: object, at: KeyPath, *, duration: bool) -> int:
        if duration:
            try:
                number = parse_duration_s(value, field=dotted(at), maximum=MAX_WALL_S)
            except RequirementError as exc:
                raise self.error(at, _reason(exc)) from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise self.error(at, f"must be a whole number, got {value!r}")
        else:
            number = value
        if number < 1:
            raise self.error(at, f"must be at least 1, got {value!r}")
        return number

    def shapes(self, value: object, at: KeyPath) -> tuple[Shape, ...]:
        if not isinstance(value, list) or not value:
            raise self.error(at, 'shapes must be a non-empty array of tables ([[...shapes]] or [{ name = "..." }])')
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

    def shape(self, item: object, at: KeyPath) -> Shape:
        if not isinstance(item, Mapping):
            raise self.error(at, f"a shape must be a table, got {item!r}")
        for key in item:
            if key not in _SHAPE_KEYS:
                raise self.error((*at, key), f"unknown shape key {key!r}; a shape has {', '.join(_SHAPE_KEYS)}")
        for key in ("name", "cpu", "mem"):
            if key not in item:
                raise self.error(at, f"a shape needs {key!r}")
        name = item["name"]
        if not isinstance(name, str):
            raise self.error((*at, "name"), f"a shape name must be a string, got {name!r}")
        self.name(name, (*at, "name"), "shape")
        cpu = item["cpu"]
        if isinstance(cpu, bool) or not isinstance(cpu, int) or not 1 <= cpu <= MAX_CPU:
            raise self.error((*at, "cpu"), f"cpu must be a whole number of cores in 1..{MAX_CPU}, got {cpu!r}")
        try:
            mem = parse_size_mb(item["mem"], field=dotted((*at, "mem")), maximum=MAX_MEM_MB)
        except RequirementError as exc:
            raise self.error((*at, "mem"), _reason(exc)) from None
        try:
            tmp = parse_size_mb(item.get("tmp", 0), field=dotted((*at, "tmp")), maximum=MAX_MEM_MB)
        except RequirementError as exc:
            raise self.error((*at, "tmp"), _reason(exc)) from None
        wall = self.amount(item.get("wall", 86400), (*at, "wall"), duration=True)
        cost = item.get("cost", 1.0)
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
            raise self.error((*at, "cost"), f"cost must be a finite number >= 0, got {cost!r}")
        return Shape(name=name, cpu=cpu, mem=mem, tmp=tmp, wall=wall, cost=float(cost))


def read_levels(text: str, source: str) -> list[Level]:
    """The sites of a catalog's TOML ``text``, validated; ConfigError names ``source`` and the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{source}:{found.group(1)}:{found.group(2)}" if found else source
        raise ConfigError(f"{where}: TOML syntax error: {exc}") from None
    return Reader(text, source).document(data)
