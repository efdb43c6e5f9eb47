"""Owners, groups, shares and running limits: many users on one system, none starving the others.

Every request carries an **owner** (a user) and a **group** (the account it is charged to). Both are
names of 1 to 64 letters, digits, ``_`` or ``-`` (no dot: a dot separates them in a task-queue id).
A job's task queue is its requirement class *for its account*: ``<hash>.<group>.<owner>[.<type>]``
(:func:`account_tq`), the job's type being its rule. Task queues of one requirement class but of
different accounts are different queues, as DIRAC's are (owner, group and job type are part of a
DIRAC task queue's definition), so every task-queue head belongs to one account and the match can
serve accounts without reading any job.

The **policy** (:class:`Policy`, read from a shares file by :func:`read_policy`, written to the
community's ``shares`` hash by :meth:`Shares.publish`) gives each group a share, optionally each owner of a
group a share inside it, and running limits: cores of a group overall, at a site or at a queue, and
jobs of a type. With no policy stored the match is today's, and nothing is counted.

The share rule, as ``match.lua`` applies it (and :func:`rank`, its Python reference, reads it): an
account's **effective usage** is ``E = U + R * tau``: ``R`` its running cores (leased or running jobs),
``U`` its core-seconds decayed with the half-life (``tau = half-life / ln 2``: ``dU/dt = R - U/tau``,
brought up to date lazily whenever ``R`` changes, so one small hash holds it whatever the number of
jobs). A pilot is served from the group with the lowest ``E / share`` that has a head that fits and
stays within the limits; inside it, when the group gives its owners shares, from the owner with the
lowest ``E / share``; then, as before, the most urgent head. In a steady state ``U = R * tau``, so
groups run cores in proportion to their shares; after a burst a group's ``U`` stays high for about a
half-life, during which the others catch up (Slurm's fair-share factor ``2^(-usage/share)`` orders
groups the same way: it decreases as ``E / share`` grows).
"""

from __future__ import annotations

import getpass
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from ..errors import ConfigError, ValidationError
from ..units import parse_duration_s
from .gheads import group_heads_keys
from .guard import guarded
from .keys import DEFAULT_GROUP, DEFAULT_OWNER, POLICY_MARK, account_of
from .part import Part
from .records import text as _text

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
NAME_RULE = "1 to 64 letters, digits, '_' or '-', not starting with '-'"
#: Half-life of the decayed usage when the policy names none (seconds).
DEFAULT_HALFLIFE = 21600.0
_TYPE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_WHERE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*/[A-Za-z0-9][A-Za-z0-9._+-]*)?")


def check_name(value: object, what: str) -> str:
    """An owner or group name, or a ValidationError naming the bad value (``what``: "owner", "group")."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(f"{what} {value!r} is not a name: {NAME_RULE}", field=what)
    return value


def default_owner() -> str:
    """The local user, made a valid name (other characters become ``_``)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = DEFAULT_OWNER
    name = re.sub(r"[^A-Za-z0-9_-]", "_", user)[:64].lstrip("-")
    return name or DEFAULT_OWNER


def job_account(tq_id: str, request: Mapping[str, Any]) -> tuple[str, str]:
    """A job's (group, owner): from its task queue when that names an account, else from its request's
    record (a job not in a task queue yet: blocked, or waiting for its requirements to be evaluated)."""
    if "." in tq_id:
        group, owner, _ = account_of(tq_id)
        return group, owner
    return str(request.get("group") or DEFAULT_GROUP), str(request.get("owner") or DEFAULT_OWNER)


