"""Job records as the store keeps them, and the small value types of its operations.

A job record is a JSON object in the ``jobs`` hash under its id, with short field names (memory per
waiting job is a target): ``s`` state, ``a`` attempt, ``t`` task queue, ``mt`` the tail of its member in
that queue (``:cpu:mem:tmp:need``, ``need`` being :func:`time_needed`; the scripts see the whole member as
``m``), ``sc`` score (text, kept
to the millisecond: a start-by date needs no more), ``c`` command, ``r`` exact requirements (JSON text;
``cpu`` and ``mem`` left out when the member tail holds them, ``rn`` naming those the job did not give:
see :func:`stored_requirements`), ``q`` request, ``n`` name, ``e`` estimated run time, ``ts``
submitted, ``rt``/``mr`` retries done/allowed (``a`` and ``mr`` are left out while 0 and
:data:`DEFAULT_MAX_RETRIES`), ``pl`` pilot, ``tm`` matched, ``st`` started,
``te`` ended, ``x`` exit code, ``w`` wall seconds, ``cpu`` CPU seconds, ``pm`` peak memory MB, ``why``
reason, ``o`` outputs (JSON text), ``cx`` cancel requested, ``hb`` who held it, ``ho`` held while blocked
(it becomes held instead of waiting), ``py`` its own priority (``pilotfish update``), ``ro``/``rm``/``rr`` the
exit codes that retry it automatically, how many times at most, how many were done, ``k`` key, ``ru`` rule,
``dn`` dependents,
``nd`` unfinished dependencies, ``dp`` dependencies, ``dx`` requirements deferred until the dependencies'
outputs exist (``df`` holds what evaluating them needs), ``pr`` pressure (seconds of critical path from
the job's start to its request's targets), ``h`` the user's own run-time hint (what the rule's hint
factor is learnt from, and what re-estimation starts again from), ``lx``/``ls`` the pilot whose lease
expired and the state the job was in then (set by the reaper's requeue: that pilot's report or heartbeat of
the same attempt takes the job back while nobody matched it since; ``_lib.lua``'s ``take_back``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: Retry limit a record does not store (``_lib.lua`` has the same value as MAX_RETRIES).
DEFAULT_MAX_RETRIES = 3

#: What a job without ``wall`` must fit in a pilot's time left: this many times its run-time estimate.
DEFAULT_ETE_SAFETY_FACTOR = 1.5

#: Consumables that a record's member tail (":cpu:mem:tmp:need") already holds, with their letters in ``rn``.
_IN_TAIL = (("cpu", "c"), ("mem", "m"))


class JobState(StrEnum):
    BLOCKED = "blocked"
    RELEASING = "releasing"
    WAITING = "waiting"
    MATCHED = "matched"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEP_FAILED = "dep-failed"
    #: Kept out of its task queue by ``pilotfish hold`` until released (``pilotfish release``).
    HELD = "held"

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.DEP_FAILED)


def text(value: Any) -> str:
    """A value read from Redis (bytes, or already text) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class NewJob:
    """A job ready to be stored: requirements already validated, its task queue and pool already known.

    ``dependents`` are indexes, within the same submission, of the jobs that wait for this one;
    ``pending`` is how many of this job's own dependencies are unfinished (0 = it enters its task queue).
    """

    command: str
    tq_id: str
    tq_def: str
    queues: tuple[str, ...]
    cpu: int
    mem: int
    tmp: int = 0
    ete: float = 0.0
    score: float = 0.0
    requirements: str = "{}"
    name: str = ""
    request: str = ""
    max_retries: int = DEFAULT_MAX_RETRIES
    key: str = ""
    rule: str = ""
    dependents: tuple[int, ...] = ()
    deps: tuple[int, ...] = ()
    pending: int = 0
    deferred: str = ""
    pressure: float = 0.0
    state: JobState | None = None
    reason: str = ""
    hint: float | None = None
    #: Exit codes on which a failed payload runs again at once (the workflow's ``retry.on_exit``), at most
    #: ``retry_max`` times.
    retry_on: tuple[int, ...] = ()
    retry_max: int = 0

    def record(self, now: float, ete_safety_factor: float = DEFAULT_ETE_SAFETY_FACTOR) -> dict[str, Any]:
        """The stored record; ``dl``/``dpl`` (indexes) become ``dn``/``dp`` (ids) inside submit.lua.

        Its member's time is :func:`time_needed`: the ``wall`` of its requirements, else its estimate times
        ``ete_safety_factor``.
        """
        values = json.loads(self.requirements) if self.requirements else {}
        wall = values.get("wall") if isinstance(values, dict) else None
        rec: dict[str, Any] = {
            "s": self.state or (JobState.BLOCKED if self.pending else JobState.WAITING),
            "t": self.tq_id,
            "m_tail": member_tail(self.cpu, self.mem, self.tmp, time_needed(wall, self.ete, ete_safety_factor)),
            "sc": repr(round(float(self.score), 3)),
            "c": self.command,
            **stored_requirements(self.requirements, self.cpu, self.mem, values),
            "e": self.ete,
            "ts": round(now, 1),
        }
        if self.max_retries != DEFAULT_MAX_RETRIES:
            rec["mr"] = self.max_retries
        for short, value in (("q", self.request), ("n", self.name), ("k", self.key), ("ru", self.rule)):
            if value:
                rec[short] = value
        if self.dependents:
            rec["dl"] = list(self.dependents)
        if self.deps:
            rec["dpl"] = list(self.deps)
        if self.pending:
            rec["nd"] = self.pending
        if self.deferred:
            rec["dx"] = 1
            rec["df"] = self.deferred
        if self.pressure:
            rec["pr"] = round(self.pressure, 3)
        if self.hint is not None:
            rec["h"] = self.hint
        if self.retry_on and self.retry_max:
            rec["ro"], rec["rm"] = list(self.retry_on), self.retry_max
        if self.reason:
            rec["why"] = self.reason
            rec["te"] = round(now, 3)
        return rec


