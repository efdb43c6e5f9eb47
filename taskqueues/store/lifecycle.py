"""After submission: hold and release, resubmit, update a waiting job, and each job's events (issue 28).

Every operation is one atomic Lua call (``hold.lua``, ``resubmit.lua``, ``update.lua``) on a batch of at most
:data:`BATCH` jobs: a kill -9 or a server restart between two batches leaves each batch done or not, and
running the command again does the rest (holding a held job, or releasing a waiting one, changes nothing).
The events are written by the scripts that change a job's state (``_lib.lua``'s ``save``); this module
reads them back, adding the two that are read from the record (its submission, and a match not yet started).

Reached from the store as :attr:`taskqueues.store.Store.lifecycle`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ..errors import JobRefused, NotFound, StoreError
from .fairshare import job_account
from .guard import guarded
from .keys import account_tq
from .part import Scripted
from .records import Job, JobState, member_tail, stored_requirements, time_needed
from .records import text as _text

#: Jobs per Lua call (each call is atomic; a request's jobs go in several).
BATCH = 500


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


class _Store(Scripted, Protocol):
    """What of the facade (:class:`taskqueues.store.Store`, which builds this object) the operations use: what
    every room that runs scripts uses (:class:`~taskqueues.store.part.Scripted`), and these."""

    ete_safety_factor: float
    _base: str

    def _tq_of(self, ids: Sequence[Any]) -> list[str]: ...

    def job(self, job: str) -> Job: ...

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

    @guarded("updating a job")
    def update(
        self, job: str, by: str, what: str, *, priority: float | None = None, placed: Placed | None = None
    ) -> JobState:
        """Give a waiting or held job its own ``priority`` (its score moves by the difference from the one it
        had: its own, else its request's) and/or the task queue, member and requirements of ``placed``, in one
        step (``update.lua``; ``what`` is what its event says); its state after. Raises NotFound, or
        :class:`JobRefused` for a job in another state (nothing changed)."""
        k, store = self.keys, self.store
        current = store.job(job)
        request = store.request(current.request) if current.request else {}
        change: dict[str, Any] = {}
        if priority is not None:
            change |= {"py": priority, "py0": float(request.get("priority", 0.0))}
        extra = [k.work, *store.floors, *self._tq_keys([job])]
        if placed is not None:
            group, owner = job_account(current.tq_id, request)
            need = time_needed(placed.wall, current.ete, store.ete_safety_factor)
            exact = json.dumps(dict(placed.values), sort_keys=True, separators=(",", ":"))
            change |= {
                "t": account_tq(placed.tq_id, group, owner, current.rule),
                "def": placed.tq_def,
                "queues": list(placed.queues),
                "m_tail": member_tail(placed.cpu, placed.mem, placed.tmp, need),
                **stored_requirements(exact, placed.cpu, placed.mem),
            }
            extra += store.pool_keys([change["t"]]) + [k.qheads(q) for q in placed.queues]
        reply = store.call_script(
            "update",
            [k.jobs, k.tqdefs, k.tqempty, k.poolstamp, k.releasing],
            [store._base, store.clock(), by, job, what, json.dumps(change)],
            extra,
        )
        outcome = _text(reply[0])
        if outcome == "unknown":
            raise NotFound(f"no job {job!r}")
        if outcome == "refused":
            raise JobRefused(f"job {job} is {_text(reply[1])}: only a waiting or held job is updated (nothing changed)")
        if outcome != "ok":
            raise StoreError(f"update of job {job} answered {outcome!r}")
        return JobState(_text(reply[1]))

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


__all__ = ["BATCH", "JobEvent", "Lifecycle", "Placed"]
