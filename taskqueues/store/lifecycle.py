"""After submission: hold and release, resubmit, update a waiting job, and each job's events (issue 28).

Every operation is one atomic Lua call (``hold.lua``, ``resubmit.lua``) on a batch of at most :data:`BATCH`
jobs: a kill -9 or a server restart between two batches leaves each batch done or not, and running the command
again does the rest (holding a held job, or releasing a waiting one, changes nothing). An update is one call for
all its jobs (``update.lua``, at most :data:`MAX_UPDATE`): every job is checked there before any changes.
The events are written by the scripts that change a job's state (``_lib.lua``'s ``save``); this module
reads them back, adding the two that are read from the record (its submission, and a match not yet started).

Reached from the store as :attr:`taskqueues.store.Store.lifecycle`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ..errors import JobRefused, NotFound, StoreError, ValidationError
from .fairshare import job_account
from .guard import guarded
from .keys import account_tq
from .part import Scripted
from .records import JobState, member_tail, stored_requirements, time_needed
from .records import text as _text

#: Jobs per Lua call (each call is atomic; a request's jobs go in several).
BATCH = 500
#: Jobs of one update, which is one Lua call (all or none) that holds the server while it runs: 10,000 jobs took
#: 0.3-0.5 s of the server's time on a loaded 2-core host, 20,000 took 1 s (update.lua itself takes MAX_BATCH).
MAX_UPDATE = 10_000


@dataclass(frozen=True)
class JobEvent:
    """One change of a job's state: when, from which state to which, who or which part made it, and why;
    the attempt it concerns, the pilot, the exit code where they apply."""

    time: float
    source: str | None
    state: str
    by: str
    reason: str | None = None
    attempt: int | None = None
    pilot: str | None = None
    exit_code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, line: str) -> JobEvent | None:
        """One stored line (``{"t", "f", "s", "by", "why", "a", "p", "x"}``); None if it cannot be read."""
        try:
            e = json.loads(line)
            return cls(
                float(e["t"]),
                e.get("f"),
                str(e["s"]),
                str(e.get("by", "?")),
                e.get("why"),
                int(e["a"]) if e.get("a") is not None else None,
                e.get("p"),
                int(e["x"]) if isinstance(e.get("x"), int | float) else None,
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Placed:
    """Where an update puts a job (``matcher.submission.place`` computed it): its requirement class's task queue
    (the store adds the job's account, as at submission), canonical definition and eligible queues, and its
    exact requirements (``values``, with the consumables ``cpu``, ``mem``, ``tmp`` and ``wall`` they make)."""

    tq_id: str
    tq_def: str
    queues: tuple[str, ...]
    values: Mapping[str, Any]
    cpu: int
    mem: int
    tmp: int
    wall: int | None


@dataclass(frozen=True)
class JobUpdate:
    """One job's part of an update (:meth:`Lifecycle.update`): its id, what changes as its event says, and its
    new ``priority`` and/or placement (``None``: unchanged)."""

    job: str
    what: str
    priority: float | None = None
    placed: Placed | None = None


class _Store(Scripted, Protocol):
    """What of the facade (:class:`taskqueues.store.Store`, which builds this object) the operations use: what
    every room that runs scripts uses (:class:`~taskqueues.store.part.Scripted`), and these."""

    ete_safety_factor: float
    _base: str

    def _tq_of(self, ids: Sequence[Any]) -> list[str]: ...

    def request(self, request: str) -> dict[str, Any]: ...


class Lifecycle:
    """Hold, release, resubmit, update and events of one store's jobs."""

    def __init__(self, store: _Store) -> None:
        self.store = store
        self.keys = store.keys
        self.where = store.where

    def _batches(self, ids: Sequence[str]) -> list[list[str]]:
        unique = list(dict.fromkeys(ids))
        return [unique[i : i + BATCH] for i in range(0, len(unique), BATCH)]

    def _tq_keys(self, ids: Sequence[str]) -> list[str]:
        """The task queue, pool and heads-index keys of these jobs' task queues (declared up front)."""
        return self.store.pool_keys(self.store._tq_of(ids))

    @guarded("holding or releasing jobs")
    def hold(self, ids: Sequence[str], by: str, reason: str = "", *, release: bool = False) -> dict[str, str]:
        """Hold (or, with ``release``, release) these jobs; each one's outcome: ``held``, ``hold-pending``
        (blocked or releasing: held when it would wait), ``released``, ``unknown``, or the state that refuses
        it (``running``, ``done``...; ``waiting`` for a release of a job not held)."""
        k, store = self.keys, self.store
        out: dict[str, str] = {}
        for batch in self._batches(ids):
            reply = store.call_script(
                "hold",
                [k.jobs, k.delayed, k.tqempty, k.releasing],
                [store._base, store.clock(), "release" if release else "hold", by, reason, *batch],
                [k.work, k.parked, *store.floors, *self._tq_keys(batch)],
            )
            out.update(zip(batch, (_text(x) for x in reply[1:]), strict=True))
        return out

    @guarded("resubmitting jobs")
    def resubmit(self, ids: Sequence[str], by: str, reason: str = "") -> list[str]:
        """Run these ended jobs again (with their dep-failed dependents); the ids that came back. Raises
        :class:`JobRefused` naming the first job that cannot (nothing of its batch changed)."""
        k, store = self.keys, self.store
        back: list[str] = []
        for batch in self._batches(ids):
            reply = store.call_script(
                "resubmit",
                [k.jobs, k.tqempty, k.releasing, k.kills],
                [store._base, store.clock(), by, reason, *batch],
                [k.work, *store.floors, *self._tq_keys(batch), k.requests, k.notifywatch, k.notify, k.notifyq],
            )
            if _text(reply[0]) == "refused":
                done = f" ({len(back)} jobs of earlier batches came back)" if back else ""
                raise JobRefused(_text(reply[2]) + done)
            back += [_text(x) for x in reply[1:]]
        return back

    @guarded("updating jobs")
    def update(self, changes: Sequence[JobUpdate], by: str) -> list[JobState]:
        """Give waiting or held jobs their own ``priority`` (a score moves by the difference from the one it
        had: its own, else its request's) and/or the task queue, member and requirements of ``placed``, all in
        one atomic step (``update.lua``; ``what`` is what each one's event says); each one's state after, in
        order. Raises NotFound naming the first unknown job, or :class:`JobRefused` naming the first job in
        another state (matched since the caller looked at it...): then no job changed."""
        k, store = self.keys, self.store
        ids = [c.job for c in changes]
        if not ids:
            raise ValidationError("an update names one job or more")
        twice = next((j for j, n in Counter(ids).items() if n > 1), None)
        if twice is not None:
            raise ValidationError(f"an update names job {twice} more than once")
        if len(ids) > MAX_UPDATE:
            raise ValidationError(f"an update names {len(ids)} jobs: at most {MAX_UPDATE} change in one step")
        current = {j.id: j for j in store.jobs(ids)}
        unknown = next((j for j in ids if j not in current), None)
        if unknown is not None:
            raise NotFound(f"no job {unknown!r}")
        requests = {r: store.request(r) for r in dict.fromkeys(j.request for j in current.values() if j.request)}
        args: list[Any] = [store._base, store.clock(), by]
        extra = [k.work, *store.floors, *self._tq_keys(ids)]
        new_tqs: list[str] = []
        for c in changes:
            job = current[c.job]
            request = requests.get(job.request, {}) if job.request else {}
            change: dict[str, Any] = {}
            if c.priority is not None:
                change |= {"py": c.priority, "py0": float(request.get("priority", 0.0))}
            if c.placed is not None:
                placed = c.placed
                group, owner = job_account(job.tq_id, request)
                need = time_needed(placed.wall, job.ete, store.ete_safety_factor)
                exact = json.dumps(dict(placed.values), sort_keys=True, separators=(",", ":"))
                change |= {
                    "t": account_tq(placed.tq_id, group, owner, job.rule),
                    "def": placed.tq_def,
                    "queues": list(placed.queues),
                    "m_tail": member_tail(placed.cpu, placed.mem, placed.tmp, need),
                    **stored_requirements(exact, placed.cpu, placed.mem),
                }
                new_tqs.append(change["t"])
                extra += [k.qheads(q) for q in placed.queues]
            args += [c.job, c.what, json.dumps(change)]
        extra += store.pool_keys(new_tqs)
        reply = store.call_script("update", [k.jobs, k.tqdefs, k.tqempty, k.poolstamp, k.releasing], args, extra)
        outcome = _text(reply[0])
        if outcome == "unknown":
            raise NotFound(f"no job {_text(reply[1])!r}")
        if outcome == "refused":
            job_id, state = _text(reply[1]), _text(reply[2])
            raise JobRefused(f"job {job_id} is {state}: only a waiting or held job is updated (nothing changed)")
        if outcome != "ok" or len(reply) != len(ids) + 1:
            raise StoreError(f"update of jobs {' '.join(ids)} answered {outcome!r}")
        return [JobState(_text(s)) for s in reply[1:]]

    @guarded("reading a job's events")
    def events(self, job: str) -> list[JobEvent]:
        """Every recorded change of ``job``'s state, oldest first, with its submission (and its match while
        it has not started) read from the record. Raises NotFound for an unknown job."""
        pipe = self.store.client.pipeline(transaction=False)
        pipe.hget(self.keys.jobs, job)
        pipe.hget(self.keys.events, job)
        raw, text = pipe.execute()
        if raw is None:
            raise NotFound(f"no job {job!r}")
        rec = json.loads(raw)
        events = [e for line in _text(text or "").splitlines() if (e := JobEvent.parse(line)) is not None]
        state = rec.get("s")
        leased = state in (JobState.MATCHED, JobState.RUNNING)
        first = events[0].source if events else ("waiting" if leased else state)
        shown = [JobEvent(float(rec.get("ts", 0)), None, str(first), "submit"), *events]
        attempt, pilot = int(rec.get("a", 0)), rec.get("pl")
        last = events[-1] if events else None
        ended = (
            JobState(state).final
            and rec.get("tm") is not None
            and pilot is not None
            and not (last is not None and last.state == state and last.attempt == attempt)
        )
        if (leased or ended) and rec.get("tm") is not None:
            # a lease under way, or ended by its pilot's report: the record tells it (_lib.lua's state_event)
            tm, st = float(rec["tm"]), rec.get("st")
            shown.append(JobEvent(tm, "waiting", "matched", "match", None, attempt, pilot))
            ran = state == JobState.RUNNING or (ended and st is not None and float(st) >= tm)
            if ran:
                shown.append(JobEvent(float(st or tm), "matched", "running", f"pilot {pilot}", None, attempt, pilot))
            if ended:
                x = rec.get("x")
                shown.append(
                    JobEvent(
                        float(rec.get("te", 0)),
                        "running" if ran else "matched",
                        str(state),
                        f"pilot {pilot}",
                        rec.get("why"),
                        attempt,
                        pilot,
                        int(x) if isinstance(x, int | float) else None,
                    )
                )
        return shown


__all__ = ["BATCH", "MAX_UPDATE", "JobEvent", "JobUpdate", "Lifecycle", "Placed"]
