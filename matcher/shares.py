"""The community's shares policy as the ``shares`` command and the API handle it: store or remove a shares file's
text (:func:`set_policy`), or read the stored policy with each group's usage and the limits (:func:`shares_view`)."""

from __future__ import annotations

import tomllib
from typing import Any

from taskqueues.errors import ConfigError
from taskqueues.store import Store, parse_policy

from .fairexplain import group_table

__all__ = ["set_policy", "shares_view"]


def set_policy(store: Store, text: str | None, source: str = "<policy>") -> str:
    """Store the shares file's TOML ``text`` (None: remove the policy); a line saying what was done."""
    if text is None:
        store.shares.publish(None)
        return "shares policy removed: the match serves by urgency alone"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    policy = parse_policy(data, source)
    store.shares.publish(policy)
    return (
        f"shares policy stored: {len(policy.shares)} groups, {len(policy.cores)} core limits, "
        f"{len(policy.jobs)} type limits, half-life {policy.halflife:g} s"
    )


def shares_view(store: Store) -> dict[str, Any] | None:
    """The stored policy's groups (usage against share) and limits (what runs against them), as ``--json``
    prints it; None without a policy."""
    stored = store.shares.policy()
    if stored is None:
        return None
    now = store.clock()
    rows = group_table(store, stored, now)
    state = store.shares.state(now, stored)
    limits: list[dict[str, Any]] = [
        {"group": g, "where": w, "limit": n, "running": state.running(g) if w == "*" else state.count(f"c:{g}@{w}")}
        for (g, w), n in sorted(stored.cores.items())
    ]
    limits += [{"type": t, "limit": n, "running": state.count(f"n:{t}")} for t, n in sorted(stored.jobs.items())]
    return {"halflife": stored.halflife, "groups": [r.__dict__ for r in rows], "limits": limits}
