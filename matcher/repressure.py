"""Re-pressure: when learnt run times move, re-score the waiting jobs they concern, off the hot path.

A job's score is ``ETA(request) - pressure(job) - priority`` (:mod:`matcher.submission`). Pressures
were computed at submission from the run-time estimates known then; as jobs complete, ``complete.lua``
learns each rule's mean and each key's last run time, and the estimates of the jobs still to run move.
This periodic task carries those moves into the scores, doing work in proportion to what changed,
never to the number of jobs stored:

1. read the done log from the stored cursor on (cursor hash field ``repressure``);
2. keep the rules of those completions whose learnt mean or hint factor moved by more than ``damping``,
   or whose spread crossed the ``spread`` threshold, since re-pressure last propagated them (kept in the
   cursor hash as ``repressure:rule:<rule>``, ``repressure:factor:<rule>`` and ``repressure:wide:<rule>``).
   Comparing with
   what was *propagated*, not with the previous completion, makes the task self-correcting: a completion
   it misses (read twice, crashed run, a pilot clock behind the cursor) is caught at the rule's next one,
   and slow drift adds up until it counts;
3. walk the unfinished jobs of those rules (``byrule:<rule>``, forgetting finished ones met there) and
   estimate each again (:func:`taskqueues.ete.estimate`: key, else the job's own hint ``h`` and the rule
   each by its worth; a job stored without a hint takes the rule's mean);
4. per request, :func:`taskqueues.dag.propagate_pressure` over *lazy* views of the job records (fetched
   on demand, a job's dependents or dependencies in one round trip, cached for the run): only ancestors
   whose pressure moves by more than ``damping`` are visited, and finished jobs are never visited;
5. a request's ETA is ``now +`` what its remaining work needs: at least the largest pressure among its
   ready and running jobs (a running job counts what is left of its own estimate). The jobs read in step
   4 bound it; only when that bound says the ETA moved by more than 1/16 of the remaining time is the
   request read whole, the exact value taken (the fan-in bound of :mod:`matcher.request_eta` over its unfinished
   jobs, as at submission: a join behind a fan waits for the fan's work on the cores), the ETA re-stored
   and every unfinished job of the request re-scored (the hysteresis keeps this rare: the one O(request)
   step, and it is the one the brief of the ETA asks for, since all of the request's scores move with
   it). The load part of the submission's ETA is not re-evaluated (:mod:`matcher.request_eta`), only corrected:
   the work re-estimated in step 3 moves the load of its request and of every request sent after it
   (:mod:`matcher.repressure_load`), which may re-store their ETAs and re-score them whole too;
6. write back with ``rescore.lua`` in batches: new pressure, estimate and score per job, task-queue
   members moved, heads indexes set to the real heads; then the request ETAs, the per-rule marks and
   the cursor (last, so a crash only makes the next run redo idempotent work).

Run it under :func:`taskqueues.store.lock.locked` (:func:`repressure_locked`) so two beats do not duplicate the
work; a concurrent run without the lock would write the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taskqueues import dag
from taskqueues.ete import DEFAULT_SPREAD, RuleStats, estimate
from taskqueues.store import RecordCache, RecordView, Rescored, Store, time_needed

from .repressure_load import shift_loads, work_moved
from .request_eta import ETA_FRACTION, eta_moved, fan_in_bound, live_cores

__all__ = ["CURSOR_FIELD", "LOCK_NAME", "RULE_MARK", "Report", "eta_moved", "repressure", "repressure_locked"]

CURSOR_FIELD = "repressure"
RULE_MARK = "repressure:rule:"
FACTOR_MARK = "repressure:factor:"
WIDE_MARK = "repressure:wide:"
LOCK_NAME = "repressure"
_FINAL = frozenset({"done", "failed", "cancelled", "dep-failed"})
_FRONTIER = frozenset({"waiting", "releasing", "matched", "running"})
_WRITE_CHUNK = 200

#: A request's record (its ETA, priority and job ids).
Record = dict[str, Any]


@dataclass
class Report:
    """What one run did; ``records_read`` counts job records fetched (the O(changed) figure)."""

    cursor_from: float | None = None
    cursor_to: float | None = None
    completions: int = 0
    rules_moved: list[str] = field(default_factory=list)
    reestimated: int = 0
    pressures_rewritten: int = 0
    jobs_written: int = 0
    members_moved: int = 0
    etas: dict[str, float] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)
    forgotten: int = 0
    records_read: int = 0


def _unfinished(rec: RecordView | None) -> bool:
    return rec is not None and rec.state not in _FINAL


class _View(Mapping[str, Any]):
    """Base of the lazy mappings: they answer for the jobs asked and iterate over those already read."""

    def __init__(self, records: RecordCache, request: str) -> None:
        self.records = records
        self.request = request

    def _rec(self, job: str) -> RecordView:
        rec = self.records.get(job)
        if rec is None or rec.request != self.request:
            raise KeyError(job)
        return rec

    def __iter__(self) -> Iterator[str]:
        return iter([j for j, r in self.records.cache.items() if r is not None and r.request == self.request])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Position(_View):
    """Ids of a request are consecutive and assigned in topological order: int(id) is a position."""

    def __getitem__(self, job: str) -> int:
        self._rec(job)
        return int(job)


class _Neighbours(_View):
    """Unfinished dependencies (``deps``) or dependents of a job, fetched together in one round trip.

    Finished jobs are left out: a finished dependency needs no pressure any more, and a finished (or
    cancelled) dependent no longer lengthens the path.
    """

    def __init__(self, records: RecordCache, request: str, dependents: bool) -> None:
        super().__init__(records, request)
        self.dependents = dependents

    def __getitem__(self, job: str) -> list[str]:
        rec = self._rec(job)
        ids = rec.dependents if self.dependents else rec.deps
        self.records.fetch(ids)
        return [d for d in ids if _unfinished(self.records.get(d))]


class _Overlay(_View, MutableMapping[str, float]):
    """A record field (the estimate or the pressure) with the run's new values laid over it."""

    def __init__(self, records: RecordCache, request: str, field: Callable[[RecordView], float]) -> None:
        super().__init__(records, request)
        self.field = field
        self.new: dict[str, float] = {}

    def stored(self, job: str) -> float:
        return self.field(self._rec(job))

    def __getitem__(self, job: str) -> float:
        return self.new[job] if job in self.new else self.stored(job)

    def __setitem__(self, job: str, value: float) -> None:
        self.new[job] = value

    def __delitem__(self, job: str) -> None:
        del self.new[job]


