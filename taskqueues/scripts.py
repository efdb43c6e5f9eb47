"""The Lua scripts of ``taskqueues/lua``: read once, registered with ``register_script`` (EVALSHA).

Each ``<name>.lua`` is one operation; ``_lib.lua`` holds the helpers every script shares and is put in
front of each at load time, so a script file stays readable on its own (its header names every KEYS[i]
and ARGV[i]).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from redis.commands.core import Script

import redis

_LIB = "_lib"


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the shared helpers, then the script."""
    folder = resources.files("taskqueues") / "lua"
    lib = (folder / f"{_LIB}.lua").read_text()
    return lib + "\n" + (folder / f"{name}.lua").read_text()


def names() -> list[str]:
    folder = resources.files("taskqueues") / "lua"
    return sorted(
        entry.name.removesuffix(".lua")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )


def register(client: redis.Redis) -> dict[str, Script]:
    """Every script registered on ``client``; redis-py sends EVALSHA and loads it once on NOSCRIPT."""
    return {name: client.register_script(source(name)) for name in names()}
