"""Every Redis key name Pilotfish uses, built in this one module.

All keys of one community (VO) carry the Redis Cluster hash tag ``{vo}``, so every Lua script's keys
land in one slot and the store can be partitioned across a Redis Cluster by community without a
rewrite (:mod:`taskqueues.store.cluster`). ``tests/test_keys.py`` checks it for every key builder.

| key | type | content |
|---|---|---|
| ``P:{vo}:jobs`` | hash | job id → job record (JSON) |
| ``P:{vo}:seq`` | string | counter for job ids |
| ``P:{vo}:idrange`` | hash | what keeps job ids unique across a failover (``submit.lua``): ``ceil`` (no id above it is
given; raised past a replica-acknowledged ``pending``), ``epoch`` (the replication id of the primary that gave
the last ids: another one starts at ``ceil``) |
| ``P:{vo}:t:<tq>`` | zset | one task queue: member ``id:cpu:mem:tmp:need`` (``records.time_needed``), score = urgency |
| ``P:{vo}:tqdefs`` | hash | task-queue id → canonical requirements (JSON) |
| ``P:{vo}:tqempty`` | zset | task-queue id → time it became empty (cleaned after a grace period) |
| ``P:{vo}:tqmax`` | hash | task-queue id → ``cpu:mem:tmp:wall``: the largest exact values of the jobs that entered it
since it was last empty (what the SubmitPool refresh judges eligibility on) |
| ``P:{vo}:pool:<tq>`` | set | SubmitPool: catalog queues eligible for a task queue |
| ``P:{vo}:poolstamp`` | zset | task-queue id → time its SubmitPool was last computed |
| ``P:{vo}:qh:<queue>`` | zset | heads index of a catalog queue: task-queue id → head score (never above the real one) |
| ``P:{vo}:gh:<queue>`` | set | the groups (fair-share accounts' first part) of the task queues the heads index of
``<queue>`` lists, and ``~`` (so it exists once built): kept only while the community has a shares policy |
| ``P:{vo}:gh:<queue>:<group>`` | zset | the heads index of ``<queue>`` restricted to one group's task queues, with
the same scores (what a fair-share match walks, group by group: ``match.lua``); ``_lib.lua``'s ``index_head``
keeps it wherever the heads index changes |
| ``P:{vo}:ghq`` | set | the catalog queues whose heads index by group is built (match.lua builds one the first time a
policy match reads it; ``store.shares.publish(None)`` drops them all) |
| ``P:{vo}:heads`` | hash | task-queue id → ``"<score> <member> <floor>"``: its head and a floor (+ a sentinel field,
and :data:`MATCHED_COUNT`: the jobs match leased, counted with the heads it writes) |
| ``P:{vo}:qfloor`` | hash | catalog queue → floor ``cpu:mem:tmp:need`` of every job of the task queues it indexes;
its field ``""`` (:data:`POLICY_MARK`) holds the shares policy, packed (``Policy.packed``), while the community
has one (match reads both at once) |
| ``P:{vo}:leases`` | zset | job id → lease expiry (unix seconds) |
| ``P:{vo}:delayed`` | zset | job id → time a requeued job may be matched again (back-off) |
| ``P:{vo}:kills`` | hash | job id → reason of a pending kill request |
| ``P:{vo}:parked`` | hash | job id → ``{"why", "t", "m", "at"}`` (JSON): taken out of its task queue because its
member or record could not be read (by match, or by reap for a leased or delayed job) |
| ``P:{vo}:releasing`` | zset | job id → time released, waiting for the caller to evaluate its requirements |
| ``P:{vo}:donelog`` | zset | job id → end time of successful jobs (ETE learning, re-pressure) |
| ``P:{vo}:requests`` | hash | request id → request record (JSON) |
| ``P:{vo}:etekeys`` | hash | job key → last successful run time (seconds) |
| ``P:{vo}:eterules`` | hash | rule → ``"n mean var hn hlog hvar"``: its successful run times, and their log
ratio to the jobs' hints (:class:`taskqueues.ete.RuleStats`) |
| ``P:{vo}:byrule:<rule>`` | set | unfinished jobs of a rule (re-pressure finds them when the rule's mean moves) |
| ``P:{vo}:work`` | string | outstanding core-seconds of unfinished jobs (the load in a request's ETA) |
| ``P:{vo}:wake:<queue>:<shard>`` | channel | one of a catalog queue's :data:`WAKE_SHARDS` wake channels: a pilot
listens on its shard (:func:`wake_shard`) while its last match found nothing; a call that enqueues jobs publishes
on the shards of each queue they are eligible in until as many idle pilots heard it as jobs entered (``_lib.lua``'s
``wake``) |
| ``P:{vo}:release`` | channel | job ids (space-separated) ``complete`` put in the releasing set: the control plane
evaluates them at once (``matcher.release_listener``) |
| ``P:{vo}:ctl:<pilot>`` | channel | a kill or stop request for this pilot was stored: it heartbeats at once |
| ``P:{vo}:stops`` | hash | pilot id → stop request (JSON: ``mode`` release / drain / shutdown, ``reason``, ``at``) |
| ``P:{vo}:lock:<name>`` | string | a periodic task's lock (token, with an expiry) |
| ``P:{vo}:alive:<component>`` | zset | ``<component>@<host>`` → last beat, written by that process itself |
| ``P:{vo}:cursor`` | hash | periodic tasks' progress: ``repressure`` (how far re-pressure read the done log),
``repressure:rule:<rule>``, ``repressure:factor:<rule>`` and ``repressure:wide:<rule>`` (the rule's mean,
hint factor and whether it was too wide to override hints, as last propagated), ``reap:run`` (the server run
the reaper last saw) and ``reap:grace`` (no lease requeued before this time: a restart's grace) |
| ``P:{vo}:pilots`` | hash | pilot id → pilot record (JSON) |
| ``P:{vo}:provisioned`` | hash | director's pilots: ``queue|kind|batch id`` → record (JSON) |
| ``P:{vo}:pilotseen`` | zset | pilot id → last heartbeat |
| ``P:{vo}:ended`` | zset | job id → end time of every job in a final state (done, failed, cancelled, dep-failed),
written by ``_lib.lua``'s ``save`` wherever a final state is stored: ``pilotfish jobs`` pages finished jobs from
it, latest first. One entry per finished job record: it is bounded by the jobs hash, and whatever forgets a job
record removes its entry |
| ``P:{vo}:endedby`` | zset | the history index (``_lib.lua``'s ``index_history``, read by ``store.history``): all
scores 0, two entries per ended job, ``o:<owner>:<end>:<id>:<state>:<group>`` and
``g:<group>:<end>:<id>:<state>:<owner>`` (``<end>`` as ``%014.3f``, so text order is time order): ``pilotfish history
--owner/--group`` reads a time window of one owner or group with ZRANGEBYLEX. Kept where ``ended`` is, forgotten
with the record |
| ``P:{vo}:notifywatch`` | zset | request id → submission time of each request with a webhook (``notify``) whose end
was not seen yet (``submit.lua`` adds it; ``notify.lua`` takes it out when the request has ended) |
| ``P:{vo}:notify`` | hash | request id → its notification (JSON ``{"url", "state", "attempts", "error", "at", "next",
"sent", "ended", "token"}``: ``taskqueues.store.notices``) |
| ``P:{vo}:notifyq`` | zset | request id → when its notification is due, or until when a sender's claim holds it |
| ``P:{vo}:blocked`` | zset | job id → submission time of every blocked job (waiting for its dependencies), kept by
``_lib.lua``'s ``save`` as states change: ``pilotfish jobs`` pages blocked jobs from it |
| ``P:{vo}:held`` | zset | job id → time it was held, of every held job (``pilotfish hold``), kept by ``_lib.lua``'s
``save`` as states change: ``pilotfish jobs`` pages held jobs from it |
| ``P:{vo}:events`` | hash | job id → its state changes, one JSON object a line (``{"t", "f", "s", "by", "why", "a",
"p", "x"}``: time, from, to, who, reason, attempt, pilot, exit), appended by ``_lib.lua``'s ``save`` and capped
(``EVENTS_CAP``); what the record tells is read from it (its submission, a lease under way or ended by its
pilot's report); forgotten with the record |
| ``P:{vo}:log:<job>`` | hash | a job's payload output as its pilots shipped it (``ship_log.lua``): per attempt
``<a>:out`` / ``<a>:err`` the last ``output_cap`` bytes of the stream (raw bytes), ``<a>:out:n`` / ``<a>:err:n``
how many bytes the stream had in all, ``<a>:meta`` JSON ``{"pilot", "host", "dir", "live", "at"}`` (where the
pilot keeps the files; ``live`` 1 while the payload runs). Written only for a job whose record exists, at most
``output_cap`` bytes per stream and attempt; it lives as long as the job record and goes with it |
| ``P:{vo}:stats`` | hash | counters the scripts keep, one HINCRBY per event (``store.counters`` names the fields):
jobs ended by state, lease expiries, retries, jobs matched, blocked jobs (in all and per task queue), director
submissions and batch-system errors per backend, the pilots' match-latency histogram |
| ``P:{vo}:resv`` | hash | catalog queue → its one reservation (match.lua, EASY backfill): ``"<state r|x> <tq> <job>
<score> <cpu> <mem> <tmp> <need> <start> <at> <pilot>"``, the job a pilot holds cores for and when it should start
(``x``: expired, held no more) |
| ``P:{vo}:shares`` | hash | fair-share policy (``taskqueues.store.fairshare``): ``halflife``, ``s:<group>`` /
``s:<group>.<owner>`` shares, ``l:<group>@<* or site or queue>`` core limits, ``t:<type>`` job limits, and
``json``: all of them as one JSON object (what match.lua reads) |
| ``P:{vo}:fair`` | hash | fair-share state: ``u:<account>`` → ``"<decayed core-seconds> <at>"``, ``r:<account>``
running cores (account = group or ``group.owner``), ``c:<group>@<site or queue>`` running cores there,
``n:<type>`` running jobs of a type; kept by match.lua and ``fair_end`` (``_lib.lua``) |
| ``P:auth:{vo}:tokens`` | hash | API token id → token record (JSON: user, groups, role, sha256 of the secret,
created, expires, last use, revoked; ``taskqueues.store.tokens``). Outside ``P:{vo}:*``: the pilots' ACL user
may not read or write it |
| ``P:auth:{vo}:audit`` | stream | who did what through the API or a token command (capped; ``store.audit``) |
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from ..errors import ConfigError

DEFAULT_PREFIX = "pf"
DEFAULT_VO = "default"
#: The qfloor hash's field that marks a community with a shares policy (a queue is never named ""): match.lua
#: reads it with the queue's floor, so a community without a policy pays no read for it.
POLICY_MARK = ""
#: The heads hash's field where match.lua counts the jobs it leased (the ``matched`` counter of
#: :mod:`taskqueues.store.stats`): read with the first page of heads and written with them, it costs a call no
#: command of its own. Never a task-queue id (those are hashes, with an account).
MATCHED_COUNT = "~matched"
#: Wake channels per catalog queue: a call that enqueues k jobs wakes the idle pilots of as many shards as it
#: takes to reach k of them (about k + idle/WAKE_SHARDS), not every idle pilot of the queue; and when no pilot
#: is idle it costs this many PUBLISH of nobody (~1 us each) per queue it enqueued for (issue 31).
WAKE_SHARDS = 16


def wake_shard(pilot: str) -> int:
    """The wake shard a pilot listens on (``Keys.wake_channel``): spread by a hash of its name."""
    return zlib.crc32(pilot.encode()) % WAKE_SHARDS


#: An account's part of a task-queue id: ``<hash>.<group>.<owner>[.<type>]`` (the shares policy's accounts).
DEFAULT_GROUP = "default"
DEFAULT_OWNER = "default"
_ACCOUNT_RE = re.compile(r"^[^.]+\.([^.]+)\.([^.]+)\.?(.*)$")


def account_tq(tq_id: str, group: str, owner: str, job_type: str = "") -> str:
    """The task queue of a requirement class (``tq_id``) for an account, and a job type (its rule)."""
    return f"{tq_id}.{group}.{owner}" + (f".{job_type}" if job_type else "")


def account_of(tq_id: str) -> tuple[str, str, str]:
    """(group, owner, type) of a task queue; ``default`` and no type for one without an account."""
    m = _ACCOUNT_RE.match(tq_id)
    if not m:
        return DEFAULT_GROUP, DEFAULT_OWNER, ""
    return m.group(1), m.group(2), m.group(3)


@dataclass(frozen=True)
class Keys:
    """Key names of one community under one prefix."""

    prefix: str = DEFAULT_PREFIX
    vo: str = DEFAULT_VO

    def __post_init__(self) -> None:
        for label, value in (("prefix", self.prefix), ("vo", self.vo)):
            # Glob characters would widen the pilots' ACL key pattern ~<prefix>:{<vo>}:* beyond one community.
            if not value or any(c in value for c in "{}: \t\n*?[]\\"):
                raise ConfigError(
                    f"{label} {value!r} must be non-empty, without braces, colons, blanks or glob "
                    "characters (* ? [ ] \\)"
                )

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.vo}}}"

    @property
    def jobs(self) -> str:
        return f"{self.base}:jobs"

    @property
    def seq(self) -> str:
        return f"{self.base}:seq"

    @property
    def idrange(self) -> str:
        return f"{self.base}:idrange"

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

    def gheads(self, queue: str, group: str | None = None) -> str:
        """A catalog queue's heads index by group (issue 31): the set of its groups, or one group's zset."""
        return f"{self.base}:gh:{queue}" + ("" if group is None else f":{group}")

    @property
    def gheads_prefix(self) -> str:
        return f"{self.base}:gh:"

    @property
    def gindexed(self) -> str:
        """The set of the catalog queues whose heads index by group is built."""
        return f"{self.base}:ghq"

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
        """What every wake channel of the community starts with (``wake_channel``)."""
        return f"{self.base}:wake:"

    def wake_channel(self, queue: str, shard: int) -> str:
        """One of the ``WAKE_SHARDS`` wake channels of a catalog queue (``wake_shard`` names a pilot's)."""
        return f"{self.wake}{queue}:{shard}"

    def pilot_wake_channel(self, queue: str, pilot: str) -> str:
        """The wake channel a pilot of ``queue`` listens on while idle."""
        return self.wake_channel(queue, wake_shard(pilot))

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
    def ended(self) -> str:
        return f"{self.base}:ended"

    @property
    def endedby(self) -> str:
        return f"{self.base}:endedby"

    @property
    def notifywatch(self) -> str:
        return f"{self.base}:notifywatch"

    @property
    def notify(self) -> str:
        return f"{self.base}:notify"

    @property
    def notifyq(self) -> str:
        return f"{self.base}:notifyq"

    @property
    def blocked(self) -> str:
        return f"{self.base}:blocked"

    def log(self, job: str) -> str:
        return f"{self.base}:log:{job}"

    @property
    def held(self) -> str:
        return f"{self.base}:held"

    @property
    def events(self) -> str:
        return f"{self.base}:events"

    @property
    def stats(self) -> str:
        return f"{self.base}:stats"

    @property
    def resv(self) -> str:
        return f"{self.base}:resv"

    @property
    def shares(self) -> str:
        return f"{self.base}:shares"

    @property
    def fair(self) -> str:
        return f"{self.base}:fair"

    @property
    def auth_base(self) -> str:
        """Keys of the API's tokens and audit: same hash tag, outside the pilots' ``<prefix>:{<vo>}:*``."""
        return f"{self.prefix}:auth:{{{self.vo}}}"

    @property
    def tokens(self) -> str:
        return f"{self.auth_base}:tokens"

    @property
    def audit(self) -> str:
        return f"{self.auth_base}:audit"


def lua_names() -> dict[str, str]:
    """The key suffixes the Lua scripts append to their key base (ARGV[1] ``"<prefix>:{<vo>}:"``), by the Lua
    constant that holds each, rendered by the builders above so that a name exists once. ``scripts`` puts the
    constants a script uses in front of it."""
    k = Keys()
    cut = len(k.base) + 1
    return {
        name: key[cut:]
        for name, key in (
            ("K_JOBS", k.jobs),
            ("K_TQ", k.tq_prefix),
            ("K_TQDEFS", k.tqdefs),
            ("K_TQEMPTY", k.tqempty),
            ("K_POOL", k.pool_prefix),
            ("K_TQMAX", k.tqmax),
            ("K_QH", k.qheads_prefix),
            ("K_HEADS", k.heads),
            ("K_GH", k.gheads_prefix),
            ("K_GHQ", k.gindexed),
            ("K_QFLOOR", k.qfloor),
            ("K_LEASES", k.leases),
            ("K_PARKED", k.parked),
            ("K_DELAYED", k.delayed),
            ("K_RELEASING", k.releasing),
            ("K_WORK", k.work),
            ("K_BYRULE", k.byrule("")),
            ("K_WAKE", k.wake),
            ("K_RELEASE", k.release_channel),
            ("K_CTL", k.pilot_channel("")),
            ("K_ENDED", k.ended),
            ("K_ENDEDBY", k.endedby),
            ("K_REQUESTS", k.requests),
            ("K_NOTIFYWATCH", k.notifywatch),
            ("K_NOTIFY", k.notify),
            ("K_NOTIFYQ", k.notifyq),
            ("K_BLOCKED", k.blocked),
            ("K_LOG", k.log("")),
            ("K_HELD", k.held),
            ("K_EVENTS", k.events),
            ("K_STATS", k.stats),
            ("K_RESV", k.resv),
            ("K_SHARES", k.shares),
            ("K_FAIR", k.fair),
        )
    }
