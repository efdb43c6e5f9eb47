"""``pilotfish shares``: store a shares file as the community's policy, or show usage against the shares.

``pilotfish shares FILE`` validates the file (:func:`taskqueues.store.fairshare.read_policy`: every refusal names
the file and the key) and stores it; from the next match on, pilots are served by share within the
running limits. ``pilotfish shares --off`` removes the policy (strict urgency again). ``pilotfish shares``
alone prints each group's running cores, its part of the decayed core-seconds against its share, and the
limits with what runs against them.
"""

from __future__ import annotations

import json

import click

from taskqueues.context import Context
from taskqueues.store import read_policy

from ..fairexplain import group_table

__all__ = ["shares"]


@click.command("shares")
@click.argument("file", required=False)
@click.option("--off", is_flag=True, help="Remove the stored policy: the match serves by urgency alone.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def shares(file: str | None, off: bool, as_json: bool) -> None:
    """Store FILE (TOML) as the shares and limits policy, or show usage against the stored one."""
    store = Context().store
    if off:
        store.shares.publish(None)
        click.echo("shares policy removed: the match serves by urgency alone")
        return
    if file:
        policy = read_policy(file)
        store.shares.publish(policy)
        click.echo(
            f"shares policy stored: {len(policy.shares)} groups, {len(policy.cores)} core limits, "
            f"{len(policy.jobs)} type limits, half-life {policy.halflife:g} s"
        )
        return
    stored = store.shares.policy()
    if stored is None:
        click.echo("no shares policy: the match serves by urgency alone")
        return
    now = store.clock()
    rows = group_table(store, stored, now)
    state = store.shares.state(now, stored)
    limits = [
        {"group": g, "where": w, "limit": n, "running": state.running(g) if w == "*" else state.count(f"c:{g}@{w}")}
        for (g, w), n in sorted(stored.cores.items())
    ]
    limits += [{"type": t, "limit": n, "running": state.count(f"n:{t}")} for t, n in sorted(stored.jobs.items())]
    if as_json:
        click.echo(json.dumps({"halflife": stored.halflife, "groups": [r.__dict__ for r in rows], "limits": limits}))
        return
    click.echo(f"half-life {stored.halflife:g} s; served first: the lowest usage/share")
    for r in rows:
        click.echo(
            f"group {r.group}: {r.running} cores running, {r.used:.1%} of the decayed core-seconds, "
            f"share {r.share:.1%} (usage/share {r.rank:.4g})"
        )
    for row in limits:
        what = f"group {row['group']} at {row['where']}" if "group" in row else f"type {row['type']}"
        click.echo(f"limit {what}: {row['running']} of {row['limit']} {'cores' if 'group' in row else 'jobs'}")
