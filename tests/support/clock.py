"""A settable clock for the code that accepts one (store, submitter, MJF readers): time moves when the test says."""

from __future__ import annotations


class FakeClock:
    """A settable clock for lease and back-off tests (the store takes any callable)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
