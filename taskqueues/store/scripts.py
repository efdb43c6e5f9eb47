"""The Lua scripts of ``taskqueues/store/lua``: their names, and the text each is loaded with.

Each ``<name>.lua`` is one operation; ``_lib.lua`` holds the helpers the scripts share and is put in
front of each script that calls one of them, so a script file stays readable on its own (its header
names every KEYS[i] and ARGV[i]). The helpers are that script's load-time part, above a line ``-- per call:``
(:func:`taskqueues.store.functions.wrapped`): made once when the library loads, their per-call state set by
``begin(KEYS, ARGV)``, which the loader puts first below the line. ``match.lua``, the hot path, uses none and
gets none; it has a load-time part of its own. The store loads them as one Redis function library
(:mod:`taskqueues.store.functions`).

Names exist once: a script does not spell a key suffix or a default of Python's, it names a constant
(``K_TQ``, ``MAX_RETRIES``...) and the loader puts in front of it one line of ``local`` constants holding
those it uses, rendered from :func:`taskqueues.store.keys.lua_names` and
:data:`taskqueues.store.records.DEFAULT_MAX_RETRIES` (and :data:`taskqueues.store.keys.WAKE_SHARDS`).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from ..errors import StoreError
from .keys import MATCHED_COUNT, WAKE_SHARDS, lua_names
from .records import DEFAULT_MAX_RETRIES

_LIB = "_lib"
#: The line that ends a script's load-time part (:func:`taskqueues.store.functions.wrapped`).
PER_CALL = "\n-- per call:\n"
#: What a script that uses ``_lib.lua`` runs first on every call.
_BEGIN = "begin(KEYS, ARGV)\n"


_LIB_FUNCTION = re.compile(r"^local function (\w+)", re.MULTILINE)
#: A name called (``name(``; ``cjson.decode(`` calls ``decode`` too, as far as this test goes), and a word: each
#: text is read once for all names (a search per name read it 40 to 60 times: 0.46 s for the library).
_CALLED = re.compile(r"\b(\w+)\(")
_WORD = re.compile(r"\w+")


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the shared helpers if it calls any, then the script."""
    folder = resources.files("taskqueues.store") / "lua"
    lib = (folder / f"{_LIB}.lua").read_text()
    body = (folder / f"{name}.lua").read_text()
    uses_lib = not set(_LIB_FUNCTION.findall(lib)).isdisjoint(_CALLED.findall(body))
    if uses_lib and PER_CALL in f"\n{body}\n":
        # the helpers are the load-time part of a script that uses them: it has no room for one of its own
        raise StoreError(f"{name}.lua has a load-time part (-- per call:) and uses _lib.lua, which is one already")
    # The helpers are made once, when the library loads; begin() sets their per-call state (see _lib.lua).
    text = lib + PER_CALL + _BEGIN + body if uses_lib else body
    return prelude(text) + text


def constants() -> dict[str, str | int]:
    """Every constant the loader may put in front of a script, by its Lua name."""
    return {**lua_names(), "MAX_RETRIES": DEFAULT_MAX_RETRIES, "MATCHED": MATCHED_COUNT, "WAKE_SHARDS": WAKE_SHARDS}


def prelude(text: str) -> str:
    """One line of ``local`` constants: those of :func:`constants` that ``text`` names (empty if none)."""
    values = constants()
    words = set(_WORD.findall(text))
    used = [name for name in values if name in words]
    if not used:
        return ""
    shown = [f"'{v}'" if isinstance(v, str) else str(v) for v in (values[name] for name in used)]
    return f"local {', '.join(used)} = {', '.join(shown)}\n"


def names() -> list[str]:
    folder = resources.files("taskqueues.store") / "lua"
    return sorted(
        entry.name.removesuffix(".lua")
        for entry in folder.iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )
