"""The one way a test waits: poll a condition until it holds, and fail naming what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "",
    between: Callable[[], object] | None = None,
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something true, and return that.

    After ``timeout`` seconds (a bound for a busy machine, never a measurement) the test fails with
    ``what`` (a callable is asked only then, so it can describe the state at the failure). The condition
    is always asked once more after the deadline, so a slow machine fails only if it is really not done.
    ``between``, if given, is called after each check that failed (to drive what the test waits for: a
    director cycle, a lease reap).
    """
    deadline = time.monotonic() + timeout
    while True:
        last = time.monotonic() > deadline
        value = condition()
        if value:
            return value
        if last:
            described = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout:g} s waiting for {described or condition}")
        if between is not None:
            between()
        time.sleep(interval)