def time_needed(wall: object, ete: float, ete_safety_factor: float) -> int:
    """Seconds (normalised, as a pilot's time left) a pilot must have left to take a job: its ``wall``
    requirement when it gave one, else its run-time estimate times ``ete_safety_factor``, rounded up.

    The fourth field of a task-queue member: what match compares with the pilot's time left and what the
    director sizes pilots' walls from. The estimate itself only makes urgency (pressure, ETA).
    """
    if isinstance(wall, int) and not isinstance(wall, bool) and wall > 0:
        return wall
    return math.ceil(round(ete * ete_safety_factor, 6))


def canonical_json(value: Any) -> str:
    """The one JSON form of whatever is hashed, compared or stored as a definition: sorted keys, no spaces,
    ASCII, and no NaN or infinity (refused: they have no JSON form)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def request_record(
    *,
    name: str,
    priority: float,
    now: float,
    eta: float,
    critical: float,
    load: float,
    cores: float,
    jobs: int,
    owner: str,
    group: str,
    notify: str = "",
) -> dict[str, Any]:
    """The stored record of a request (``Store.submit``'s ``request``): its name and priority, when it was
    submitted, its ETA, the critical path, the date its load ends, its cores, how many jobs, owner and group,
    and the webhook called when it ends (only when it names one)."""
    record: dict[str, Any] = {
        "name": name,
        "priority": priority,
        "ts": round(now, 3),
        "eta": round(eta, 3),
        "cp": round(critical, 3),
        "load": round(load, 3),
        "cores": round(cores, 3),
        "n": jobs,
        "owner": owner,
        "group": group,
    }
    if notify:
        record["notify"] = notify
    return record


def placed_spec(
    *,
    tq_id: str,
    tq_def: str,
    queues: Sequence[str],
    cpu: int,
    mem: int,
    tmp: int,
    wall: object,
    values: Mapping[str, Any],
    ete: float,
    ete_safety_factor: float,
    command: str | None = None,
) -> dict[str, Any]:
    """What ``release.lua`` takes to move a releasing job into task queue ``tq_id`` (``Store.release``): its
    member tail and exact requirements as a waiting record stores them, its run-time estimate, and the
    command its dependencies' outputs filled in (None: unchanged)."""
    spec: dict[str, Any] = {
        "t": tq_id,
        "def": tq_def,
        "queues": list(queues),
        "m_tail": member_tail(cpu, mem, tmp, time_needed(wall, ete, ete_safety_factor)),
        **stored_requirements(canonical_json(dict(values)), cpu, mem),
        "e": ete,
    }
    if command is not None:
        spec["c"] = command
    return spec


def release_refusal(why: str) -> dict[str, Any]:
    """What ``release.lua`` takes to fail a releasing job instead (``Store.release``)."""
    return {"error": why}


def member_tail(cpu: int, mem: int, tmp: int, need: int) -> str:
    """The part of a task-queue member after the job id: what match needs to decide whether it fits (``need``
    from :func:`time_needed`)."""
    return f":{int(cpu)}:{int(mem)}:{int(tmp)}:{int(need)}"


def stored_requirements(requirements: str, cpu: int, mem: int, parsed: object = None) -> dict[str, str]:
    """The record fields ``r``/``rn`` for exact requirements (JSON text) whose member tail holds ``cpu``, ``mem``.

    The tail already stores both exact values, so ``r`` leaves out a ``cpu`` or ``mem`` equal to them (and
    is left out when nothing else remains); ``rn`` names, by letter, those the job did not give at all, so
    :func:`read_requirements` tells "left out" from "absent". Every waiting record is that much smaller.
    ``parsed``: the requirements already decoded (this function may change it), else None.
    """
    values: Any = parsed if parsed is not None else (json.loads(requirements) if requirements else {})
    if not isinstance(values, dict):
        return {"r": requirements}
    absent = ""
    elided = False
    for (name, letter), exact in zip(_IN_TAIL, (cpu, mem), strict=True):
        if name not in values:
            absent += letter
        elif type(values[name]) is int and values[name] == exact:
            del values[name]
            elided = True
    out: dict[str, str] = {}
    text = canonical_json(values) if elided else requirements
    if values:
        out["r"] = text
    if absent:
        out["rn"] = absent
    return out


def read_requirements(rec: dict[str, Any]) -> dict[str, Any]:
    """The exact requirements of a stored record (the inverse of :func:`stored_requirements`)."""
    values = _json_object(rec.get("r"))
    tail = rec.get("mt")
    if not isinstance(tail, str):
        return values
    absent = rec.get("rn", "")
    for (name, letter), exact in zip(_IN_TAIL, tail.split(":")[1:], strict=False):
        if name not in values and letter not in absent:
            values[name] = int(exact)
    return values


@dataclass(frozen=True)
class Job:
    """A job as read back from the store."""

    id: str
    state: JobState
    attempt: int
    tq_id: str
    command: str
    requirements: dict[str, Any]
    score: float
    ete: float
    submitted: float
    name: str = ""
    request: str = ""
    key: str = ""
    rule: str = ""
    retries: int = 0
    max_retries: int = 0
    pilot: str | None = None
    matched: float | None = None
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    wall: float | None = None
    cpu_time: float | None = None
    peak_mem: float | None = None
    reason: str | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    dependents: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()
    pending: int = 0
    deferred: str = ""
    pressure: float = 0.0
    #: Who held the job (``pilotfish hold``): while it is held, or blocked with a hold waiting for it.
    held_by: str | None = None
    #: The job's own priority (``pilotfish update --priority``), else None: its request's.
    priority: float | None = None
    #: Automatic retries: the exit codes that retry, how many times at most, and how many were done.
    retry_on: tuple[int, ...] = ()
    retry_max: int = 0
    auto_retries: int = 0
    #: Why this record cannot be run as stored (not UTF-8, unreadable): a pilot fails such a job with it.
    problem: str = ""

    @property
    def cpu(self) -> int:
        return int(self.requirements.get("cpu", 1))

    @property
    def mem(self) -> int:
        return int(self.requirements.get("mem", 0))

    @property
    def tmp(self) -> int:
        return int(self.requirements.get("tmp", 0))

    @classmethod
    def from_record(cls, raw: str | bytes, job_id: str) -> Job:
        """The job stored as ``raw`` under ``job_id`` (records do not repeat their id).

        Built by filling the instance's ``__dict__``: the frozen dataclass ``__init__`` sets its 30 fields
        one ``object.__setattr__`` at a time, which was most of the cost of reading back a matched job on
        the match hot path. Every field is set here, with the same values ``__init__`` would get.
        """
        problem = ""
        try:
            rec = json.loads(raw)
        except UnicodeDecodeError:  # bytes that are not UTF-8: kept readable, and the job marked
            rec = json.loads(raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw)
            problem = "its record is not valid UTF-8"
        get = rec.get
        dependents = get("dn") or []
        deps = get("dp") or []
        job = object.__new__(cls)
        job.__dict__.update(
            id=str(job_id),
            state=_STATES[rec["s"]],
            attempt=int(get("a", 0)),
            tq_id=get("t", ""),
            command=get("c", ""),
            requirements=read_requirements(rec),
            score=float(get("sc", 0)),
            ete=float(get("e", 0)),
            submitted=float(get("ts", 0)),
            name=get("n", ""),
            request=get("q", ""),
            key=get("k", ""),
            rule=get("ru", ""),
            retries=int(get("rt", 0)),
            max_retries=int(get("mr", DEFAULT_MAX_RETRIES)),
            pilot=get("pl"),
            matched=get("tm"),
            started=get("st"),
            ended=get("te"),
            exit_code=get("x"),
            wall=get("w"),
            cpu_time=get("cpu"),
            peak_mem=get("pm"),
            reason=get("why"),
            outputs=_json_object(get("o")),
            dependents=tuple(str(d) for d in dependents) if isinstance(dependents, list) else (),
            deps=tuple(str(d) for d in deps) if isinstance(deps, list) else (),
            pending=int(get("nd", 0)),
            deferred=get("df", "") if get("dx") else "",
            pressure=float(get("pr", 0)),
            held_by=get("hb"),
            priority=get("py"),
            retry_on=tuple(int(x) for x in get("ro") or ()),
            retry_max=int(get("rm", 0)),
            auto_retries=int(get("rr", 0)),
            problem=problem,
        )
        return job

    @classmethod
    def unreadable(cls, raw: str | bytes, job_id: str, why: str) -> Job | None:
        """A stand-in for a leased record :meth:`from_record` cannot read, carrying ``why`` as its
        :attr:`problem` (the pilot fails the job with it); None when not even its attempt can be read."""
        try:
            text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
            rec = json.loads(text)
            attempt = int(rec["a"])
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        return cls(
            id=str(job_id),
            state=JobState.RUNNING,
            attempt=attempt,
            tq_id="",
            command="",
            requirements={},
            score=0.0,
            ete=0.0,
            submitted=0.0,
            problem=f"its record cannot be read ({why})",
        )


_STATES = {state.value: state for state in JobState}


def _json_object(text: object) -> dict[str, Any]:
    """Requirements and outputs travel as JSON text inside the record (Lua's cjson would turn {} into [])."""
    if not text or not isinstance(text, str):
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Parked:
    """A job taken out of its task queue (match.lua) or its lease or back-off (reap.lua) because its
    task-queue member or its record could not be read: it waits for an operator (see ``keys.parked``)."""

    job: str
    reason: str
    task_queue: str = ""
    member: str = ""
    at: float = 0.0

    @classmethod
    def from_entry(cls, job: str, raw: str | bytes) -> Parked:
        """The parked entry stored as ``raw`` for ``job`` (an entry that is not what the scripts write
        reads as its own text)."""
        try:
            entry = json.loads(raw)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            return cls(job, f"unreadable parked entry {text(raw)!r}")
        at = entry.get("at")
        return cls(
            job,
            str(entry.get("why", "")),
            str(entry.get("t", "")),
            str(entry.get("m", "")),
            float(at) if isinstance(at, int | float) else 0.0,
        )


@dataclass(frozen=True)
class Largest:
    """The largest exact consumables of the jobs that entered a task queue since it was last empty
    (``wall`` 0 when none gave one): what the pool refresh judges a queue's eligibility on."""

    cpu: int
    mem: int
    tmp: int
    wall: int


@dataclass(frozen=True)
class PilotOffer:
    """What a pilot has free when it asks for work, and which catalog queue it runs in."""

    pilot: str
    queue: str
    cpu: int
    mem: int
    tmp: int = 0
    time_left: float | None = None
    #: What the pilot runs, for reservations (EASY backfill in match.lua): per running job (seconds until its
    #: estimated end, cores, memory MB, scratch MB). None: no reservation is made or honoured for this call.
    running: tuple[tuple[float, int, int, int], ...] | None = None
    #: The most each job leased may take (cores, memory MB, scratch MB) while the jobs together fit the offer: a
    #: prefetch offers its hold's room and caps each job at the pilot's size (match.lua's ARGV[12]). None: the
    #: offer is the cap. Only without ``running`` (no reservations).
    cap: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class RunResult:
    """What a pilot reports when a payload ends."""

    exit_code: int | None = 0
    wall: float = 0.0
    cpu_time: float = 0.0
    peak_mem: float = 0.0
    outputs: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    started: float | None = None  # when the payload started, if its start was not reported on its own

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"w": round(self.wall, 3), "cpu": round(self.cpu_time, 3), "pm": round(self.peak_mem, 1)}
        if self.started is not None:
            out["st"] = self.started
        if self.exit_code is not None:
            out["x"] = self.exit_code
        if self.outputs:
            out["o"] = json.dumps(self.outputs, sort_keys=True)
        if self.reason:
            out["why"] = self.reason
        return out


@dataclass(frozen=True)
class Exchange:
    """What one round trip of a pilot's reports and match returned (:meth:`Store.exchange`).

    ``refused`` maps a job whose start or completion was refused (stale: the job was taken from the
    pilot) to the reason; ``released`` lists the dependents the completions released; ``matched`` the
    jobs newly leased to the pilot, most urgent first.
    """

    refused: dict[str, str] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    matched: list[Job] = field(default_factory=list)


@dataclass(frozen=True)
class JobUsage:
    """What a running payload has used so far, sent with each heartbeat: peak memory (MB) of its whole
    process tree and its CPU seconds. Stored on the job record as ``pm``/``cpu`` (the fields its result
    fills at the end), so a running job reads back with them."""

    peak_mem: float
    cpu_time: float

    def fields(self) -> tuple[float, float]:
        return round(self.peak_mem, 1), round(self.cpu_time, 3)


@dataclass(frozen=True)
class HeartbeatReply:
    kills: dict[str, str]
    lost: tuple[str, ...]
