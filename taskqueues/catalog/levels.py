"""A catalog as written: sites, CEs and queues (levels), each with its own settings and its VO sections."""

from __future__ import annotations

from dataclasses import dataclass, field

from taskqueues.requirements import Value
from taskqueues.shapes import Shape

from .positions import KeyPath

__all__ = ["Level", "Settings"]


@dataclass
class Settings:
    """What one table (a level, or one VO section of a level) sets."""

    params: dict[str, Value] = field(default_factory=dict)
    batch: str | None = None
    batch_options: dict[str, object] = field(default_factory=dict)
    shapes: tuple[Shape, ...] | None = None
    n_max_queued: int | None = None
    max_running: int | None = None
    wall_granularity: int | None = None
    pilot_lifetime: int | None = None


@dataclass
class Level:
    """A site, CE or queue as written: its own settings, its VO sections and its children."""

    name: str
    path: KeyPath
    own: Settings
    per_vo: dict[str, Settings]
    children: list[Level]