class _Request:
    """The lazy DAG of one request, as :func:`taskqueues.dag.propagate_pressure` wants it."""

    def __init__(self, records: RecordCache, request: str) -> None:
        self.records = records
        self.index = dag.DagIndex(
            deps=_Neighbours(records, request, False),
            dependents=_Neighbours(records, request, True),
            position=_Position(records, request),
        )
        self.ete = _Overlay(records, request, lambda r: r.ete)
        self.pressure = _Overlay(records, request, lambda r: r.pressure)
        self.written: set[str] = set()


def _remaining(rec: RecordView, pressure: float, now: float) -> float:
    """What a ready or running job still needs, to the request's targets."""
    if rec.state in ("matched", "running"):
        since = rec.since
        elapsed = max(0.0, now - since) if since is not None else 0.0
        return max(0.0, pressure - min(elapsed, rec.ete))
    return pressure


def repressure(
    store: Store,
    *,
    damping: float = dag.DAMPING,
    now: float | None = None,
    batch: int = 10_000,
    capacity: Callable[[], float] | None = None,
    spread: float = DEFAULT_SPREAD,
) -> Report:
    """One re-pressure run (see the module docstring); ``batch`` bounds the completions read per run.

    ``capacity`` gives the cores that run the work, for an ETA re-computed here (the live pilots' by
    default, as the Submitter's).
    """
    now = store.clock() if now is None else now
    records = store.views.cache()
    report = Report()

    raw_cursor = store.views.cursor(CURSOR_FIELD)
    report.cursor_from = float(raw_cursor) if raw_cursor is not None else None
    # Inclusive: a completion stamped with the cursor's very time but logged after the last run must not
    # be lost; re-reading the few at that instant is harmless (the rule marks make it a no-op).
    low = "-inf" if report.cursor_from is None else repr(report.cursor_from)
    entries = store.views.completions(low, batch)
    report.completions = len(entries)
    report.cursor_to = max((s for _, s in entries), default=report.cursor_from)
    if len(entries) == batch and report.cursor_to == report.cursor_from:
        # A whole batch at one instant: step past it (exclusive) rather than read it again forever.
        low = f"({report.cursor_from!r}"
        entries = store.views.completions(low, batch)
        report.completions = len(entries)
        report.cursor_to = max((s for _, s in entries), default=report.cursor_from)
    done = [m for m, _ in entries]
    records.fetch(done)
    rules = sorted({r.rule for r in (records.get(d) for d in done) if r and r.rule})

    marks: dict[str, str] = {}
    moved = _moved_rules(store, rules, damping, marks, spread)
    report.rules_moved = sorted(moved)

    changed = _reestimate(store, records, moved, report, spread)
    views: dict[str, _Request] = {}
    for request, new_ete in changed.items():
        view = views[request] = _Request(records, request)
        rewritten = dag.propagate_pressure(view.index, view.ete, view.pressure, new_ete, damping=damping)
        report.pressures_rewritten += len(rewritten)
        view.written = set(new_ete) | set(rewritten)

    request_recs = store.views.request_records([q for q in views if q])
    frontier: dict[str, list[tuple[str, RecordView]]] = {}
    for job, rec in records.cache.items():
        if rec is not None and rec.state in _FRONTIER:
            frontier.setdefault(rec.request, []).append((job, rec))
    cores = capacity or (lambda: live_cores(store))
    for request, view in views.items():
        request_rec = request_recs.get(request)
        if request_rec is not None:
            _check_eta(records, request, request_rec, view, frontier.get(request, []), now, cores, report)
    moved_work = work_moved(records, changed)
    shifted = shift_loads(
        store,
        moved_work,
        request_recs,
        report.etas,
        now,
        cores() if moved_work else 1.0,
        lambda q, rec: _shape_date(records, views.get(q) or _Request(records, q), rec, now, cores()),
    )
    report.loads, report.etas = shifted.loads, shifted.etas
    for request, request_rec in shifted.records.items():
        live = _live_ids(records, request_rec)
        if not live:  # a finished request's ETA schedules nothing
            del report.etas[request]
            continue
        request_recs.setdefault(request, request_rec)
        views.setdefault(request, _Request(records, request)).written.update(live)

    updates = [
        _update(
            records.cache[job], view, request_recs.get(request), report.etas.get(request), job, store.ete_safety_factor
        )
        for request, view in views.items()
        for job in sorted(view.written, key=int)
        if _unfinished(records.cache.get(job))
    ]
    progress = {CURSOR_FIELD: repr(report.cursor_to)} if report.cursor_to is not None else {}
    _write(store, records, updates, report, progress, marks)
    report.records_read = records.read
    return report


