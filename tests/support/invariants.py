"""What must hold in the store of one community after every script call, and a checker that says what does not.

The scripts keep several structures in step (``keys.py`` lists them): a job's record and its place (its
task-queue member, its lease, its back-off, the releasing set), each task queue and its heads entry, its
SubmitPool and the heads index of every queue of that pool, the queue floors, the largest exact values,
the emptied task queues and the outstanding-work counter. :func:`check` reads all of them (SCAN, HSCAN:
no ``KEYS``) and returns every place where they disagree, one :class:`Violation` each; an empty list
means the store is consistent. The tests run it after each script call (``tests/taskqueues/store/test_fuzz.py``).
It lives with the tests, which alone use it: it reads the whole of a community's store into memory at once
and knows the storage layout key by key (an oracle of the scripts, not an operator's tool).

A job that a script parked (``keys.parked``: its member or record could not be read) is accounted for:
it may wait outside every task queue, and its record may be unreadable.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from taskqueues.store.gheads import GroupHeads
from taskqueues.store.keys import MATCHED_COUNT, Keys
from taskqueues.store.records import Job, JobState
from taskqueues.store.records import text as _text
from taskqueues.store.reservations import read_reservations

__all__ = ["Violation", "check", "fair_violations", "heads_violations"]

_SENTINEL = "~" * 65  # the member every heads index and the heads hash hold to stay out of listpacks (_lib.lua)
_EMPTY = 1e18
_MEMBER = re.compile(r"^([^:\s]+):(\d+):(\d+):(\d+):(\d+)$")
_WALL = re.compile(r'[{,]"wall":(\d+)[,}]')
_FINAL = {s.value for s in JobState if s.final}
_LEASED = {JobState.MATCHED.value, JobState.RUNNING.value}


@dataclass(frozen=True, order=True)
class Violation:
    """One disagreement: what kind, about which job, task queue or queue, and the detail."""

    kind: str
    subject: str
    detail: str = field(compare=False)

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.detail}"


@dataclass
class _Snapshot:
    """Every structure of one community, as read."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    misread: dict[str, str] = field(default_factory=dict)
    tqs: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    indexes: dict[str, dict[str, float]] = field(default_factory=dict)
    pools: dict[str, set[str]] = field(default_factory=dict)
    defs: set[str] = field(default_factory=set)
    heads: dict[str, str] = field(default_factory=dict)
    qfloor: dict[str, str] = field(default_factory=dict)
    tqmax: dict[str, str] = field(default_factory=dict)
    tqempty: set[str] = field(default_factory=set)
    poolstamp: set[str] = field(default_factory=set)
    leases: set[str] = field(default_factory=set)
    delayed: set[str] = field(default_factory=set)
    releasing: set[str] = field(default_factory=set)
    kills: set[str] = field(default_factory=set)
    parked: set[str] = field(default_factory=set)
    work: str | None = None
    pilots: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)


