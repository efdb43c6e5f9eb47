"""``pilotfish status``, ``pilotfish explain`` and ``pilotfish move``: the operator's commands.

Both build a :class:`taskqueues.context.Context` (settings from ``PILOTFISH_*`` and the TOML file), so they
look at the same Redis and catalog as the services. ``--json`` prints machine-readable output;
``status --watch`` redraws every 2 s until every job shown has ended: on a terminal it clears the screen,
otherwise (a pipe, a log file) it prints each refresh as plain lines after a time stamp. ``move`` moves a
community's slot between the primaries of a Redis Cluster store (:func:`taskqueues.store.move_community`).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from taskqueues.settings import Settings
from taskqueues.store import MOVE_CHUNK, Keys, move_community

from ..calls import Calls, Overview
from ..explain import render_explanation
from ..formats import FORMAT_HELP
from ..status import (
    EXAMPLES,
    REQUEST_COLUMNS,
    RequestStatus,
    ended_summary,
    render_parked,
    render_requests,
    render_task_queues,
)

__all__ = ["WATCH_SECONDS", "explain", "move", "status", "view"]

WATCH_SECONDS = 2.0


def _snapshot(
    client: Calls, request: str | None, every: bool = False, owner: str | None = None, group: str | None = None
) -> tuple[dict[str, Any], list[str], bool, list[RequestStatus]]:
    """(JSON document, human lines, every job shown is final, the requests shown) for one refresh: one request,
    or the active requests and non-empty task queues (``every``: all of them) with a count of the others."""
    now = time.time()
    if request is not None:
        one = client.status(request, examples=EXAMPLES)
        return one.to_json(), render_requests([one], now), one.final, [one]
    return view(client.overview(), every, owner, group)


def view(
    overview: Overview, every: bool = False, owner: str | None = None, group: str | None = None
) -> tuple[dict[str, Any], list[str], bool, list[RequestStatus]]:
    """:func:`_snapshot` of every request and task queue (``every``), or of the active ones and a count of the
    others, of one owner or group when given."""
    now = time.time()
    everything = [s for s in overview.requests if _of(s.owner, s.group, owner, group)]
    shown = everything if every else [s for s in everything if not s.final]
    ended = [s for s in everything if s.final and s not in shown]
    queues = [q for q in overview.task_queues if _of(*_account(q.id), owner, group)]
    listed = queues if every else [q for q in queues if q.waiting]
    parked = overview.parked
    doc: dict[str, Any] = {"requests": [s.to_json() for s in shown], "task_queues": [q.to_json() for q in listed]}
    if not every:
        doc |= {"ended_requests": len(ended), "empty_task_queues": len(queues) - len(listed)}
    if parked:
        doc["parked"] = len(parked)
    lines = render_requests(shown, now) if shown or not ended else []
    if ended:
        lines.append(ended_summary(ended))
    lines += ["", *render_task_queues(listed, now)] if listed or every else []
    if len(queues) > len(listed):
        lines.append(f"{len(queues) - len(listed)} empty task queues not shown (--all)")
    if parked:
        lines += ["", *render_parked(parked)]
    return doc, lines, all(s.final for s in shown), shown


def _account(tq: str) -> tuple[str, str]:
    """(owner, group) of task queue ``tq`` (``<hash>.<group>.<owner>[.<type>]``)."""
    parts = tq.split(".")
    return ".".join(parts[2:3]), ".".join(parts[1:2])


def _of(their_owner: str, their_group: str, owner: str | None, group: str | None) -> bool:
    """Whether an owner and group match the wanted ones (None: any)."""
    return (owner is None or their_owner == owner) and (group is None or their_group == group)


@click.command("status")
@click.argument("request", required=False)
@click.option("--all", "every", is_flag=True, help="Every request and task queue, ended and empty ones too.")
@click.option("--owner", default=None, help="Only the requests of this owner.")
@click.option("--group", default=None, help="Only the requests charged to this group.")
@click.option("--watch", is_flag=True, help="Refresh every 2 s until every job shown has ended.")
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    help=FORMAT_HELP.replace("id,state,owner,exit,elapsed", "id,owner,done,failed,eta"),
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one document per refresh with --watch).")
def status(
    request: str | None, every: bool, owner: str | None, group: str | None, watch: bool, fmt: str, as_json: bool
) -> None:
    """Show REQUEST (an id or a unique name), or the active requests and waiting task queues (--all: every one)."""
    form = REQUEST_COLUMNS.parse("json" if as_json else fmt)
    client = _client()
    request_id = client.status(request).id if request is not None else None
    terminal = sys.stdout.isatty()
    while True:
        doc, lines, final, shown = _snapshot(client, request_id, every, owner, group)
        if form.kind == "json":
            click.echo(json.dumps(doc, sort_keys=True))
        else:
            if watch and terminal:
                click.clear()
            if watch:
                click.echo(time.strftime("-- %Y-%m-%d %H:%M:%S"))
            if form.kind == "fields":
                lines = REQUEST_COLUMNS.render(shown, form.fields) if shown else ["no request"]
            click.echo("\n".join(lines))
        if not watch or final:
            return
        sys.stdout.flush()
        time.sleep(WATCH_SECONDS)


def _client() -> Calls:
    from ..client import Client

    return Client.from_settings()


@click.command("explain")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
def explain(job: str, as_json: bool) -> None:
    """Say why JOB is still waiting (or what it is doing instead)."""
    found = _client().explain(job)
    if as_json:
        click.echo(json.dumps(found.to_json(), sort_keys=True))
    else:
        click.echo("\n".join(render_explanation(found)))


@click.command("move")
@click.argument("vo")
@click.option("--to", "target", required=True, metavar="HOST:PORT", help="The Cluster primary to move VO to.")
@click.option("--classic", is_flag=True, help="A chunked classic move even where CLUSTER MIGRATESLOTS exists.")
@click.option(
    "--chunk",
    type=click.IntRange(min=1),
    default=MOVE_CHUNK,
    show_default=True,
    help="Elements of a big key copied per step of a classic move.",
)
def move(vo: str, target: str, classic: bool, chunk: int) -> None:
    """Move community VO's keys (its Redis Cluster slot) to the primary at HOST:PORT."""
    settings = Settings.load()
    keys = Keys(prefix=settings.prefix, vo=vo)
    click.echo(str(move_community(settings.redis_url, keys, target, atomic=False if classic else None, chunk=chunk)))
