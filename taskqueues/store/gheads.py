"""The heads index by group (issue 31): what a fair-share match walks instead of a queue's whole heads index.

While the community has a shares policy, each catalog queue's heads index (``qh:<queue>``: task-queue id →
head score) is kept split by group too: ``gh:<queue>:<group>`` holds exactly the entries of the task queues of
that group, with the same scores, and ``gh:<queue>`` names the queue's groups (and ``~``, so that it exists
once built); ``ghq`` lists the queues whose index by group is built. ``match.lua`` builds a queue's the first
time a policy match reads it (the upgrade path: a store written before the index existed, or a policy just
stored, is indexed lazily, queue by queue) and serves the groups in the policy's order, reading each group's
index a page at a time, so the cost of a policy match does not grow with the task queues. Every writer of a
heads index keeps both through ``_lib.lua``'s ``index_head`` (match.lua in its own code).

Without a policy nobody keeps them: :meth:`GroupHeads.drop` (called when the policy is taken away) deletes
them all, so that the next policy builds them afresh. :meth:`GroupHeads.check` compares them with the heads
indexes (the store's consistency check; ``tests/taskqueues/store/test_gheads.py`` runs every writer through it).
"""

from __future__ import annotations

from typing import Any

import redis

from .guard import guarded
from .keys import POLICY_MARK, Keys, account_of
from .part import Part
from .records import text as _text

__all__ = ["GroupHeads", "group_heads_keys"]

#: The member of a queue's set of groups that makes it exist once built (no group is named so).
BUILT = "~"


def group_heads_keys(client: redis.Redis | redis.client.Pipeline, keys: Keys) -> list[str]:
    """Every key of the heads indexes by group (``client`` may be a pipeline watching ``keys.gindexed``)."""
    out = [keys.gindexed]
    for queue in sorted(_text(q) for q in client.smembers(keys.gindexed)):
        groups = sorted(_text(g) for g in client.smembers(keys.gheads(queue)))
        out += [keys.gheads(queue), *(keys.gheads(queue, g) for g in groups if g != BUILT)]
    return out


class GroupHeads(Part):
    """The heads indexes by group of the community's catalog queues (``store.gheads``)."""

    @guarded("dropping the heads indexes by group")
    def drop(self) -> None:
        """Delete every heads index by group (none is kept without a policy; match.lua builds them again)."""

        def drop(pipe: redis.client.Pipeline) -> None:
            names = group_heads_keys(pipe, self.keys)
            pipe.multi()
            pipe.delete(*names)

        self.client.transaction(drop, self.keys.gindexed)

    @guarded("reading the heads indexes by group")
    def built(self) -> list[str]:
        """The catalog queues whose heads index by group is built, sorted."""
        return sorted(_text(q) for q in self.client.smembers(self.keys.gindexed))

    @guarded("checking the heads indexes by group")
    def check(self) -> list[str]:
        """Every difference between the heads indexes by group and the heads indexes, one line each starting
        with the queue; [] when each built one holds exactly its heads index's entries of its group, with the
        same scores, and none is kept without a policy."""
        k, out = self.keys, []
        built = self.built()
        if built and self.client.hget(k.qfloor, POLICY_MARK) is None:
            out.append(f"{built[0]}: heads indexes by group are kept for {len(built)} queue(s) without a policy")
        for queue in built:
            index: Any = self.client.zrangebyscore(k.qheads(queue), "-inf", "1e18", withscores=True)
            heads = {_text(tq): float(score) for tq, score in index}
            groups = {_text(g) for g in self.client.smembers(k.gheads(queue))}
            if BUILT not in groups:
                out.append(f"{queue}: listed as built, but its set of groups has no {BUILT!r}")
            split: dict[str, float] = {}
            for group in sorted(groups - {BUILT}):
                part: Any = self.client.zrange(k.gheads(queue, group), 0, -1, withscores=True)
                for tq, score in part:
                    name = _text(tq)
                    if account_of(name)[0] != group:
                        out.append(f"{queue}: {name} is in the index of group {group}, not of its own")
                    split[name] = float(score)
            for tq in sorted(heads.keys() | split.keys()):
                if tq not in split:
                    out.append(f"{queue}: {tq} is in the heads index, not in its group's ({account_of(tq)[0]})")
                elif tq not in heads:
                    out.append(f"{queue}: {tq} is in the index of its group, not in the heads index")
                elif heads[tq] != split[tq]:
                    out.append(f"{queue}: {tq} scores {heads[tq]!r} in the heads index, {split[tq]!r} in its group's")
        return out
