"""Why is this job still waiting? One call that looks where a person would look, and says it in a line.

In order: whether a script parked the job (its task-queue member or its record could not be read: it
waits for an operator, outside every task queue); the job's state (only a waiting job can be matched); its
place in its task queue (a pilot
only ever takes the head); the queues it is eligible for (the stored SubmitPool) and, for the others,
the catalog's reason; then every live pilot (a heartbeat within 3 leases, and not stopped: the others are
only counted) and what stopped it: its queue is not eligible, it is draining, a resource is short, or more
urgent heads of its queue fit first. What a pilot has free is what its last heartbeat says: its size
(``cores``, ``mem``, ``tmp``) less what its payloads hold (``used_cpu``, ``used_mem``, ``used_tmp``), and
its ``time_left``. A heartbeat may be older than the pilot's last match, so what its payloads hold is
also counted from the leased jobs themselves (each names its pilot) while there are at most
:data:`LEASE_SCAN` of them, and the larger of the two counts. A field that a heartbeat did not send is
"unknown", never a guess, and a pilot whose room is unknown is never said to be able to run the job. The
verdict names the first thing to act on.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from taskqueues.catalog import Catalog
from taskqueues.errors import PilotfishError
from taskqueues.requirements import Requirements
from taskqueues.store import Job, JobState, Parked, Place, Store, time_needed

from .fairexplain import fair_view

__all__ = ["Explanation", "PilotFit", "explain", "render_explanation"]

#: Up to this many leased jobs, explain counts what each pilot holds from the jobs rather than its heartbeat.
LEASE_SCAN = 20_000
_FREE = (("cpu", "free_cpu", "cores"), ("mem", "free_mem", "MB memory"), ("tmp", "free_tmp", "MB scratch"))
#: A pilot record's size and use of each consumable (what ``pilot.agent.heartbeat.Heartbeat.record`` writes).
_HELD = {"free_cpu": ("cores", "used_cpu"), "free_mem": ("mem", "used_mem"), "free_tmp": ("tmp", "used_tmp")}


@dataclass(frozen=True)
class PilotFit:
    """One live pilot and why it did not take the job (``fits`` with no reason: it could take it now)."""

    pilot: str
    queue: str
    eligible: bool
    """Its queue is in the job's SubmitPool."""
    fits: bool
    reasons: list[str]
    ahead: int = 0
    """Heads of its queue more urgent than the job that fit this pilot too (they go first)."""


@dataclass(frozen=True)
class Explanation:
    job: str
    name: str
    state: str
    request: str
    reason: str | None
    task_queue: str
    score: float
    ete: float
    cpu: int
    mem: int
    tmp: int
    position: int | None
    """Jobs ahead of it in its task queue (0 = it is the head); None when it is not in one."""
    queue_length: int
    eligible: list[str]
    ineligible: dict[str, str]
    pilots: list[PilotFit] = field(default_factory=list)
    verdict: str = ""
    skipped: int = 0
    """Pilots in the pilots hash not listed: no heartbeat within the liveness window, or stopped."""
    window: float = 0.0
    """The liveness window, seconds (``store.pilots.live_window``)."""
    parked: str | None = None
    reservations: list[str] = field(default_factory=list)
    """Pilots holding cores for a reserved job in the job's eligible queues (match.lua's EASY backfill)."""
    """Why a script parked the job (its member or record could not be read), None when it is not parked."""
    owner: str = ""
    group: str = ""
    fairness: list[str] = field(default_factory=list)
    """Its group's standing against its share and the running limits that hold it (matcher.fairexplain)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _ineligible(store: Store, catalog: Catalog, job: Job, eligible: set[str]) -> dict[str, str]:
    """Catalog queue -> why it cannot run the job (for every queue not in its SubmitPool)."""
    try:
        reasons = catalog.explain(Requirements(job.requirements), store.keys.vo)
    except PilotfishError as exc:
        return {"?": f"its requirements cannot be checked against the catalog: {exc}"}
    out = {}
    for queue, why in reasons.items():
        if queue in eligible:
            continue
        out[queue] = why or "the catalog would take it, but the stored SubmitPool does not list it yet"
    return out


def _number(rec: dict[str, Any], name: str) -> float | None:
    value = rec.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _held_now(store: Store) -> dict[str, dict[str, int]] | None:
    """What each pilot's matched and running jobs hold now (used_cpu, used_mem, used_tmp), from the leased
    jobs' own records; None when there are more than :data:`LEASE_SCAN` of them (heartbeats are used)."""
    ids = store.views.leased(LEASE_SCAN)
    if ids is None:
        return None
    held: dict[str, dict[str, int]] = {}
    for job in store.jobs(ids):
        if job.pilot and job.state in (JobState.MATCHED, JobState.RUNNING):
            use = held.setdefault(job.pilot, {"used_cpu": 0, "used_mem": 0, "used_tmp": 0})
            use["used_cpu"] += job.cpu
            use["used_mem"] += job.mem
            use["used_tmp"] += job.tmp
    return held