def repressure_locked(store: Store, *, ttl: float = 300.0, **kwargs: Any) -> Report | None:
    """:func:`repressure` under the periodic-task lock; None when another run holds it (skip this beat)."""
    with store.control.locked(LOCK_NAME, ttl) as got:
        return repressure(store, **kwargs) if got else None


def _mark(stats: RuleStats, spread: float) -> tuple[float, float, bool]:
    """What re-pressure propagates of a rule: its mean, its hint factor, and whether it is too wide to
    override hints (spread unknown counts as not wide, as :func:`taskqueues.ete.estimate` takes it)."""
    cv = stats.cv
    return stats.mean, stats.hint_factor, cv is not None and cv > spread


def _moved(before: float, after: float, damping: float) -> bool:
    return abs(after - before) > damping * before


def _moved_rules(
    store: Store, rules: Sequence[str], damping: float, marks: dict[str, str], spread: float = DEFAULT_SPREAD
) -> dict[str, RuleStats]:
    """Rules whose learnt mean or hint factor moved by more than ``damping``, or whose spread crossed
    ``spread``, since last propagated; records the new marks."""
    if not rules:
        return {}
    _, stats = store.ete_stats([], rules)
    fields = [m + r for r in rules for m in (RULE_MARK, FACTOR_MARK, WIDE_MARK)]
    raws = store.views.cursors(fields)
    moved: dict[str, RuleStats] = {}
    for i, rule in enumerate(rules):
        raw, raw_factor, raw_wide = raws[3 * i : 3 * i + 3]
        current = stats.get(rule)
        if current is None or current.n == 0:
            continue
        mean, factor, wide = _mark(current, spread)
        # Marks stored before hints were weighed have no factor (1) and no wide flag (not wide).
        before_factor = float(raw_factor) if raw_factor is not None else 1.0
        before_wide = raw_wide is not None and float(raw_wide) == 1
        if (
            raw is None
            or _moved(float(raw), mean, damping)
            or _moved(before_factor, factor, damping)
            or before_wide != wide
        ):
            moved[rule] = current
            marks.update(
                {RULE_MARK + rule: repr(mean), FACTOR_MARK + rule: repr(factor), WIDE_MARK + rule: str(int(wide))}
            )
    return moved


