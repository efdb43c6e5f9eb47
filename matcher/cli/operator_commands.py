"""``pilotfish status`` and ``pilotfish explain``: the operator views on the command line.

Both build a :class:`taskqueues.context.Context` (settings from ``PILOTFISH_*`` and the TOML file), so they
look at the same Redis and catalog as the services. ``--json`` prints machine-readable output;
``status --watch`` redraws every 2 s until every job shown has ended: on a terminal it clears the screen,
otherwise (a pipe, a log file) it prints each refresh as plain lines after a time stamp.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from taskqueues.context import Context
from taskqueues.store import Store

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

__all__ = ["WATCH_SECONDS", "explain", "status"]

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