def _glob(text: str) -> str:
    """``text`` with SCAN's glob characters escaped."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _hash(client: redis.Redis, key: str) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in client.hscan_iter(key)}


def _zset(client: redis.Redis, key: str) -> dict[str, float]:
    return {_text(m): float(s) for m, s in client.zscan_iter(key)}


def _under(client: redis.Redis, prefix: str) -> Iterable[tuple[str, str]]:
    """(key, the rest of its name after ``prefix``) of every key under ``prefix``."""
    for key in client.scan_iter(match=_glob(prefix) + "*", count=1000):
        name = _text(key)
        yield name, name[len(prefix) :]


def _read(client: redis.Redis, keys: Keys) -> _Snapshot:
    snap = _Snapshot()
    for job, raw in _hash(client, keys.jobs).items():
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and rec.get("s") in {s.value for s in JobState}:
            snap.records[job] = rec
            try:
                Job.from_record(raw, job)
            except (ValueError, KeyError, TypeError) as exc:
                snap.misread[job] = f"{exc}: {raw[:80]}"
        else:
            snap.unreadable[job] = raw[:80]
    for key, tq in _under(client, keys.tq_prefix):
        entries: Any = client.zrange(key, 0, -1, withscores=True)
        snap.tqs[tq] = [(_text(m), float(s)) for m, s in entries]
    for key, queue in _under(client, keys.qheads_prefix):
        snap.indexes[queue] = {m: s for m, s in _zset(client, key).items() if m != _SENTINEL}
    for key, tq in _under(client, keys.pool_prefix):
        snap.pools[tq] = {_text(q) for q in client.smembers(key)}
    snap.defs = set(_hash(client, keys.tqdefs))
    snap.heads = {tq: e for tq, e in _hash(client, keys.heads).items() if tq not in (_SENTINEL, MATCHED_COUNT)}
    snap.qfloor = _hash(client, keys.qfloor)
    snap.tqmax = _hash(client, keys.tqmax)
    snap.tqempty = set(_zset(client, keys.tqempty))
    snap.poolstamp = set(_zset(client, keys.poolstamp))
    snap.leases = set(_zset(client, keys.leases))
    snap.delayed = set(_zset(client, keys.delayed))
    snap.releasing = set(_zset(client, keys.releasing))
    snap.kills = set(_hash(client, keys.kills))
    snap.parked = set(_hash(client, keys.parked))
    work = client.get(keys.work)
    snap.work = None if work is None else _text(work)
    snap.pilots = _hash(client, keys.pilots)
    snap.requests = _hash(client, keys.requests)
    return snap


def check(client: redis.Redis, keys: Keys) -> list[Violation]:
    """Every violation of the store's invariants in community ``keys``, sorted; [] when it is consistent."""
    snap = _read(client, keys)
    out: list[Violation] = []
    members = _members(snap, out)
    _jobs(snap, members, out)
    _task_queues(snap, out)
    every = set(snap.tqs) | snap.defs | set(snap.heads)
    out += heads_violations(client, keys, {tq: snap.pools.get(tq, set()) for tq in every})
    _work(snap, out)
    _records_read_by_the_control_plane(snap, out)
    _reservations(client, keys, snap, out)
    out += fair_violations(snap.records, _hash(client, keys.fair))
    out += [Violation("group-heads", line.split(":", 1)[0], line) for line in GroupHeads(client, keys, "").check()]
    return sorted(set(out))


def _members(snap: _Snapshot, out: list[Violation]) -> dict[str, str]:
    """Job id -> the task queue its member is in; every member must be a waiting job's, as its record says."""
    where: dict[str, str] = {}
    for tq, entries in snap.tqs.items():
        for member, score in entries:
            found = _MEMBER.match(member)
            if not found:
                out.append(Violation("unreadable-member", tq, f"member {member!r}"))
                continue
            job = found.group(1)
            if job in where:
                out.append(Violation("member-twice", job, f"in task queues {where[job]} and {tq}"))
            where[job] = tq
            rec = snap.records.get(job)
            if rec is None:
                out.append(Violation("member-without-record", job, f"member {member!r} of task queue {tq}"))
                continue
            if rec["s"] != JobState.WAITING.value:
                out.append(Violation("member-not-waiting", job, f"its record is {rec['s']}, member of {tq}"))
            if rec.get("t") != tq or job + str(rec.get("mt")) != member:
                out.append(
                    Violation(
                        "member-mismatch",
                        job,
                        f"member {member!r} of {tq}; record t={rec.get('t')!r} mt={rec.get('mt')!r}",
                    )
                )
            if _number(rec.get("sc")) != score:
                out.append(Violation("score-mismatch", job, f"score {score!r} in {tq}, {rec.get('sc')!r} on record"))
    return where