def _reestimate(
    store: Store, records: RecordCache, moved: Mapping[str, RuleStats], report: Report, spread: float = DEFAULT_SPREAD
) -> dict[str, dict[str, float]]:
    """New estimates of the unfinished jobs of the moved rules, by request (finished ones are forgotten)."""
    members: dict[str, list[str]] = {}
    for rule in moved:
        members[rule] = store.views.rule_members(rule)
        records.fetch(members[rule])
    finished = {rule: [j for j in ids if not _unfinished(records.get(j))] for rule, ids in members.items()}
    report.forgotten += sum(len(ids) for ids in finished.values())
    store.views.forget_rule_members(finished)
    live = [j for ids in members.values() for j in ids if _unfinished(records.get(j))]
    job_keys = {j: rec.key for j in live if (rec := records.cache[j]) is not None and rec.key}
    last, _ = store.ete_stats(job_keys.values(), [])
    changed: dict[str, dict[str, float]] = {}
    for job in live:
        rec = records.cache[job]
        assert rec is not None
        old = rec.ete
        key_last = last.get(job_keys[job]) if job in job_keys else None
        new, _ = estimate(key_last, moved.get(rec.rule), rec.hint, old, spread=spread)
        if new != old:
            changed.setdefault(rec.request, {})[job] = new
            report.reestimated += 1
    return changed


def _check_eta(
    records: RecordCache,
    request: str,
    rec: Record,
    view: _Request,
    known: Sequence[tuple[str, RecordView]],
    now: float,
    cores: Callable[[], float],
    report: Report,
) -> None:
    """Re-store the ETA of a touched request when it moved by more than 1/16 of its remaining time.

    ``known`` are its ready and running jobs read so far: they bound the ETA; the request is read whole
    only when that bound says the ETA moved. The bound is the critical path of those jobs; the exact
    value adds what the request's shape needs on ``cores()`` (never less), so an ETA held by a fan
    (higher than any critical path) only moves when the critical path catches up with it.
    """
    eta = float(rec["eta"])
    if not known:
        return
    old_need = max(_remaining(r, view.pressure.stored(j), now) for j, r in known)
    new_need = max(_remaining(r, view.pressure[j], now) for j, r in known)
    later = now + new_need > eta and eta_moved(eta, now + new_need, now)
    # An earlier ETA can only come from the jobs read if they were what held it up.
    held = now + old_need >= eta - max(eta - now, 0.0) * ETA_FRACTION
    earlier = held and now + new_need < eta and eta_moved(eta, now + new_need, now)
    if not (later or earlier):
        return
    exact = _shape_date(records, view, rec, now, cores())
    if exact is not None and eta_moved(eta, exact, now):
        report.etas[request] = round(exact, 3)
        view.written.update(_live_ids(records, rec))


