"""``pilotfish jobs``: one line per job, like ``squeue`` or ``condor_q``, read page by page from the indexes.

Never every job: each state is read from the index that already orders it, a page (:data:`PAGE`) at a time,
until the listing has ``limit`` rows, and only the records of the ids a page names are loaded:

* matched and running jobs: the leases zset (as many as the pilots run), by start time;
* waiting jobs: the task queues (score = urgency), merged most urgent first, then those in back-off
  (``delayed``); a ``--request`` filter is applied to the members' ids, without loading a record, or, when
  the request is short next to the task queues, its own id range is read and sorted;
* releasing jobs: the releasing zset, oldest first;
* blocked jobs: the ``blocked`` zset (``_lib.lua`` keeps it), in submission order;
* held jobs: the ``held`` zset (``_lib.lua`` keeps it too), in the order they were held;
* finished jobs: the ``ended`` zset, most recent end first; with ``--request``, the
  request's own id range when that is shorter; with ``--owner`` or ``--group``, that account's range of the
  history index (``store.history``).

A view for people (and :class:`matcher.client.Client`), not for the hot path: a page may see a job move
between two reads; it is shown once, in the state its record has.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from taskqueues.errors import NotFound, ValidationError
from taskqueues.store import Job, JobState, Store, job_account

__all__ = [
    "ACTIVE",
    "FINISHED",
    "Accounts",
    "JobFilter",
    "JobRow",
    "Listing",
    "list_jobs",
    "parse_states",
    "render_jobs",
]

#: Ids read from an index per round trip.
PAGE = 500

ACTIVE = frozenset(
    {JobState.MATCHED, JobState.RUNNING, JobState.WAITING, JobState.RELEASING, JobState.BLOCKED, JobState.HELD}
)
FINISHED = frozenset(s for s in JobState if s.final)
#: Words ``--state`` takes besides the states themselves.
STATE_GROUPS = {"active": ACTIVE, "finished": FINISHED, "all": frozenset(JobState)}
_LEASED = frozenset({JobState.MATCHED, JobState.RUNNING})
_EMPTY_SCORE = 1e18  # _lib.lua's EMPTY: heads indexes score empty task queues (and their sentinel) from here


def parse_states(values: Iterable[str]) -> frozenset[JobState]:
    """States from ``--state`` values (each a state, ``active``, ``finished`` or ``all``, or a comma-separated
    list of them); none given means ``active``. An unknown word is a ValidationError naming it."""
    out: set[JobState] = set()
    given = [word.strip() for value in values for word in value.split(",") if word.strip()]
    for word in given:
        if word in STATE_GROUPS:
            out |= STATE_GROUPS[word]
            continue
        try:
            out.add(JobState(word))
        except ValueError:
            known = ", ".join([*(s.value for s in JobState), *STATE_GROUPS])
            raise ValidationError(f"--state {word!r} is not a job state: use one of {known}") from None
    return frozenset(out) if given else ACTIVE


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to list: ``states`` (default the unfinished ones) and optionally one request (id), one
    catalog queue (jobs whose task queue it may run, or that ran on one of its pilots), one task queue, one
    pilot, one owner, one group; at most ``limit`` rows."""

    states: frozenset[JobState] = ACTIVE
    request: str | None = None
    queue: str | None = None
    task_queue: str | None = None
    pilot: str | None = None
    limit: int = 100
    owner: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValidationError(f"--limit must be at least 1, got {self.limit}")


@dataclass(frozen=True)
class JobRow:
    """One job as the listing shows it (times are UNIX seconds; ``run_time`` seconds so far or in all)."""

    id: str
    name: str
    request: str
    owner: str
    group: str
    state: str
    task_queue: str
    pilot: str | None
    attempt: int
    submitted: float
    started: float | None
    ended: float | None
    run_time: float | None
    exit_code: int | None
    reason: str | None
    #: Who held it (``pilotfish hold``), while it is held or will be as soon as it waits.
    held_by: str | None = None

    @classmethod
    def of(cls, job: Job, now: float, account: tuple[str, str]) -> JobRow:
        """``account``: the job's (group, owner) (:func:`taskqueues.store.fairshare.job_account`)."""
        run: float | None = None
        if job.wall is not None and job.state.final:
            run = float(job.wall)
        elif job.started is not None:
            run = max(0.0, (job.ended if job.ended is not None else now) - float(job.started))
        return cls(
            job.id,
            job.name,
            job.request,
            account[1],
            account[0],
            job.state.value,
            job.tq_id,
            job.pilot,
            job.attempt,
            job.submitted,
            job.started,
            job.ended,
            run,
            job.exit_code,
            job.reason,
            job.held_by,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Listing:
    """The rows found, in listing order, and whether more jobs matched than ``limit``."""

    rows: list[JobRow] = field(default_factory=list)
    more: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [r.to_json() for r in self.rows], "more": self.more}


