"""The Lua scripts of ``taskqueues/lua``: read once, loaded as one function library (:mod:`taskqueues.functions`).

Each ``<name>.lua`` is one operation; ``_lib.lua`` holds the helpers the scripts share and is put in
front of each script that calls one of them, so a script file stays readable on its own (its header
names every KEYS[i] and ARGV[i]). ``match.lua``, the hot path, uses none and gets none.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_LIB = "_lib"


_LIB_FUNCTION = re.compile(r"^local function (\w+)", re.MULTILINE)


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the shared helpers if it calls any, then the script."""
    folder = resources.files("taskqueues") / "lua"
    lib = (folder / f"{_LIB}.lua").read_text()
    body = (folder / f"{name}.lua").read_text()
    uses_lib = any(re.search(rf"\b{fn}\(", body) for fn in _LIB_FUNCTION.findall(lib))
    return lib + "\n" + body if uses_lib else body


def names() -> list[str]:
    folder = resources.files("taskqueues") / "lua"
    return sorted(
        entry.name.removesuffix(".lua")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )
