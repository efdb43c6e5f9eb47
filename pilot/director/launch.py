"""How the director launches a pilot: the command line a pilot starts with (its shape, wall and the settings that
reach it that one way) and a queue's batch options split into backend settings and per-pilot resources."""

from __future__ import annotations

import sys
from collections.abc import Callable

from taskqueues.catalog import Queue
from taskqueues.settings import Settings
from taskqueues.shapes import Shape

__all__ = ["PASS_THROUGH", "PilotCommand", "default_pilot_command", "split_batch_options"]

PilotCommand = Callable[[Queue, Shape, int, Settings], list[str]]

# batch_options keys that are not backend settings but resources passed with every pilot (the seed's
# pass-through resources); any other resource goes in a ``resources`` sub-table (Grid Engine ``-l``).
PASS_THROUGH = {
    "slurm": {"gres", "features", "licenses", "reservation", "nodes", "excludes"},
    "sge": {"hard", "soft"},
    "local": set(),
}


def split_batch_options(queue: Queue) -> tuple[dict[str, object], dict[str, str]]:
    """A queue's ``batch_options`` as (backend settings, resources passed with each pilot)."""
    options = dict(queue.batch_options)
    raw = options.pop("resources", {})
    resources = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    for key in PASS_THROUGH.get(queue.batch, set()) & set(options):
        resources[key] = str(options.pop(key))
    return options, resources


def default_pilot_command(queue: Queue, shape: Shape, wall: int, settings: Settings) -> list[str]:
    """How a pilot is started: this Python, the ``pilotfish pilot`` command, the shape and wall it holds."""
    return [
        sys.executable,
        "-m",
        "matcher.cli",
        "pilot",
        "--queue",
        queue.id,
        "--vo",
        settings.vo,
        "--prefix",
        settings.prefix,
        "--cores",
        str(shape.cpu),
        "--mem",
        str(shape.mem),
        "--tmp",
        str(shape.tmp),
        "--wall",
        str(wall),
        "--lease",
        str(settings.lease_seconds),
        "--idle-timeout",
        str(settings.pilot_idle_timeout),
        "--stop-margin",
        str(settings.pilot_stop_margin),
        "--events" if settings.pilot_events else "--no-events",
        "--payload-sandbox",
        settings.payload_sandbox,
        "--payload-shared-paths",
        settings.payload_shared_paths,
    ]