class _Reader:
    """One listing's reads: the filter's id range and queue membership, resolved once."""

    def __init__(self, store: Store, flt: JobFilter) -> None:
        self.store, self.flt = store, flt
        self.keys = store.keys
        self.range: tuple[int, int] | None = None
        if flt.request is not None:
            rec = store.request(flt.request)  # NotFound names the request
            self.range = int(rec["first"]), int(rec["last"])
        self.queue_tqs: set[str] | None = None
        self.queue_pilots: set[str] = set()
        if flt.queue is not None:
            index = store.views.zset_page(self.keys.qheads(flt.queue), 0, -1)
            self.queue_tqs = {tq for tq, score in index if score <= _EMPTY_SCORE}
            self.queue_pilots = {name for name, rec in store.pilot_records().items() if rec.get("queue") == flt.queue}

    def in_range(self, job: str) -> bool:
        return self.range is None or (job.isdigit() and self.range[0] <= int(job) <= self.range[1])

    def keep(self, job: Job) -> bool:
        flt = self.flt
        return (
            job.state in flt.states
            and self.in_range(job.id)
            and (flt.task_queue is None or job.tq_id == flt.task_queue)
            and (flt.pilot is None or job.pilot == flt.pilot)
            and (self.queue_tqs is None or job.tq_id in self.queue_tqs or job.pilot in self.queue_pilots)
        )

    def pages(self, key: str, *, reverse: bool = False) -> Iterator[tuple[str, float]]:
        """(member, score) of a zset, a page at a time (lowest score first, or highest with ``reverse``): the
        first page just large enough for the listing, doubling up to :data:`PAGE` while more are read."""
        start, size = 0, min(PAGE, self.flt.limit + 1)
        while True:
            page = self.store.views.zset_page(key, start, start + size - 1, reverse=reverse)
            yield from page
            if len(page) < size:
                return
            start += size
            size = min(PAGE, size * 2)

    def records(self, ids: Iterable[str]) -> Iterator[Job]:
        """The readable records of ``ids`` that pass the filter, in the order given, loaded a page at a time
        (the first page just large enough for the listing, doubling while the filter drops records)."""
        it = iter(ids)
        size = min(PAGE, self.flt.limit + 1)
        while page := list(islice(it, size)):
            yield from (job for job in self.store.jobs(page) if self.keep(job))
            size = min(PAGE, size * 2)

    # -- one source per state ------------------------------------------------------------------

    def leased(self) -> Iterator[Job]:
        """Matched and running jobs (as many as the pilots hold), earliest start first."""
        jobs = list(self.records(member for member, _ in self.pages(self.keys.leases)))
        return iter(sorted(jobs, key=lambda j: (j.started or j.matched or 0.0, _order(j.id))))

    def _task_queues(self) -> list[str]:
        if self.flt.task_queue is not None:
            return [self.flt.task_queue]
        if self.queue_tqs is not None:
            return sorted(self.queue_tqs)
        return self.store.views.task_queue_ids()

    def _members(self, tq: str) -> Iterator[tuple[float, str]]:
        for member, score in self.pages(self.keys.tq(tq)):
            job = member.split(":", 1)[0]
            if self.in_range(job):
                yield score, job

    def _range_is_shorter(self, tqs: Sequence[str]) -> bool:
        """Whether reading a request's whole id range costs less than walking the task queues for its most
        urgent jobs: about ``limit`` x (waiting jobs / the request's jobs) members, when its jobs are spread
        over the queues' order."""
        assert self.range is not None
        waiting = sum(self.store.views.zset_sizes([self.keys.tq(tq) for tq in tqs]))
        size = self.range[1] - self.range[0] + 1
        return size * size <= (self.flt.limit + 1) * waiting

    def waiting(self) -> Iterator[Job]:
        """Waiting jobs, most urgent first across task queues, then those in back-off (by urgency)."""
        if self.flt.pilot is not None:
            return  # a waiting job has no pilot
        tqs = self._task_queues()
        if self.range is not None and self._range_is_shorter(tqs):
            jobs = [
                j
                for j in self.records(str(i) for i in range(self.range[0], self.range[1] + 1))
                if j.state is JobState.WAITING
            ]
            yield from sorted(jobs, key=lambda j: (j.score, _order(j.id)))
            return
        merged = heapq.merge(*(self._members(tq) for tq in tqs))
        yield from (j for j in self.records(job for _, job in merged) if j.state is JobState.WAITING)
        delayed = [
            j
            for j in self.records(member for member, _ in self.pages(self.keys.delayed))
            if j.state is JobState.WAITING
        ]
        yield from sorted(delayed, key=lambda j: (j.score, _order(j.id)))

    def releasing(self) -> Iterator[Job]:
        yield from self.records(member for member, _ in self.pages(self.keys.releasing))

    def blocked(self) -> Iterator[Job]:
        """Blocked jobs, in submission order."""
        yield from self.records(m for m, _ in self.pages(self.keys.blocked) if self.in_range(m))

    def held(self) -> Iterator[Job]:
        """Held jobs (``pilotfish hold``), in the order they were held."""
        yield from self.records(m for m, _ in self.pages(self.keys.held) if self.in_range(m))

    def finished(self) -> Iterator[Job]:
        """Finished jobs, most recent end first."""
        if (
            self.range is not None
            and self.range[1] - self.range[0] + 1 < self.store.views.zset_sizes([self.keys.ended])[0]
        ):
            jobs = list(self.records(str(i) for i in range(self.range[0], self.range[1] + 1)))
            yield from sorted(jobs, key=lambda j: (-(j.ended or 0.0), -_order(j.id)))
            return
        if self.flt.owner is not None or self.flt.group is not None:  # one account's range of the history index
            yield from self.records(self._latest_of_account())
            return
        yield from self.records(member for member, _ in self.pages(self.keys.ended, reverse=True))

    def _latest_of_account(self) -> Iterator[str]:
        start, size = 0, min(PAGE, self.flt.limit + 1)
        while True:
            page, more = self.store.history.latest(self.flt.owner, self.flt.group, start, size)
            yield from page
            if not more:
                return
            start += size
            size = min(PAGE, size * 2)


