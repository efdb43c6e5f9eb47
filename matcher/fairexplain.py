"""What shares and running limits do to one waiting job, with the numbers (``pilotfish explain``).

With a shares policy stored (:mod:`taskqueues.store.fairshare`), a waiting job may be held back by its group's
share (groups with a lower effective usage per share are served first, wherever their heads fit) or by a
running limit (its group's cores overall, at a site or a queue; its type's jobs). :func:`fair_view` reads
the policy, the fair hash and the heads indexes of the job's eligible queues (task queues, never jobs) and
says which, as :mod:`matcher.explain` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from taskqueues.store import Job, Policy, Store, account_of, limit_hit

from .job_release import account_of_job

__all__ = ["FairView", "fair_view", "group_table"]


@dataclass(frozen=True)
class GroupRow:
    """One group as the share rule sees it now."""

    group: str
    running: int
    usage: float
    """Effective usage, core-seconds (decayed usage plus running cores times the mean life)."""
    used: float
    """Its part of every listed group's effective usage (0..1)."""
    share: float
    """Its part of the listed groups' shares (0..1)."""
    rank: float
    """Effective usage / share: the lowest is served first."""


@dataclass(frozen=True)
class FairView:
    """The job's account, its group's standing, and the running limits that hold it, per eligible queue."""

    group: str
    owner: str
    groups: list[GroupRow] = field(default_factory=list)
    ahead: list[str] = field(default_factory=list)
    """Groups with waiting heads in the job's eligible queues that are served before its group."""
    limits: dict[str, str] = field(default_factory=dict)
    """Eligible queue -> the limit a lease there would pass, with the numbers."""

    def row(self, group: str) -> GroupRow | None:
        return next((r for r in self.groups if r.group == group), None)

    def lines(self) -> list[str]:
        out = [f"  owner {self.owner}, group {self.group}"]
        for r in self.groups:
            mark = " <- its group" if r.group == self.group else ""
            out.append(
                f"  share: group {r.group}: {r.running} cores running, used {r.used:.1%} of the decayed "
                f"core-seconds vs a share of {r.share:.1%} (usage/share {r.rank:.4g}){mark}"
            )
        for queue, why in sorted(self.limits.items()):
            out.append(f"  limit at {queue}: {why}")
        return out

    def verdict(self, verdict: str, pilots_held: bool) -> str:
        """The explain verdict with the share or the limit that holds the job put first."""
        mine = self.row(self.group)
        if pilots_held and self.limits:
            queue, why = sorted(self.limits.items())[0]
            return f"a running limit holds it: {why} (at {queue})"
        if self.ahead and mine is not None:
            return (
                f"its group's share: group {self.group} used {mine.used:.1%} against a share of {mine.share:.1%}; "
                f"groups served first: {', '.join(self.ahead)}; then: {verdict}"
            )
        return verdict


def group_table(store: Store, policy: Policy, now: float, extra: Sequence[str] = ()) -> list[GroupRow]:
    """Every group of the policy, with usage or named in ``extra``, as the share rule sees it at ``now``."""
    state = store.shares.state(now, policy)
    names = set(policy.shares) | set(extra)
    names |= {f[2:] for f in state.fields if f[:2] in ("u:", "r:") and "." not in f[2:]}
    usage = {g: state.usage(g) for g in names}
    total_usage = sum(usage.values()) or 1.0
    total_share = sum(policy.share(g) for g in names) or 1.0
    rows = [
        GroupRow(
            g,
            state.running(g),
            usage[g],
            usage[g] / total_usage,
            policy.share(g) / total_share,
            usage[g] / max(policy.share(g), 1e-9),
        )
        for g in names
    ]
    return sorted(rows, key=lambda r: (r.rank, r.group))


def fair_view(store: Store, job: Job, queues: Sequence[str], now: float) -> FairView:
    """The share and limits standing of a waiting job (its account alone when no policy is stored)."""
    policy = store.shares.policy()
    group, owner = account_of_job(store, job)
    if policy is None:
        return FairView(group, owner)
    state = store.shares.state(now, policy)
    waiting: set[str] = set()
    for queue in queues:
        for tq, score in store.views.zset_page(store.keys.qheads(queue), 0, -1):
            if score < 1e18:  # below _lib.lua's EMPTY: a task queue with jobs
                waiting.add(account_of(tq)[0])
    rows = group_table(store, policy, now, sorted(waiting | {group}))
    mine = next(r for r in rows if r.group == group)
    ahead = [r.group for r in rows if r.rank < mine.rank and r.group in waiting and r.group != group]
    limits = {q: why for q in queues if (why := limit_hit(policy, state, job.tq_id, job.cpu, q))}
    return FairView(group, owner, rows, ahead, limits)
