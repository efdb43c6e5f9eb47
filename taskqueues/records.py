"""Job records as the store keeps them, and the small value types of its operations.

A job record is a JSON object in the ``jobs`` hash under its id, with short field names (memory per
waiting job is a target): ``s`` state, ``a`` attempt, ``t`` task queue, ``mt`` the tail of its member in
that queue (``:cpu:mem:tmp:ete``; the scripts see the whole member as ``m``), ``sc`` score,
``c`` command, ``r`` exact requirements (JSON text), ``q`` request, ``n`` name, ``e`` estimated run time,
``ts`` submitted, ``rt``/``mr`` retries done/allowed, ``pl`` pilot, ``tm`` matched, ``st`` started,
``te`` ended, ``x`` exit code, ``w`` wall seconds, ``cpu`` CPU seconds, ``pm`` peak memory MB, ``why``
reason, ``o`` outputs (JSON text), ``cx`` cancel requested, ``k`` key, ``ru`` rule, ``dn`` dependents,
``nd`` unfinished dependencies, ``dp`` dependencies, ``dx`` requirements deferred until the dependencies'
outputs exist (``df`` holds what evaluating them needs), ``pr`` pressure (seconds of critical path from
the job's start to its request's targets).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.DEP_FAILED)


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
    max_retries: int = 3
    key: str = ""
    rule: str = ""
    dependents: tuple[int, ...] = ()
    deps: tuple[int, ...] = ()
    pending: int = 0
    deferred: str = ""
    pressure: float = 0.0
    state: JobState | None = None
    reason: str = ""

    def record(self, now: float) -> dict[str, Any]:
        """The stored record; ``dl``/``dpl`` (indexes) become ``dn``/``dp`` (ids) inside submit.lua."""
        rec: dict[str, Any] = {
            "s": self.state or (JobState.BLOCKED if self.pending else JobState.WAITING),
            "a": 0,
            "t": self.tq_id,
            "m_tail": member_tail(self.cpu, self.mem, self.tmp, self.ete),
            "sc": repr(float(self.score)),
            "c": self.command,
            "r": self.requirements,
            "e": self.ete,
            "ts": round(now, 1),
            "mr": self.max_retries,
        }
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
        if self.reason:
            rec["why"] = self.reason
            rec["te"] = round(now, 3)
        return rec


def member_tail(cpu: int, mem: int, tmp: int, ete: float) -> str:
    """The part of a task-queue member after the job id: what match needs to decide whether it fits."""
    return f":{int(cpu)}:{int(mem)}:{int(tmp)}:{math.ceil(ete)}"


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
        """The job stored as ``raw`` under ``job_id`` (records do not repeat their id)."""
        rec = json.loads(raw)
        dependents = rec.get("dn") or []
        deps = rec.get("dp") or []
        return cls(
            id=str(job_id),
            state=JobState(rec["s"]),
            attempt=int(rec.get("a", 0)),
            tq_id=rec.get("t", ""),
            command=rec.get("c", ""),
            requirements=_json_object(rec.get("r")),
            score=float(rec.get("sc", 0)),
            ete=float(rec.get("e", 0)),
            submitted=float(rec.get("ts", 0)),
            name=rec.get("n", ""),
            request=rec.get("q", ""),
            key=rec.get("k", ""),
            rule=rec.get("ru", ""),
            retries=int(rec.get("rt", 0)),
            max_retries=int(rec.get("mr", 0)),
            pilot=rec.get("pl"),
            matched=rec.get("tm"),
            started=rec.get("st"),
            ended=rec.get("te"),
            exit_code=rec.get("x"),
            wall=rec.get("w"),
            cpu_time=rec.get("cpu"),
            peak_mem=rec.get("pm"),
            reason=rec.get("why"),
            outputs=_json_object(rec.get("o")),
            dependents=tuple(str(d) for d in dependents) if isinstance(dependents, list) else (),
            deps=tuple(str(d) for d in deps) if isinstance(deps, list) else (),
            pending=int(rec.get("nd", 0)),
            deferred=rec.get("df", "") if rec.get("dx") else "",
            pressure=float(rec.get("pr", 0)),
        )


def _json_object(text: object) -> dict[str, Any]:
    """Requirements and outputs travel as JSON text inside the record (Lua's cjson would turn {} into [])."""
    if not text or not isinstance(text, str):
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class PilotOffer:
    """What a pilot has free when it asks for work, and which catalog queue it runs in."""

    pilot: str
    queue: str
    cpu: int
    mem: int
    tmp: int = 0
    time_left: float | None = None


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
class HeartbeatReply:
    kills: dict[str, str]
    lost: tuple[str, ...]