@dataclass(frozen=True)
class Policy:
    """Shares and limits of one community (see the module docstring and docs/user/shares.md)."""

    halflife: float = DEFAULT_HALFLIFE
    shares: Mapping[str, float] = field(default_factory=dict)
    owner_shares: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: (group, where) -> cores; where is "*" (every site), a site, or a queue "site/ce/queue"
    cores: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: job type (rule) -> running jobs
    jobs: Mapping[str, int] = field(default_factory=dict)
    default_share: float = 1.0
    #: The catch-up cap x >= 1, None for none: see :meth:`clamp`.
    catchup: float | None = None

    def clamp(self) -> tuple[float, float] | None:
        """The bounds (lo, hi) of a group's decayed usage in ranks, in units of its running cores times tau.

        In a steady state a group's decayed usage is R * tau. Without a cap, a group that was idle (or
        arrives late) has none and runs, against groups in a steady state, up to twice its share's rate
        until it has; against a group that ran more than its share before (whose usage is above R * tau),
        more still. With ``catchup = x`` the usage counts, in ranks only, as within R * tau * [1 - d, 1 + d],
        d = 2 (x - 1) / (x + 1): since groups are served to equal E / share, no group then runs more than x
        times another's cores per share, whatever their past: x = 1 is no memory at all (running shares),
        a larger x pays back more of the past. The decayed usage stored is the real one.
        """
        x = self.catchup
        if x is None:
            return None
        d = 2.0 * (x - 1.0) / (x + 1.0)
        return 1.0 - d, 1.0 + d

    def fields(self) -> dict[str, str]:
        """The ``shares`` hash that match.lua reads."""
        out = {"halflife": repr(float(self.halflife)), "s:*": repr(float(self.default_share))}
        if self.catchup is not None:
            out["catchup"] = repr(float(self.catchup))
        out.update({f"s:{g}": repr(float(s)) for g, s in self.shares.items()})
        out.update({f"s:{g}.{o}": repr(float(s)) for (g, o), s in self.owner_shares.items()})
        out.update({f"l:{g}@{w}": str(n) for (g, w), n in self.cores.items()})
        out.update({f"t:{t}": str(n) for t, n in self.jobs.items()})
        return out

    def packed(self) -> str:
        """The fields as match.lua reads them from the qfloor hash's policy mark: ``" name=value ... "`` (no name
        or value holds a blank or ``=``: names are checked by :func:`parse_policy`, values are numbers)."""
        return " " + " ".join(f"{name}={value}" for name, value in sorted(self.fields().items())) + " "

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Policy:
        """The policy a ``shares`` hash holds."""
        shares: dict[str, float] = {}
        owners: dict[tuple[str, str], float] = {}
        cores: dict[tuple[str, str], int] = {}
        jobs: dict[str, int] = {}
        halflife, default = DEFAULT_HALFLIFE, 1.0
        catchup: float | None = None
        for name, value in fields.items():
            kind, _, rest = name.partition(":")
            if name == "json":
                continue
            if name == "halflife":
                halflife = float(value)
            elif name == "catchup":
                catchup = float(value)
            elif name == "s:*":
                default = float(value)
            elif kind == "s" and "." in rest:
                group, owner = rest.split(".", 1)
                owners[(group, owner)] = float(value)
            elif kind == "s":
                shares[rest] = float(value)
            elif kind == "l":
                group, where = rest.split("@", 1)
                cores[(group, where)] = int(value)
            elif kind == "t":
                jobs[rest] = int(value)
        return cls(halflife, shares, owners, cores, jobs, default, catchup)

    def share(self, group: str) -> float:
        return self.shares.get(group, self.default_share)

    def owner_share(self, group: str, owner: str) -> float | None:
        """An owner's share inside its group; None when the group gives its owners none."""
        if not any(g == group for g, _ in self.owner_shares):
            return None
        return self.owner_shares.get((group, owner), self.owner_shares.get((group, "*"), 1.0))


def _number(value: object, where: str, *, whole: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
        or (whole and value != int(value))
    ):
        raise ConfigError(f"{where}: wants a {'whole ' if whole else ''}number above 0, got {value!r}")
    return float(value)


def _table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: wants a table, got {value!r}")
    return value


