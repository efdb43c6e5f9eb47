"""``pilotfish shares``: store a shares file as the community's policy, or show usage against the shares.

``pilotfish shares FILE`` validates the file (:func:`taskqueues.store.fairshare.read_policy`: every refusal names
the file and the key) and stores it; from the next match on, pilots are served by share within the
running limits. ``pilotfish shares --off`` removes the policy (strict urgency again). ``pilotfish shares``
alone prints each group's running cores, its part of the decayed core-seconds against its share, and the
limits with what runs against them. :func:`shares_view` and :func:`set_policy` are what
:class:`matcher.client.Client` (and so the HTTP API) calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from taskqueues.errors import ConfigError

__all__ = ["shares"]


@click.command("shares")
@click.argument("file", required=False)
@click.option("--off", is_flag=True, help="Remove the stored policy: the match serves by urgency alone.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def shares(file: str | None, off: bool, as_json: bool) -> None:
    """Store FILE (TOML) as the shares and limits policy, or show usage against the stored one."""
    from ..client import Client

    client = Client.from_settings()
    if off or file:
        text = None
        if file:
            try:
                text = Path(file).read_text()
            except OSError as exc:
                raise ConfigError(f"{file}: cannot read the shares file: {exc.strerror}") from None
        click.echo(client.set_shares(text, file or ""))
        return
    view = client.shares()
    if view is None:
        click.echo("no shares policy: the match serves by urgency alone")
        return
    if as_json:
        click.echo(json.dumps(view))
        return
    click.echo(f"half-life {view['halflife']:g} s; served first: the lowest usage/share")
    for r in view["groups"]:
        click.echo(
            f"group {r['group']}: {r['running']} cores running, {r['used']:.1%} of the decayed core-seconds, "
            f"share {r['share']:.1%} (usage/share {r['rank']:.4g})"
        )
    for row in view["limits"]:
        what = f"group {row['group']} at {row['where']}" if "group" in row else f"type {row['type']}"
        click.echo(f"limit {what}: {row['running']} of {row['limit']} {'cores' if 'group' in row else 'jobs'}")
