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

from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import MOVE_CHUNK, Keys, Store, move_community

from ..explain import explain as explain_job
from ..explain import render_explanation
from ..status import (
    EXAMPLES,
    find_request,
    render_parked,
    render_requests,
    render_task_queues,
    request_status,
    requests_status,
    task_queues,
)

__all__ = ["WATCH_SECONDS", "explain", "move", "status"]

WATCH_SECONDS = 2.0


def _snapshot(store: Store, request: str | None) -> tuple[dict[str, Any], list[str], bool]:
    """(JSON document, human lines, every job shown is final) for one refresh."""
    now = time.time()
    if request is not None:
        one = request_status(store, request, examples=EXAMPLES)
        return one.to_json(), render_requests([one], now), one.final
    everything = requests_status(store)
    queues = task_queues(store)
    parked = list(store.parked().values())
    doc: dict[str, Any] = {"requests": [s.to_json() for s in everything], "task_queues": [q.to_json() for q in queues]}
    if parked:
        doc["parked"] = len(parked)
    lines = [*render_requests(everything, now), "", *render_task_queues(queues, now)]
    if parked:
        lines += ["", *render_parked(parked)]
    return doc, lines, all(s.final for s in everything)


@click.command("status")
@click.argument("request", required=False)
@click.option("--watch", is_flag=True, help="Refresh every 2 s until every job shown has ended.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one document per refresh with --watch).")
def status(request: str | None, watch: bool, as_json: bool) -> None:
    """Show REQUEST (an id or a unique name), or every request and task queue."""
    store = Context().store
    request_id = find_request(store, request) if request is not None else None
    terminal = sys.stdout.isatty()
    while True:
        doc, lines, final = _snapshot(store, request_id)
        if as_json:
            click.echo(json.dumps(doc, sort_keys=True))
        else:
            if watch and terminal:
                click.clear()
            if watch:
                click.echo(time.strftime("-- %Y-%m-%d %H:%M:%S"))
            click.echo("\n".join(lines))
        if not watch or final:
            return
        sys.stdout.flush()
        time.sleep(WATCH_SECONDS)


@click.command("explain")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
def explain(job: str, as_json: bool) -> None:
    """Say why JOB is still waiting (or what it is doing instead)."""
    context = Context()
    found = explain_job(context.store, context.catalog, job)
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