def parse_policy(data: Mapping[str, Any], source: str = "shares") -> Policy:
    """A policy from a parsed shares file; every refusal names the file and the key (docs/user/shares.md)."""
    for key in data:
        if key not in ("halflife", "catchup", "default_share", "groups", "types"):
            raise ConfigError(
                f"{source}: {key}: unknown key; a shares file has halflife, catchup, default_share, groups, types"
            )
    halflife = DEFAULT_HALFLIFE
    if "halflife" in data:
        raw = data["halflife"]
        try:
            halflife = float(parse_duration_s(raw, field="halflife"))
        except ValidationError as exc:
            raise ConfigError(f"{source}: halflife: {exc.problem}") from None
        if halflife <= 0:
            raise ConfigError(f"{source}: halflife: wants a duration above 0, got {raw!r}")
    catchup = None
    if "catchup" in data:
        catchup = _number(data["catchup"], f"{source}: catchup")
        if catchup < 1:
            raise ConfigError(f"{source}: catchup: wants a number of at least 1, got {data['catchup']!r}")
    default = _number(data.get("default_share", 1), f"{source}: default_share")
    shares: dict[str, float] = {}
    owners: dict[tuple[str, str], float] = {}
    cores: dict[tuple[str, str], int] = {}
    for group, spec in _table(data.get("groups", {}), f"{source}: groups").items():
        where = f"{source}: groups.{group}"
        try:
            check_name(group, "group")
        except ValidationError as exc:
            raise ConfigError(f"{where}: {exc.problem}") from None
        spec = _table(spec, where)
        for key in spec:
            if key not in ("share", "owners", "max_cores", "sites"):
                raise ConfigError(f"{where}.{key}: unknown key; a group has share, owners, max_cores, sites")
        shares[group] = _number(spec.get("share", default), f"{where}.share")
        for owner, share in _table(spec.get("owners", {}), f"{where}.owners").items():
            if owner != "*":
                try:
                    check_name(owner, "owner")
                except ValidationError as exc:
                    raise ConfigError(f"{where}.owners: {exc.problem}") from None
            owners[(group, owner)] = _number(share, f"{where}.owners.{owner}")
        if "max_cores" in spec:
            cores[(group, "*")] = int(_number(spec["max_cores"], f"{where}.max_cores", whole=True))
        for place, n in _table(spec.get("sites", {}), f"{where}.sites").items():
            if not _WHERE_RE.fullmatch(place):
                raise ConfigError(f'{where}.sites: {place!r} is neither a site nor a queue "site/ce/queue"')
            cores[(group, place)] = int(_number(n, f"{where}.sites.{place}", whole=True))
    jobs: dict[str, int] = {}
    for job_type, n in _table(data.get("types", {}), f"{source}: types").items():
        if not _TYPE_RE.fullmatch(job_type):
            raise ConfigError(f"{source}: types.{job_type}: a job type is a rule name")
        jobs[job_type] = int(_number(n, f"{source}: types.{job_type}", whole=True))
    return Policy(halflife, shares, owners, cores, jobs, default, catchup)


def read_policy(path: str | Path) -> Policy:
    """The policy of a shares file (TOML)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the shares file: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_policy(data, str(path))


@dataclass(frozen=True)
class FairState:
    """The fair hash read at one time: running cores, decayed usage and running counts."""

    fields: Mapping[str, str]
    now: float
    halflife: float
    clamp: tuple[float, float] | None = None  # Policy.clamp()

    def running(self, account: str) -> int:
        return int(float(self.fields.get(f"r:{account}", 0)))

    def count(self, name: str) -> int:
        return int(float(self.fields.get(name, 0)))

    def usage(self, account: str) -> float:
        """Effective usage E = U + R * tau of a group or ``group.owner`` at :attr:`now`, U clamped by the
        catch-up cap (:meth:`Policy.clamp`)."""
        tau = self.halflife / math.log(2)
        u, _, t = self.fields.get(f"u:{account}", "").partition(" ")
        used, at = (float(u), float(t)) if t else (0.0, self.now)
        r = self.running(account)
        k = math.exp(-max(self.now - at, 0.0) / tau)
        decayed = used * k + r * tau * (1 - k)
        if self.clamp is not None:
            decayed = min(max(decayed, r * tau * self.clamp[0]), r * tau * self.clamp[1])
        return decayed + r * tau


def rank(policy: Policy, state: FairState, tq_id: str) -> tuple[float, float]:
    """The rank match.lua gives a task queue's account: (group E / share, owner E / share or 0)."""
    group, owner, _ = account_of(tq_id)
    first = state.usage(group) / max(policy.share(group), 1e-9)
    inside = policy.owner_share(group, owner)
    second = state.usage(f"{group}.{owner}") / max(inside, 1e-9) if inside is not None else 0.0
    return first, second