def _free(rec: dict[str, Any], key: str) -> float | None:
    """What a pilot has free of one consumable: its size less what is used."""
    total, used = (_number(rec, name) for name in _HELD[key])
    if total is not None:
        return max(0.0, total - (used or 0.0))
    return _number(rec, key)


def _fit(job: Job, seconds: float, rec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what is short, what is unknown) for this job on a pilot with record ``rec``."""
    short, unknown = [], []
    if rec.get("draining"):
        short.append("it is draining (takes no new work)")
    for attr, key, unit in _FREE:
        need = getattr(job, attr)
        have = _free(rec, key)
        if have is None:
            if need:
                unknown.append(f"{key.replace('_', ' ')} unknown")
        elif have < need:
            short.append(f"{key.replace('_', ' ')} {have:g} < {need} {unit} needed")
    left = _number(rec, "time_left")
    if left is None:
        if "time_left" not in rec:
            unknown.append("time left unknown")
    elif seconds > left:
        short.append(
            f"time left {left:g} s < wall {seconds:g} s"
            if "wall" in job.requirements
            else f"time left {left:g} s < {seconds:g} s needed (estimated run time {job.ete:g} s, with margin)"
        )
    return short, unknown


def _heads_ahead(store: Store, queue: str, job: Job, score: float, rec: dict[str, Any]) -> int:
    """Heads of other task queues of ``queue`` more urgent than the job that fit what the pilot has free."""
    count = 0
    for head in store.views.heads_before(queue, score, skip=job.tq_id):
        free = [_free(rec, key) for _, key, _ in _FREE]
        left = _number(rec, "time_left")
        wants = [float(head.cpu), float(head.mem), float(head.tmp)]
        if all(f is None or w <= f for f, w in zip(free, wants, strict=True)) and (left is None or head.need <= left):
            count += 1
    return count


def explain(store: Store, catalog: Catalog, job_id: str, *, now: float | None = None) -> Explanation:
    """Why job ``job_id`` is (or is not) waiting; NotFound if there is no such job."""
    now = store.clock() if now is None else now
    parked = store.parked([job_id]).get(job_id)
    try:
        job = store.job(job_id)
    except PilotfishError:
        if parked is None:
            raise
        return _unreadable(job_id, parked)
    except (ValueError, KeyError, TypeError) as exc:
        if parked is None:
            raise PilotfishError(f"job {job_id}: its record cannot be read ({exc})") from None
        return _unreadable(job_id, parked)
    member = store.views.job_member(job_id)
    need = (
        float(member.rsplit(":", 1)[1])
        if member.count(":") == 4
        else float(time_needed(job.requirements.get("wall"), job.ete, store.ete_safety_factor))
    )
    place = store.views.place(job_id, job.tq_id, member) if job.tq_id else Place(None, 0, None)
    rank, length, delayed = place.rank, place.length, place.delayed
    eligible = sorted(store.pool(job.tq_id)) if job.tq_id else []
    base = Explanation(
        job=job.id,
        name=job.name,
        state=job.state.value,
        request=job.request,
        reason=job.reason,
        task_queue=job.tq_id,
        score=job.score,
        ete=job.ete,
        cpu=job.cpu,
        mem=job.mem,
        tmp=job.tmp,
        position=rank,
        queue_length=int(length),
        eligible=eligible,
        ineligible=_ineligible(store, catalog, job, set(eligible)) if job.tq_id else {},
        parked=_parked(parked),
        reservations=store.views.held_for(eligible, job_id, now, bounded=store.bounded_reservations)
        if job.tq_id
        else [],
    )
    view = fair_view(store, job, eligible if job.state is JobState.WAITING else [], now)
    base = _with(base, owner=view.owner, group=view.group, fairness=view.lines())

    if job.state is JobState.WAITING and rank is None and delayed is None and parked is not None:
        return _with(
            base,
            verdict=f"parked: {parked.reason}; it waits outside its task queue for an operator "
            f"(repair its record, or cancel it)",
        )
    if job.state is not JobState.WAITING:
        return _with(base, verdict=_not_waiting(store, job))
    if rank is None:
        if delayed is not None:
            return _with(
                base,
                verdict=f"requeued ({job.reason or 'lease expired'}); back in its task queue "
                f"after its back-off, in {max(0.0, float(delayed) - now):.0f} s",
            )
        return _with(base, verdict="waiting but not in its task queue: the next reap or release puts it back")
    if not eligible:
        return _with(base, verdict="no queue is eligible for its task queue: check the catalog reasons")

    window = store.pilots.live_window
    pilots = store.pilots.live(now - window)
    fits: list[PilotFit] = []
    stopped = 0
    held = _held_now(store)
    for pilot, prec in pilots.records.items():
        if held is not None and pilot in held:  # what it holds now, where its heartbeat may say less
            prec = {**prec, **{k: max(v, int(_number(prec, k) or 0)) for k, v in held[pilot].items()}}
        if prec.get("stopped"):
            stopped += 1  # its last heartbeat was its goodbye
            continue
        queue = prec.get("queue")
        if not isinstance(queue, str) or not queue:
            fits.append(PilotFit(pilot, "unknown", False, False, ["its queue is unknown (no queue in its record)"]))
            continue
        if queue not in eligible:
            why = base.ineligible.get(queue, "it is not in the catalog")
            fits.append(PilotFit(pilot, queue, False, False, [f"its queue {queue} is not eligible: {why}"]))
            continue
        short, unknown = _fit(job, need, prec)
        if short or unknown:
            fits.append(PilotFit(pilot, queue, True, False, short + unknown))
            continue
        if queue in view.limits:
            fits.append(PilotFit(pilot, queue, True, False, [view.limits[queue]]))
            continue
        ahead = _heads_ahead(store, queue, job, job.score, prec)
        reasons: list[str] = []
        if ahead:
            reasons.insert(0, f"{ahead} more urgent heads fit first")
        if rank:
            reasons.insert(0, f"waiting behind {rank} jobs of its task queue")
        fits.append(PilotFit(pilot, queue, True, True, reasons, ahead))
    skipped = pilots.total - len(pilots.records) + stopped
    limit_held = not any(f.fits for f in fits) and any(f.reasons == [view.limits.get(f.queue)] for f in fits)
    return _with(
        base,
        pilots=fits,
        verdict=view.verdict(_verdict(fits, int(rank)), limit_held),
        skipped=max(0, skipped),
        window=window,
    )


def _parked(parked: Parked | None) -> str | None:
    if parked is None:
        return None
    where = f" from task queue {parked.task_queue}" if parked.task_queue else ""
    member = f" (member {parked.member!r})" if parked.member else ""
    return f"{parked.reason}; taken out{where}{member}"


def _unreadable(job_id: str, parked: Parked) -> Explanation:
    """A parked job whose record cannot be read: only the parked entry is known."""
    return Explanation(
        job=job_id,
        name="",
        state="unreadable",
        request="",
        reason=None,
        task_queue=parked.task_queue,
        score=0.0,
        ete=0.0,
        cpu=0,
        mem=0,
        tmp=0,
        position=None,
        queue_length=0,
        eligible=[],
        ineligible={},
        parked=_parked(parked),
        verdict=f"parked: {parked.reason}; its record cannot be read: an operator must repair or delete it",
    )


def _with(base: Explanation, **changes: Any) -> Explanation:
    return Explanation(**{**asdict(base), "pilots": base.pilots, **changes})


def _not_waiting(store: Store, job: Job) -> str:
    if job.state is JobState.HELD:
        why = f" ({job.reason})" if job.reason else ""
        return f"held by {job.held_by}{why}: no pilot matches it until it is released (pilotfish release {job.id})"
    if job.state is JobState.BLOCKED:
        unfinished = [d.id for d in store.jobs(list(job.deps)) if not d.state.final]
        held = f"; held by {job.held_by} as soon as it would wait" if job.held_by else ""
        return f"blocked: {len(unfinished)} dependencies unfinished ({', '.join(unfinished[:10])}){held}"
    if job.state is JobState.RELEASING:
        return "releasing: its requirements are being evaluated before it enters its task queue"
    if job.state in (JobState.MATCHED, JobState.RUNNING):
        used = (
            ""
            if job.peak_mem is None or job.cpu_time is None
            else f" (so far: peak memory {job.peak_mem:g} MB, CPU {job.cpu_time:g} s)"
        )
        return f"not waiting: {job.state.value} on pilot {job.pilot}{used}"
    return f"not waiting: it ended {job.state.value}" + (f" ({job.reason})" if job.reason else "")


def _verdict(fits: list[PilotFit], rank: int) -> str:
    eligible = [f for f in fits if f.eligible]
    if not eligible:
        return "no live pilot in an eligible queue: the director must start one"
    able = [f for f in eligible if f.fits]
    if not able:
        first = eligible[0]
        return (
            f"no live pilot in an eligible queue has room for it ({len(eligible)} seen); "
            f"e.g. {first.pilot}: {'; '.join(first.reasons)}"
        )
    if rank:
        return f"waiting behind {rank} more urgent jobs of its task queue"
    busy = [f for f in able if f.ahead]
    if len(busy) == len(able):
        best = min(busy, key=lambda f: f.ahead)
        return f"{best.ahead} more urgent heads fit first on the live pilots (fewest on {best.pilot})"
    free = next(f for f in able if not f.ahead)
    return f"pilot {free.pilot} can run it now: it should be matched at its next request"


def render_explanation(e: Explanation, now: float | None = None) -> list[str]:
    """Human lines for :class:`Explanation`."""
    now = time.time() if now is None else now
    lines = [
        f"job {e.job}{f' {e.name!r}' if e.name else ''} of request {e.request or '-'}: {e.state}"
        + (f" ({e.reason})" if e.reason else "")
    ]
    if e.parked:
        lines.append(f"  parked: {e.parked}")
    lines.append(
        f"  needs cpu {e.cpu}, mem {e.mem} MB, tmp {e.tmp} MB, estimated {e.ete:g} s; "
        f"score {e.score:.0f} (should start {'now' if e.score <= now else f'in {e.score - now:.0f} s'})"
    )
    lines.extend(e.fairness)
    if e.task_queue:
        where = "not in it" if e.position is None else f"position {e.position} of {e.queue_length}"
        lines.append(f"  task queue {e.task_queue}: {where}")
        lines.append(f"  eligible queues: {', '.join(e.eligible) or 'none'}")
        for queue, why in sorted(e.ineligible.items()):
            lines.append(f"  not eligible {queue}: {why}")
    for f in e.pilots:
        lines.append(f"  pilot {f.pilot} ({f.queue}): " + ("; ".join(f.reasons) if f.reasons else "could take it now"))
    lines += [f"  {line}" for line in e.reservations]
    if e.skipped:
        lines.append(f"  ({e.skipped} pilots not listed: stopped, or no heartbeat within {e.window:g} s)")
    lines.append(f"verdict: {e.verdict}")
    return lines