def _order(job: str) -> int:
    return int(job) if job.isdigit() else 0


def list_jobs(store: Store, flt: JobFilter | None = None, now: float | None = None) -> Listing:
    """The jobs ``flt`` selects, in listing order: running, waiting (most urgent first), releasing, blocked,
    held, finished (latest end first); at most ``flt.limit`` rows, ``more`` telling whether others matched.

    Raises NotFound for an unknown request.
    """
    flt = flt or JobFilter()
    reader = _Reader(store, flt)
    states = flt.states
    sources: list[tuple[frozenset[JobState], Any]] = [
        (_LEASED, reader.leased),
        (frozenset({JobState.WAITING}), reader.waiting),
        (frozenset({JobState.RELEASING}), reader.releasing),
        (frozenset({JobState.BLOCKED}), reader.blocked),
        (frozenset({JobState.HELD}), reader.held),
        (FINISHED, reader.finished),
    ]
    seen: set[str] = set()
    rows: list[JobRow] = []
    account = Accounts(store)
    now = time.time() if now is None else now
    for covers, source in sources:
        if not covers & states:
            continue
        for job in source():
            if job.id in seen or job.state not in covers:
                continue
            group, owner = account(job)
            if (flt.owner is not None and owner != flt.owner) or (flt.group is not None and group != flt.group):
                continue
            if len(rows) == flt.limit:
                return Listing(rows, True)
            seen.add(job.id)
            rows.append(JobRow.of(job, now, (group, owner)))
    return Listing(rows, False)


class Accounts:
    """A job's (group, owner) (:func:`taskqueues.store.fairshare.job_account`), reading each request record
    it needs once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.requests: dict[str, Mapping[str, Any]] = {}

    def __call__(self, job: Job) -> tuple[str, str]:
        if job.request not in self.requests and "." not in job.tq_id:
            try:
                self.requests[job.request] = self.store.request(job.request)
            except NotFound:
                self.requests[job.request] = {}
        return job_account(job.tq_id, self.requests.get(job.request, {}))


_COLUMNS = (
    "ID",
    "NAME",
    "REQUEST",
    "OWNER",
    "GROUP",
    "STATE",
    "TASKQUEUE",
    "PILOT",
    "ATT",
    "SUBMITTED",
    "STARTED",
    "ENDED",
    "RUNTIME",
    "EXIT",
)


def _stamp(seconds: float | None) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}" if whole >= 60 else f"{seconds:.1f}s"


def _cells(row: JobRow) -> Sequence[str]:
    name = row.name if len(row.name) <= 24 else row.name[:23] + "~"
    return (
        row.id,
        name or "-",
        row.request or "-",
        row.owner,
        row.group,
        row.state,
        row.task_queue or "-",
        row.pilot or "-",
        str(row.attempt),
        _stamp(row.submitted),
        _stamp(row.started),
        _stamp(row.ended),
        _duration(row.run_time),
        "-" if row.exit_code is None else str(row.exit_code),
    )


def render_jobs(listing: Listing) -> list[str]:
    """Human lines: a header and one aligned line per job, then how to see more."""
    if not listing.rows:
        return ["no job"]
    table = [_COLUMNS, *(_cells(r) for r in listing.rows)]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in table]
    if listing.more:
        lines.append(f"... more jobs match: raise --limit (now {len(listing.rows)}) or filter")
    return lines
