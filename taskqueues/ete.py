"""Execution-time estimates (ETE): how long a job will run, learnt from the runs that succeeded.

The pressure of a job (:mod:`taskqueues.dag`) needs the ETE of every job still to run. We follow
open-lmake, in this order:

1. ``key``: the last *successful* run time of the same job, named across runs by its key. A job
   re-run with the same inputs usually takes what it took last time: the best guess there is.
2. ``rule``: the running mean of the successful runs of its rule. The first 100 runs make an exact
   cumulative mean (every run weighs the same while we know little); from the 101st on, an
   exponential moving average with ``alpha = 1/100``, so the estimate follows a rule whose inputs grow
   over months instead of being anchored to its first runs forever.
3. ``hint``: what the user said (the job's ``ete``, else its ``wall`` requirement, an upper bound that
   is still better than nothing).
4. ``default``: the configured default.

Failed, cancelled and killed runs never count: a job that crashed after 2 s says nothing about how
long it takes to succeed. These are pure values and functions; the store keeps them in Redis
(:meth:`RuleStats.to_fields` / :meth:`RuleStats.from_fields` give the hash fields).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from taskqueues.errors import ValidationError

__all__ = ["CUMULATIVE_RUNS", "EMA_ALPHA", "EteSource", "RuleStats", "estimate", "last_success"]

CUMULATIVE_RUNS = 100
EMA_ALPHA = 1 / CUMULATIVE_RUNS

EteSource: TypeAlias = Literal["key", "rule", "hint", "default"]


def _check_time(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{what} must be a number of seconds, not {type(value).__name__}", field="ete")
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"{what} must be a finite number of seconds >= 0, got {value!r}", field="ete")
    return float(value)


@dataclass(frozen=True)
class RuleStats:
    """How long the successful runs of one rule took: ``n`` runs counted, ``mean`` seconds."""

    n: int = 0
    mean: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise ValidationError(f"run count must be an integer >= 0, got {self.n!r}", field="ete")
        _check_time(self.mean, "a rule's mean run time")

    def update(self, run_time: float) -> RuleStats:
        """The statistics after one more successful run of ``run_time`` seconds."""
        run_time = _check_time(run_time, "a run time")
        count = self.n + 1
        weight = 1 / count if count <= CUMULATIVE_RUNS else EMA_ALPHA
        return RuleStats(count, self.mean + (run_time - self.mean) * weight)

    def record(self, run_time: float, *, succeeded: bool) -> RuleStats:
        """:meth:`update` for a successful run; the same statistics for any other outcome."""
        return self.update(run_time) if succeeded else self

    def to_fields(self) -> dict[str, str]:
        """Redis hash fields; ``repr`` of a float round-trips exactly."""
        return {"n": str(self.n), "mean": repr(self.mean)}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str] | Mapping[bytes, bytes]) -> RuleStats:
        """The statistics stored by :meth:`to_fields` (str or bytes keys and values, as redis-py gives)."""
        text = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
        try:
            return cls(int(text["n"]), float(text["mean"]))
        except (KeyError, ValueError) as exc:
            raise ValidationError(f"bad stored rule statistics {text!r}: {exc}", field="ete") from None


def last_success(previous: float | None, run_time: float, *, succeeded: bool) -> float | None:
    """The key's last successful run time after this run: ``run_time`` if it succeeded, else unchanged."""
    return _check_time(run_time, "a run time") if succeeded else previous


def estimate(
    key_last: float | None,
    rule: RuleStats | None,
    hint: float | None,
    default: float,
) -> tuple[float, EteSource]:
    """The ETE in seconds and where it came from, by the order in the module docstring.

    A rule with no counted run is no information and is skipped.
    """
    if key_last is not None:
        return _check_time(key_last, "a last run time"), "key"
    if rule is not None and rule.n > 0:
        return rule.mean, "rule"
    if hint is not None:
        return _check_time(hint, "an ETE hint"), "hint"
    return _check_time(default, "the default ETE"), "default"