def _live_ids(records: RecordCache, rec: Record) -> list[str]:
    """The unfinished jobs of a request, read whole (its ids are consecutive)."""
    ids = [str(i) for i in range(int(rec["first"]), int(rec["last"]) + 1)]
    records.fetch(ids)
    return [j for j in ids if _unfinished(records.cache.get(j))]


def _shape_date(records: RecordCache, view: _Request, rec: Record, now: float, cores: float) -> float | None:
    """The date a request's own shape needs from now (critical path of its ready and running jobs, and the
    fan-in bound of its unfinished ones), read whole; None when none of its jobs is ready or running."""
    live = _live_ids(records, rec)
    frontier = [(j, r) for j in live if (r := records.cache.get(j)) is not None and r.state in _FRONTIER]
    if not frontier:
        return None
    return now + max(
        max(_remaining(r, view.pressure[j], now) for j, r in frontier), _shape_need(records, view, live, now, cores)
    )


def _shape_need(records: RecordCache, view: _Request, live: Sequence[str], now: float, cores: float) -> float:
    """:func:`matcher.request_eta.fan_in_bound` over the unfinished jobs (ids ascending: a topological order).

    A running job counts what is left of its own estimate, and its dependents wait only for that.
    """
    alive = set(live)
    deps: dict[str, list[str]] = {}
    ete: dict[str, float] = {}
    pressure: dict[str, float] = {}
    work: dict[str, float] = {}
    for job in live:
        rec = records.cache[job]
        assert rec is not None
        pressure[job] = _remaining(rec, view.pressure[job], now)
        ete[job] = max(0.0, view.ete[job] - (view.pressure[job] - pressure[job]))
        work[job] = ete[job] * rec.job().cpu
        deps[job] = [d for d in rec.deps if d in alive]
    return fan_in_bound(live, deps, ete, pressure, work, cores)


def _update(
    rec: RecordView | None,
    view: _Request,
    request: Record | None,
    new_eta: float | None,
    job: str,
    ete_safety_factor: float,
) -> Rescored:
    """The new values of one job: its pressure, estimate, member time and score.

    The member's time is :func:`taskqueues.store.records.time_needed`: a job's ``wall`` stays; without one, the
    new estimate times the safety factor."""
    assert rec is not None
    pressure, ete = view.pressure[job], view.ete[job]
    if request is not None:
        eta = new_eta if new_eta is not None else float(request["eta"])
        own = rec.priority
        score = eta - pressure - (own if own is not None else float(request.get("priority", 0.0)))
    else:  # a job stored without a request record: keep the date its old score implied
        score = rec.score + view.pressure.stored(job) - pressure
    need = time_needed(rec.requirements().get("wall"), ete, ete_safety_factor)
    return Rescored(job, pressure, ete, need, score)


def _write(
    store: Store,
    records: RecordCache,
    updates: Sequence[Rescored],
    report: Report,
    progress: Mapping[str, str],
    marks: Mapping[str, str],
) -> None:
    """rescore.lua in batches; the request ETAs, the rule marks and the cursor go with the last one."""
    chunks = [list(updates[i : i + _WRITE_CHUNK]) for i in range(0, len(updates), _WRITE_CHUNK)] or [[]]
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        if not chunk and not report.etas and not report.loads and not progress and not marks:
            continue
        waiting = [r.task_queue for u in chunk if (r := records.cache.get(u.job)) and r.state == "waiting"]
        written, moved = store.rescore(
            chunk,
            waiting_tqs=waiting,
            etas=report.etas if last else None,
            loads=report.loads if last else None,
            progress=progress if last else None,
            marks=marks if last else None,
        )
        report.jobs_written += written
        report.members_moved += moved
