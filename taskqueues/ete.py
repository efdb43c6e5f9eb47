"""Execution-time estimates (ETE): how long a job will run, from what the user said and what succeeded.

The pressure of a job (:mod:`taskqueues.dag`) needs the ETE of every job still to run. Three sources may
know something, each worth what its past errors say it is worth:

1. ``key``: the last *successful* run time of the same job, named across runs by its key. A job
   re-run with the same inputs usually takes what it took last time: the best guess there is, and it
   always wins (as in open-lmake).
2. ``rule``: the running statistics of the successful runs of its rule: mean and variance of the run
   times, and of the log of ``run time / the job's own hint`` for the runs that had a hint (how wrong
   this rule's hints are, and how consistently). The first 100 runs weigh the same (exact cumulative
   mean and variance, Welford's update); from the 101st on, exponentially weighted with
   ``alpha = 1/100``, so the statistics follow a rule whose inputs grow over months.
3. ``hint``: what the user said (the job's ``ete``, else its ``wall`` requirement, an upper bound that
   is still better than nothing), corrected by the rule's learnt hint factor (``exp(mean log ratio)``).
4. ``default``: the configured default.

How they combine (:func:`estimate`): a key's last success wins. A job without a hint takes its rule's
mean, as open-lmake does (the seed's order: last success, then the rule's moving average). A job with a
hint whose rule has run at least twice takes the inverse-variance blend of the rule's mean (relative
variance: its coefficient of variation squared) and its corrected hint (relative variance: the variance
of the rule's log hint ratios), except that a rule whose run times spread widely (coefficient of
variation over ``spread``, a setting) has no say over a per-job hint: its mean would erase the very
differences between its jobs that the hints carry. Until a rule has run twice its spread is unknown:
a hinted job then takes its own hint corrected by the one run's ratio (one run says as much about how
wrong the hints are as about the rule's mean, and the hint keeps what tells the jobs apart: a single run
time given to every job would erase it), and a job without a hint, or a rule whose run had none, the
rule's mean, as in the seed.

Failed, cancelled and killed runs never count: a job that crashed after 2 s says nothing about how
long it takes to succeed. These are pure values and functions; ``complete.lua`` keeps the same
statistics in Redis (:meth:`RuleStats.to_text` / :meth:`RuleStats.from_text` is its format).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from taskqueues.errors import ValidationError

__all__ = [
    "CUMULATIVE_RUNS",
    "DEFAULT_SPREAD",
    "EMA_ALPHA",
    "MIN_VARIANCE",
    "EteSource",
    "RuleStats",
    "estimate",
    "last_success",
]

CUMULATIVE_RUNS = 100
EMA_ALPHA = 1 / CUMULATIVE_RUNS
#: A rule whose run times have a coefficient of variation over this has no say over a job's own hint.
DEFAULT_SPREAD = 0.5
#: The smallest relative variance a source is credited with (hints that were exact so far are not
#: infinitely better than a rule: a 1 % error is the floor).
MIN_VARIANCE = 1e-4
#: Runs a rule needs before its spread is known.
SPREAD_RUNS = 2

EteSource: TypeAlias = Literal["key", "rule", "hint", "default"]


def _check_time(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{what} must be a number of seconds, not {type(value).__name__}", field="ete")
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"{what} must be a finite number of seconds >= 0, got {value!r}", field="ete")
    return float(value)


def _check_count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{what} must be an integer >= 0, got {value!r}", field="ete")
    return value


def _check_finite(value: float, what: str, low: float = -math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low:
        raise ValidationError(f"{what} must be a finite number >= {low}, got {value!r}", field="ete")
    return float(value)


def _step(count: int, mean: float, var: float, value: float) -> tuple[float, float]:
    """Mean and (population) variance after one more value: Welford's update while ``count`` (the new
    count) is at most :data:`CUMULATIVE_RUNS`, the exponentially weighted one after (the same formula
    with weight ``alpha``)."""
    weight = 1 / count if count <= CUMULATIVE_RUNS else EMA_ALPHA
    delta = value - mean
    return mean + delta * weight, (1 - weight) * (var + weight * delta * delta)


@dataclass(frozen=True)
class RuleStats:
    """How long the successful runs of one rule took, and how far from their hints.

    ``n`` runs counted, ``mean`` seconds, ``var`` their variance (s²); ``hn`` of them had a hint,
    ``hlog`` is the mean of ``log(run time / hint)`` over those and ``hvar`` its variance.
    """

    n: int = 0
    mean: float = 0.0
    var: float = 0.0
    hn: int = 0
    hlog: float = 0.0
    hvar: float = 0.0

    def __post_init__(self) -> None:
        _check_count(self.n, "a rule's run count")
        _check_count(self.hn, "a rule's hinted run count")
        _check_time(self.mean, "a rule's mean run time")
        _check_finite(self.var, "a rule's run-time variance", 0.0)
        _check_finite(self.hlog, "a rule's mean log hint ratio")
        _check_finite(self.hvar, "a rule's log hint ratio variance", 0.0)

    def update(self, run_time: float, hint: float | None = None) -> RuleStats:
        """The statistics after one more successful run of ``run_time`` seconds, whose job's hint was
        ``hint`` (a hint or a run time of 0 s says nothing about the ratio and is left out of it)."""
        run_time = _check_time(run_time, "a run time")
        mean, var = _step(self.n + 1, self.mean, self.var, run_time)
        hn, hlog, hvar = self.hn, self.hlog, self.hvar
        if hint is not None and _check_time(hint, "an ETE hint") > 0 and run_time > 0:
            hn += 1
            hlog, hvar = _step(hn, hlog, hvar, math.log(run_time / hint))
        return RuleStats(self.n + 1, mean, var, hn, hlog, hvar)

    def record(self, run_time: float, *, succeeded: bool, hint: float | None = None) -> RuleStats:
        """:meth:`update` for a successful run; the same statistics for any other outcome."""
        return self.update(run_time, hint) if succeeded else self

    @property
    def cv(self) -> float | None:
        """Coefficient of variation of the run times (None until :data:`SPREAD_RUNS` runs; inf for a
        mean of 0 s with some spread)."""
        if self.n < SPREAD_RUNS:
            return None
        if self.mean <= 0:
            return 0.0 if self.var <= 0 else math.inf
        return math.sqrt(self.var) / self.mean

    @property
    def hint_factor(self) -> float:
        """What the rule's hints are multiplied by to be right on average (1 with no hinted run)."""
        return math.exp(self.hlog) if self.hn else 1.0

    def to_text(self) -> str:
        """The stored form (complete.lua writes the same): six numbers, floats as ``%.17g`` round-trips."""
        return " ".join((str(self.n), repr(self.mean), repr(self.var), str(self.hn), repr(self.hlog), repr(self.hvar)))

    @classmethod
    def from_text(cls, text: str | bytes) -> RuleStats:
        """The statistics stored by complete.lua: ``n mean`` (as stored before the spread was learnt) or
        the six numbers of :meth:`to_text`."""
        raw = text.decode() if isinstance(text, bytes) else text
        parts = raw.split()
        try:
            if len(parts) not in (2, 6):
                raise ValueError(f"{len(parts)} numbers, not 2 or 6")
            n, mean = int(parts[0]), float(parts[1])
            if len(parts) == 2:
                return cls(n, mean)
            return cls(n, mean, float(parts[2]), int(parts[3]), float(parts[4]), float(parts[5]))
        except ValueError as exc:
            raise ValidationError(f"bad stored rule statistics {raw!r}: {exc}", field="ete") from None

    def to_fields(self) -> dict[str, str]:
        """Redis hash fields; ``repr`` of a float round-trips exactly."""
        return {
            "n": str(self.n),
            "mean": repr(self.mean),
            "var": repr(self.var),
            "hn": str(self.hn),
            "hlog": repr(self.hlog),
            "hvar": repr(self.hvar),
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, str] | Mapping[bytes, bytes]) -> RuleStats:
        """The statistics stored by :meth:`to_fields` (str or bytes keys and values, as redis-py gives);
        the spread fields may be missing (statistics stored before they were learnt)."""
        text = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
        try:
            return cls(
                int(text["n"]),
                float(text["mean"]),
                float(text.get("var", 0.0)),
                int(text.get("hn", 0)),
                float(text.get("hlog", 0.0)),
                float(text.get("hvar", 0.0)),
            )
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
    *,
    spread: float = DEFAULT_SPREAD,
) -> tuple[float, EteSource]:
    """The ETE in seconds and the source that weighed most in it, as the module docstring combines them.

    A rule with no counted run is no information and is skipped.
    """
    if key_last is not None:
        return _check_time(key_last, "a last run time"), "key"
    if hint is not None:
        hint = _check_time(hint, "an ETE hint")
    if rule is None or rule.n == 0:
        return (hint, "hint") if hint is not None else (_check_time(default, "the default ETE"), "default")
    cv = rule.cv
    if hint is None:
        return rule.mean, "rule"
    corrected = hint * rule.hint_factor
    if cv is None:  # one run: its hint ratio corrects this job's hint, which keeps what tells the jobs apart
        return (corrected, "hint") if rule.hn else (rule.mean, "rule")
    if cv > _check_finite(spread, "the ETE spread threshold", 0.0):
        return corrected, "hint"
    if rule.hn < SPREAD_RUNS:  # the hints' worth is not known yet: the rule's mean, as in the seed
        return rule.mean, "rule"
    rule_weight = 1 / max(cv * cv, MIN_VARIANCE)
    hint_weight = 1 / max(rule.hvar, MIN_VARIANCE)
    blended = (rule_weight * rule.mean + hint_weight * corrected) / (rule_weight + hint_weight)
    return blended, ("rule" if rule_weight >= hint_weight else "hint")