def limit_hit(policy: Policy, state: FairState, tq_id: str, cpu: int, queue: str) -> str | None:
    """Which running limit leasing ``cpu`` cores of task queue ``tq_id`` to a pilot of ``queue`` would pass
    (with the numbers), or None."""
    group, _, job_type = account_of(tq_id)
    site = queue.split("/", 1)[0]
    checks = [
        ("*", state.running(group), f"group {group} runs {{n}} cores, its limit is {{m}}"),
        (
            site,
            state.count(f"c:{group}@{site}"),
            f"group {group} runs {{n}} cores at site {site}, its limit there is {{m}}",
        ),
        (
            queue,
            state.count(f"c:{group}@{queue}"),
            f"group {group} runs {{n}} cores at queue {queue}, its limit there is {{m}}",
        ),
    ]
    for where, n, text in checks:
        m = policy.cores.get((group, where))
        if m is not None and n + cpu > m:
            return text.format(n=n, m=m)
    m = policy.jobs.get(job_type) if job_type else None
    if m is not None and state.count(f"n:{job_type}") + 1 > m:
        return f"{state.count(f'n:{job_type}')} jobs of type {job_type} run, the limit is {m}"
    return None


class Shares(Part):
    """The community's shares policy and the fair hash the match keeps (``store.shares``)."""

    @guarded("storing the shares policy")
    def publish(self, policy: Policy | None) -> None:
        """Store ``policy`` as the community's (None: no policy, the match is strict urgency again)."""
        keys = self.keys

        def store(pipe: redis.client.Pipeline) -> None:
            # Without a policy nobody keeps the heads indexes by group: they go (store.gheads), in the same
            # transaction, which a match building one meanwhile (it adds to keys.gindexed) makes start over.
            stale = group_heads_keys(pipe, keys) if policy is None else []
            pipe.multi()
            pipe.delete(keys.shares)
            if policy is not None:
                fields = policy.fields()
                fields["json"] = json.dumps(fields, sort_keys=True)  # what an older match.lua reads: versions may mix
                pipe.hset(keys.shares, items=[x for pair in fields.items() for x in pair])
                # match.lua reads the policy only where this mark is, and reads it from the mark, packed (no
                # command of its own: it comes with the queue's floor); a mark "1" (older) sends it to json
                pipe.hset(keys.qfloor, POLICY_MARK, policy.packed())
            else:
                pipe.hdel(keys.qfloor, POLICY_MARK)
                pipe.delete(*stale)

        self.client.transaction(store, keys.gindexed)

    @guarded("reading the shares policy")
    def policy(self) -> Policy | None:
        """The community's policy, None when it has none."""
        raw = self.client.hgetall(self.keys.shares)
        return Policy.from_fields({_text(k): _text(v) for k, v in raw.items()}) if raw else None

    @guarded("reading the fair-share usage")
    def state(self, now: float, policy: Policy | None = None) -> FairState:
        """The fair hash at ``now``, read with ``policy``'s half-life and catch-up cap."""
        raw = self.client.hgetall(self.keys.fair)
        halflife = policy.halflife if policy else DEFAULT_HALFLIFE
        clamp = policy.clamp() if policy else None
        return FairState({_text(k): _text(v) for k, v in raw.items()}, now, halflife, clamp)
