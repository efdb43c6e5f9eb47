"""Every Redis key name Pilotfish uses, built in this one module.

All keys of one community (VO) carry the Redis Cluster hash tag ``{vo}``, so every Lua script's keys
land in one slot and the store can be partitioned across a Redis Cluster by community without a
rewrite. ``tests/test_keys.py`` checks it for every key builder.

| key | type | content |
|---|---|---|
| ``P:{vo}:jobs`` | hash | job id → job record (JSON) |
| ``P:{vo}:seq`` | string | counter for job ids |
| ``P:{vo}:t:<tq>`` | zset | one task queue: member ``id:cpu:mem:tmp:need`` (``records.time_needed``), score = urgency |
| ``P:{vo}:tqdefs`` | hash | task-queue id → canonical requirements (JSON) |
| ``P:{vo}:tqempty`` | zset | task-queue id → time it became empty (cleaned after a grace period) |
| ``P:{vo}:tqmax`` | hash | task-queue id → ``cpu:mem:tmp:wall``: the largest exact values of the jobs that entered it
since it was last empty (what the SubmitPool refresh judges eligibility on) |
| ``P:{vo}:pool:<tq>`` | set | SubmitPool: catalog queues eligible for a task queue |
| ``P:{vo}:poolstamp`` | zset | task-queue id → time its SubmitPool was last computed |
| ``P:{vo}:qh:<queue>`` | zset | heads index of a catalog queue: task-queue id → head score (never above the real one) |
| ``P:{vo}:heads`` | hash | task-queue id → ``"<score> <member> <floor>"``: its head and a floor (+ a sentinel field) |
| ``P:{vo}:qfloor`` | hash | catalog queue → floor ``cpu:mem:tmp:need`` of every job of the task queues it indexes |
| ``P:{vo}:leases`` | zset | job id → lease expiry (unix seconds) |
| ``P:{vo}:delayed`` | zset | job id → time a requeued job may be matched again (back-off) |
| ``P:{vo}:kills`` | hash | job id → reason of a pending kill request |
| ``P:{vo}:parked`` | hash | job id → ``{"why", "t", "m", "at"}`` (JSON): taken out of its task queue because its
member or record could not be read (by match, or by reap for a leased or delayed job) |
| ``P:{vo}:releasing`` | zset | job id → time released, waiting for the caller to evaluate its requirements |
| ``P:{vo}:donelog`` | zset | job id → end time of successful jobs (ETE learning, re-pressure) |
| ``P:{vo}:requests`` | hash | request id → request record (JSON) |
| ``P:{vo}:etekeys`` | hash | job key → last successful run time (seconds) |
| ``P:{vo}:eterules`` | hash | rule → ``"n mean"`` of its successful run times |
| ``P:{vo}:byrule:<rule>`` | set | unfinished jobs of a rule (re-pressure finds them when the rule's mean moves) |
| ``P:{vo}:work`` | string | outstanding core-seconds of unfinished jobs (the load in a request's ETA) |
| ``P:{vo}:wake`` | channel | published when work enters a task queue: idle pilots wait on it |
| ``P:{vo}:release`` | channel | job ids (space-separated) ``complete`` put in the releasing set: the control plane
evaluates them at once (``matcher.releaser``) |
| ``P:{vo}:ctl:<pilot>`` | channel | a kill or stop request for this pilot was stored: it heartbeats at once |
| ``P:{vo}:stops`` | hash | pilot id → stop request (JSON: ``mode`` release / drain / shutdown, ``reason``, ``at``) |
| ``P:{vo}:lock:<name>`` | string | a periodic task's lock (token, with an expiry) |
| ``P:{vo}:alive:<component>`` | zset | ``<component>@<host>`` → last beat, written by that process itself |
| ``P:{vo}:cursor`` | hash | periodic tasks' progress: ``repressure`` (how far re-pressure read the done log),
``repressure:rule:<rule>`` (the rule mean it last propagated), ``reap:run`` (the server run the reaper last
saw) and ``reap:grace`` (no lease requeued before this time: a restart's grace) |
| ``P:{vo}:pilots`` | hash | pilot id → pilot record (JSON) |
| ``P:{vo}:provisioned`` | hash | director's pilots: ``queue|kind|batch id`` → record (JSON) |
| ``P:{vo}:pilotseen`` | zset | pilot id → last heartbeat |
| ``P:{vo}:shares`` | hash | fair-share policy (``taskqueues.fairshare``): ``halflife``, ``s:<group>`` /
``s:<group>.<owner>`` shares, ``l:<group>@<* or site or queue>`` core limits, ``t:<type>`` job limits, and
``json``: all of them as one JSON object (what match.lua reads) |
| ``P:{vo}:fair`` | hash | fair-share state: ``u:<account>`` → ``"<decayed core-seconds> <at>"``, ``r:<account>``
running cores (account = group or ``group.owner``), ``c:<group>@<site or queue>`` running cores there,
``n:<type>`` running jobs of a type; kept by match.lua and ``fair_end`` (``_lib.lua``) |
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError

DEFAULT_PREFIX = "pf"
DEFAULT_VO = "default"


@dataclass(frozen=True)
class Keys:
    """Key names of one community under one prefix."""

    prefix: str = DEFAULT_PREFIX
    vo: str = DEFAULT_VO

    def __post_init__(self) -> None:
        for label, value in (("prefix", self.prefix), ("vo", self.vo)):
            # Glob characters would widen the pilots' ACL key pattern ~<prefix>:{<vo>}:* beyond one community.
            if not value or any(c in value for c in "{}: \t\n*?[]\\"):
                raise ConfigError(f"{label} {value!r} must be non-empty, without braces, colons, blanks or glob "
                                  "characters (* ? [ ] \\)")

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.vo}}}"

    @property
    def jobs(self) -> str:
        return f"{self.base}:jobs"

    @property
    def seq(self) -> str:
        return f"{self.base}:seq"

    def tq(self, tq_id: str) -> str:
        return f"{self.base}:t:{tq_id}"

    @property
    def tq_prefix(self) -> str:
        return f"{self.base}:t:"

    @property
    def tqdefs(self) -> str:
        return f"{self.base}:tqdefs"

    @property
    def tqempty(self) -> str:
        return f"{self.base}:tqempty"

    def pool(self, tq_id: str) -> str:
        return f"{self.base}:pool:{tq_id}"

    @property
    def pool_prefix(self) -> str:
        return f"{self.base}:pool:"

    @property
    def tqmax(self) -> str:
        return f"{self.base}:tqmax"

    @property
    def poolstamp(self) -> str:
        return f"{self.base}:poolstamp"

    def qheads(self, queue: str) -> str:
        return f"{self.base}:qh:{queue}"

    @property
    def qheads_prefix(self) -> str:
        return f"{self.base}:qh:"

    @property
    def heads(self) -> str:
        return f"{self.base}:heads"

    @property
    def qfloor(self) -> str:
        return f"{self.base}:qfloor"

    @property
    def leases(self) -> str:
        return f"{self.base}:leases"

    @property
    def delayed(self) -> str:
        return f"{self.base}:delayed"

    @property
    def kills(self) -> str:
        return f"{self.base}:kills"

    @property
    def parked(self) -> str:
        return f"{self.base}:parked"

    @property
    def releasing(self) -> str:
        return f"{self.base}:releasing"

    @property
    def donelog(self) -> str:
        return f"{self.base}:donelog"

    @property
    def requests(self) -> str:
        return f"{self.base}:requests"

    @property
    def etekeys(self) -> str:
        return f"{self.base}:etekeys"

    @property
    def eterules(self) -> str:
        return f"{self.base}:eterules"

    def byrule(self, rule: str) -> str:
        return f"{self.base}:byrule:{rule}"

    @property
    def work(self) -> str:
        return f"{self.base}:work"

    @property
    def wake(self) -> str:
        return f"{self.base}:wake"

    @property
    def release_channel(self) -> str:
        return f"{self.base}:release"

    def pilot_channel(self, pilot: str) -> str:
        return f"{self.base}:ctl:{pilot}"

    @property
    def stops(self) -> str:
        return f"{self.base}:stops"

    def lock(self, name: str) -> str:
        return f"{self.base}:lock:{name}"

    def alive(self, component: str) -> str:
        return f"{self.base}:alive:{component}"

    @property
    def cursor(self) -> str:
        return f"{self.base}:cursor"

    @property
    def pilots(self) -> str:
        return f"{self.base}:pilots"

    @property
    def provisioned(self) -> str:
        return f"{self.base}:provisioned"

    @property
    def pilotseen(self) -> str:
        return f"{self.base}:pilotseen"

    @property
    def shares(self) -> str:
        return f"{self.base}:shares"

    @property
    def fair(self) -> str:
        return f"{self.base}:fair"