def _number(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def _jobs(snap: _Snapshot, members: Mapping[str, str], out: list[Violation]) -> None:
    """Each record is where its state says, and each entry of a lease, back-off, releasing or kill set is a
    job in the state it implies."""
    for job, raw in snap.unreadable.items():
        if job not in snap.parked:
            out.append(Violation("unreadable-record", job, raw))
    for job, why in snap.misread.items():
        out.append(Violation("record-misread", job, f"the control plane cannot read it ({why})"))
    listers: dict[str, list[str]] = defaultdict(list)
    for job, rec in snap.records.items():
        for d in rec.get("dn") or []:
            listers[str(d)].append(job)
    for job, rec in snap.records.items():
        state = rec["s"]
        places = {
            "task queue": job in members,
            "lease": job in snap.leases,
            "back-off": job in snap.delayed,
            "releasing set": job in snap.releasing,
        }
        allowed: set[str] = set()
        if state == JobState.WAITING.value:
            allowed = {"task queue", "back-off"}
            held = [p for p in allowed if places[p]]
            if len(held) != 1 and job not in snap.parked:
                out.append(Violation("waiting-misplaced", job, f"in {held or 'neither its task queue nor a back-off'}"))
        elif state in _LEASED:
            allowed = {"lease"}
            if not places["lease"] or not rec.get("pl") or not isinstance(rec.get("a"), int) or rec["a"] < 1:
                out.append(
                    Violation(
                        "leased-without-lease",
                        job,
                        f"{state}: lease entry {places['lease']}, pilot {rec.get('pl')!r}, attempt {rec.get('a')!r}",
                    )
                )
        elif state == JobState.RELEASING.value:
            allowed = {"releasing set"}
            if not places["releasing set"]:
                out.append(Violation("releasing-misplaced", job, "not in the releasing set"))
        elif state == JobState.BLOCKED.value:
            unfinished = [d for d in listers[job] if snap.records.get(d, {}).get("s") != JobState.DONE.value]
            ended = [d for d in unfinished if snap.records.get(d, {}).get("s") in _FINAL]
            if rec.get("nd") != len(unfinished) or not unfinished or ended:
                out.append(
                    Violation(
                        "blocked-stuck",
                        job,
                        f"nd={rec.get('nd')!r}, unfinished dependencies {unfinished}, of which ended {ended}",
                    )
                )
        for place, there in places.items():
            if there and place not in allowed:
                out.append(Violation("misplaced", job, f"{state} but in the {place}"))
        if job in snap.kills and state not in _LEASED:
            out.append(Violation("kill-of-unleased", job, f"kill request for a {state} job"))
    for name, entries in (
        ("lease", snap.leases),
        ("back-off", snap.delayed),
        ("releasing set", snap.releasing),
        ("kill request", snap.kills),
    ):
        for job in entries - set(snap.records) - set(snap.unreadable):
            out.append(Violation("entry-without-record", job, f"{name} of an unknown job"))


def _task_queues(snap: _Snapshot, out: list[Violation]) -> None:
    """Definitions, pools, pool stamps, emptied marks, largest values and the pools' heads indexes agree."""
    for tq, entries in snap.tqs.items():
        if not entries:
            continue
        if tq not in snap.defs:
            out.append(Violation("queue-without-definition", tq, f"{len(entries)} members"))
        if tq not in snap.poolstamp:
            out.append(Violation("queue-without-pool", tq, "its SubmitPool was never computed"))
        if tq in snap.tqempty:
            out.append(Violation("nonempty-marked-empty", tq, f"{len(entries)} members, in tqempty"))
        largest = [int(x) for x in snap.tqmax[tq].split(":")] if tq in snap.tqmax else None
        for member, _ in entries:
            found = _MEMBER.match(member)
            if not found:
                continue
            rec = snap.records.get(found.group(1), {})
            wall = _WALL.search(str(rec.get("r", "")))
            asks = [*(int(found.group(i)) for i in (2, 3, 4)), int(wall.group(1)) if wall else 0]
            if largest is None or any(a > b for a, b in zip(asks, largest, strict=True)):
                out.append(
                    Violation("largest-below-member", tq, f"tqmax {snap.tqmax.get(tq)!r} < {asks} of {member!r}")
                )
                break
    for tq in snap.defs:
        if not snap.tqs.get(tq) and tq not in snap.tqempty:
            out.append(Violation("empty-not-marked", tq, "empty, with a definition, but not in tqempty: never cleaned"))
    for tq in snap.tqempty - snap.defs:
        out.append(Violation("marked-without-definition", tq, "in tqempty without a definition"))
    for tq, queues in snap.pools.items():
        if tq not in snap.defs:
            out.append(Violation("pool-without-definition", tq, f"pool {sorted(queues)}"))
        for queue in queues:
            if tq not in snap.indexes.get(queue, {}):
                out.append(Violation("pool-not-indexed", tq, f"queue {queue} of its pool does not index it"))
    for queue, index in snap.indexes.items():
        for tq in index:
            if queue not in snap.pools.get(tq, set()):
                out.append(Violation("index-outside-pool", tq, f"indexed by {queue}, not in its pool"))


def _work(snap: _Snapshot, out: list[Violation]) -> None:
    """The outstanding-work counter is the sum of cpu x ceil(ete) over unfinished jobs with a member (not
    checked while a record cannot be read: its share is unknown)."""
    if snap.unreadable:
        return
    total = 0
    for rec in snap.records.values():
        tail = rec.get("mt")
        if rec["s"] in _FINAL or not isinstance(tail, str):
            continue
        parts = tail.split(":")
        cpu = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 1
        total += cpu * math.ceil(float(rec.get("e") or 0))
    if int(snap.work or 0) != total:
        out.append(Violation("work-counter", "work", f"{snap.work!r} stored, {total} outstanding"))


#: Fields of a pilot's record (heartbeat.lua) and of a request's (submit.lua) that the control plane reads as
#: numbers (matcher.request_eta, matcher.cli.run, matcher.status): None where null is allowed too.
_PILOT_NUMBERS = {
    "cores": False,
    "mem": False,
    "tmp": False,
    "used_cpu": False,
    "used_mem": False,
    "used_tmp": False,
    "started": False,
    "pid": False,
    "processed": False,
    "time_left": True,
    "free_cpu": True,
    "free_mem": True,
    "free_tmp": True,
}
_REQUEST_NUMBERS = {
    "priority": False,
    "ts": False,
    "eta": False,
    "cp": False,
    "load": False,
    "cores": False,
    "n": False,
    "first": False,
    "last": False,
}


def _records_read_by_the_control_plane(snap: _Snapshot, out: list[Violation]) -> None:
    """Pilot and request records are JSON objects whose numeric fields hold numbers (a text there would fail
    every reader of the pilots or the requests, not only the one it concerns)."""
    for kind, records, numbers in (
        ("pilot-record", snap.pilots, _PILOT_NUMBERS),
        ("request-record", snap.requests, _REQUEST_NUMBERS),
    ):
        for name, raw in records.items():
            try:
                rec = json.loads(raw)
            except ValueError:
                rec = None
            if not isinstance(rec, dict):
                out.append(Violation(kind, name, f"not a JSON object: {raw[:80]!r}"))
                continue
            for key, nullable in numbers.items():
                value = rec.get(key, 0)
                number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                if key == "first" or key == "last":
                    number = (isinstance(value, str) and value.isdigit()) or value == 0
                if not number and not (nullable and value is None):
                    out.append(Violation(kind, name, f"{key} is {value!r}"))


def heads_violations(client: redis.Redis, keys: Keys, pools: Mapping[str, Iterable[str]]) -> list[Violation]:
    """The heads hash holds each non-empty task queue's real head exactly and a floor under all its members;
    every queue floor is under all members of the task queues whose pool holds that queue; no index score is
    above its task queue's real head (``pools``: task queue -> its SubmitPool)."""
    out: list[Violation] = []
    members: dict[str, list[tuple[int, ...]]] = {}
    for tq, pool in pools.items():
        zset: Any = client.zrange(keys.tq(tq), 0, -1, withscores=True)
        entry = client.hget(keys.heads, tq)
        members[tq] = [tuple(int(x) for x in found.groups()[1:]) for m, _ in zset if (found := _MEMBER.match(_text(m)))]
        if not zset:
            if entry is not None:
                out.append(Violation("heads-of-empty", tq, f"heads entry {_text(entry)!r}"))
            continue
        head, score = _text(zset[0][0]), float(zset[0][1])
        parts = _text(entry).split(" ") if entry is not None else []
        if len(parts) != 3 or _number(parts[0]) != score or parts[1] != head:
            out.append(Violation("heads-not-head", tq, f"entry {parts} for head {head!r} at {score!r}"))
            continue
        low = [_number(x) for x in parts[2].split(":")]
        if len(low) != 4 or any(lo is None or any(lo > v[i] for v in members[tq]) for i, lo in enumerate(low)):
            out.append(Violation("heads-floor-above", tq, f"floor {parts[2]} above a member"))
        for queue in pool:
            index = client.zscore(keys.qheads(queue), tq)
            if index is None or index > score:
                out.append(Violation("index-above-head", tq, f"index of {queue} {index!r} > head {score!r}"))
    for queue in {q for pool in pools.values() for q in pool}:
        floor = client.hget(keys.qfloor, queue)
        if floor is None:
            continue
        low = [_number(x) for x in _text(floor).split(":")]
        reach = [v for tq, pool in pools.items() if queue in pool for v in members[tq]]
        if len(low) != 4 or any(lo is None or any(lo > v[i] for v in reach) for i, lo in enumerate(low)):
            out.append(Violation("queue-floor-above", queue, f"floor {_text(floor)} above a member it reaches"))
    return out


def _reservations(client: redis.Redis, keys: Keys, snap: _Snapshot, out: list[Violation]) -> None:
    """Each reservation (``keys.resv``, match.lua) can be read, belongs to a queue with a heads index, names
    a job that exists with the cores, memory and scratch it holds for, and starts no earlier than it was made.
    One whose job is no longer its task queue's head may remain: the next match of its queue drops it."""
    good, bad = read_reservations(client, keys)
    out += [Violation("resv-unreadable", queue, text[:80]) for queue, text in bad.items()]
    for r in good:
        if r.queue not in snap.indexes:
            out.append(Violation("resv-no-queue", r.queue, f"no heads index for its reservation of job {r.job}"))
        rec = snap.records.get(r.job)
        if rec is None:
            out.append(Violation("resv-no-job", r.queue, f"reserved job {r.job} has no readable record"))
            continue
        tail = _MEMBER.match(r.job + str(rec.get("mt", "")))
        if tail and tuple(map(int, tail.groups()[1:4])) != (r.cpu, r.mem, r.tmp):
            out.append(
                Violation(
                    "resv-shape",
                    r.queue,
                    f"holds {r.cpu}:{r.mem}:{r.tmp} for job {r.job}, whose member is {r.job}{rec.get('mt')}",
                )
            )
        if r.start < r.at or not r.pilot:
            out.append(Violation("resv-start", r.queue, f"start {r.start} before it was made ({r.at}), or no pilot"))


def fair_violations(records: Mapping[str, Mapping[str, Any]], fair: Mapping[str, str]) -> list[Violation]:
    """The running counters of the fair hash (``keys.fair``) against the leases that count in them.

    A job leased while a shares policy was stored carries the pilot's queue (``fq``): its cores count in
    ``r:<group>``, ``r:<group>.<owner>``, ``c:<group>@<site>`` and ``c:<group>@<queue>``, and the job in
    ``n:<type>``, from its lease to its end (``match.lua``, ``fair_end`` in ``_lib.lua``); nothing else does.
    """
    want: dict[str, int] = defaultdict(int)
    for job, rec in records.items():
        queue = rec.get("fq")
        if rec.get("s") not in _LEASED or not isinstance(queue, str):
            continue
        found = re.match(r"^[^.]+\.([^.]+)\.([^.]+)\.?(.*)$", str(rec.get("t", "")))
        group, owner, job_type = found.groups() if found else ("default", "default", "")
        member = _MEMBER.match(job + str(rec.get("mt", "")))
        cpu = int(member.group(2)) if member else 0
        for name in (f"r:{group}", f"r:{group}.{owner}", f"c:{group}@{queue.split('/')[0]}", f"c:{group}@{queue}"):
            want[name] += cpu
        if job_type:
            want[f"n:{job_type}"] += 1
    out = []
    for name in sorted(set(want) | {k for k in fair if k[:2] in ("r:", "c:", "n:")}):
        held = _number(fair.get(name, 0))
        if held != want.get(name, 0):
            out.append(
                Violation("fair-counter", name, f"holds {fair.get(name, 0)}, the leases make {want.get(name, 0)}")
            )
    return out
