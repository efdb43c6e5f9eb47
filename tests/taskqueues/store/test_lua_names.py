"""Names exist once: the Lua scripts take key suffixes and Python's defaults from the loader's constants."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from taskqueues.store import scripts
from taskqueues.store.keys import Keys, lua_names
from taskqueues.store.records import DEFAULT_MAX_RETRIES

LUA = resources.files("taskqueues.store") / "lua"


def _files() -> list[str]:
    return sorted(entry.name for entry in LUA.iterdir() if entry.name.endswith(".lua"))


@pytest.mark.parametrize("name", _files())
def test_no_script_spells_a_key_suffix_or_the_retry_limit(name: str) -> None:
    text = (LUA / name).read_text()
    spelled = re.findall(r"base \.\. '[^']*'", text)
    assert not spelled, f"{name} builds key names itself: {spelled}"
    assert not re.search(r"MAX_RETRIES\s*=", text), f"{name} repeats the default retry limit"


def test_the_constants_are_what_the_key_builders_build() -> None:
    keys = Keys(prefix="pf", vo="lhcb")
    base = keys.base + ":"
    names = lua_names()
    assert base + names["K_TQ"] + "x" == keys.tq("x")
    assert base + names["K_QH"] + "a/b/c" == keys.qheads("a/b/c")
    assert base + names["K_POOL"] + "x" == keys.pool("x")
    assert base + names["K_CTL"] + "p" == keys.pilot_channel("p")
    assert base + names["K_JOBS"] == keys.jobs and base + names["K_WORK"] == keys.work
    assert scripts.constants()["MAX_RETRIES"] == DEFAULT_MAX_RETRIES


def test_every_constant_a_script_names_is_defined_in_front_of_it(real_redis: redis.Redis) -> None:
    for name in scripts.names():
        source = scripts.source(name)
        body = source.split("\n", 1)[1] if source.startswith("local K_") or source.startswith("local MAX") else source
        for constant in set(re.findall(r"\b(K_[A-Z]+|MAX_RETRIES)\b", body)):
            assert constant in scripts.constants(), f"{name} names {constant}, which the loader does not define"
            assert re.match(rf"local [^\n]*\b{constant}\b", source), f"{name}: {constant} is not put in front"
        real_redis.script_load(source)  # compiles
