"""scripts/count_match.py's guard: the stored baseline of instructions per match call that bench_match.py and
bench_e2e.py print their ratio against. Counting itself needs callgrind (a minute or more), so what is checked
here is the baseline's form and the ratio's arithmetic; the counts are what the scripts print."""

from __future__ import annotations

from pathlib import Path

import redis

from taskqueues.store import Store
from tests.support.scripts import script

count_match = script("count_match")


def test_the_stored_baseline_holds_the_default_rows_in_their_order() -> None:
    stored = count_match.baseline()
    assert list(stored) == count_match.DEFAULT_ROWS.split(",")
    assert all(100_000 < v < 5_000_000 for v in stored.values())


def test_a_ratio_is_against_the_row_of_the_same_name_and_missing_rows_say_so(tmp_path: Path) -> None:
    stored = {"10:fill": 300_000.0, "1000:fill": 600_000.0}
    assert count_match.ratio_text("1000:fill", 660_000, stored) == "1.10x"
    assert count_match.ratio_text("10:fill", 300_000, stored) == "1.00x"
    assert count_match.ratio_text("1000:one", 300_000, stored) == "-"
    assert count_match.baseline(tmp_path / "none.json") == {}


def test_each_policy_row_is_set_against_the_policy_free_row_of_as_many_task_queues() -> None:
    counted = {
        "10:fill": (300_000.0, 1.7),
        "10:fill+s": (390_000.0, 1.7),
        "10:fill+s@200000": (420_000.0, 1.7),
        "1000:fill+s": (900_000.0, 2.7),  # no 1000:fill counted: no ratio
        "1000:one": (330_000.0, 1.0),
    }
    assert count_match.policy_ratios(counted) == [
        "policy cost 10:fill+s: 1.30x of 10:fill",
        "policy cost 10:fill+s@200000: 1.40x of 10:fill",
    ]


def test_the_floor_row_is_set_against_the_policy_free_row_less_its_own_call() -> None:
    counted = {
        "10:fill": (300_000.0, 1.7),
        "10:trivial": (20_000.0, 0.0),
        "10:fill+f": (440_000.0, 1.7),
        "1000:fill+f": (900_000.0, 2.7),  # no 1000:fill nor 1000:trivial counted: no line
    }
    assert count_match.policy_ratios(counted) == [
        "policy floor 10:fill+f: 1.40x of 10:fill (420k: 10:fill+f less 10:trivial, the floor's call itself)"
    ]


def test_the_gc_function_lives_beside_the_store_library_and_collects(real_redis: redis.Redis) -> None:
    """``--gc`` loads its own library on the counting server: the store's loader (which replaces every other
    ``pilotfish_*`` library) leaves it, and it runs a full collection of the functions' Lua state."""
    real_redis.function_load(count_match.GC_LIBRARY, replace=True)
    Store(real_redis).reload_scripts()  # the store's library loaded as after a flush: others deleted
    libraries = {entry[1].decode() for entry in real_redis.function_list()}
    assert "pfcount" in libraries
    assert any(name.startswith("pilotfish_") for name in libraries)
    assert real_redis.fcall("pfcount_gc", 0) == 1
