"""``pilotfish jobs`` and ``pilotfish logs``: the per-job views (:mod:`matcher.joblist`, :mod:`matcher.logview`)."""

from __future__ import annotations

import json
import sys

import click

from taskqueues.context import Context

from ..joblist import JobFilter, list_jobs, parse_states, render_jobs
from ..logview import follow, output, parse_streams, where_lines

__all__ = ["jobs", "logs"]


@click.command("jobs")
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="A job state, or active (the default: not finished), finished or all; repeat or separate with commas.",
)
@click.option("--request", default=None, help="Only the jobs of this request (id or unique name).")
@click.option("--queue", default=None, help="Only jobs a catalog queue may run (or ran on one of its pilots).")
@click.option("--task-queue", default=None, help="Only the jobs of this task queue.")
@click.option("--pilot", default=None, help="Only jobs leased to or run by this pilot.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most this many jobs.")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"jobs": [...], "more": bool}.')
def jobs(
    states: tuple[str, ...],
    request: str | None,
    queue: str | None,
    task_queue: str | None,
    pilot: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, one line each: running first, then waiting (most urgent first), releasing, blocked, and
    finished ones (latest end first)."""
    from ..status import find_request

    store = Context().store
    wanted = parse_states(states)
    flt = JobFilter(
        wanted, find_request(store, request) if request is not None else None, queue, task_queue, pilot, limit
    )
    listing = list_jobs(store, flt)
    if as_json:
        click.echo(json.dumps(listing.to_json(), sort_keys=True))
    else:
        click.echo("\n".join(render_jobs(listing)))


@click.command("logs")
@click.argument("job")
@click.option("--stream", default=None, metavar="stdout|stderr", help="One stream [default: both].")
@click.option("--attempt", type=int, default=None, help="Which run of the job (1 is the first) [default: the latest].")
@click.option("--follow", "-f", "follow_", is_flag=True, help="Print what the running payload prints, until it ends.")
def logs(job: str, stream: str | None, attempt: int | None, follow_: bool) -> None:
    """Print the tail of JOB's payload stdout and stderr (bytes that are not UTF-8 shown as \\xNN); where its
    pilot keeps the files is said on stderr."""
    store = Context().store
    streams = parse_streams(stream)
    if follow_:
        for _, text in follow(store, job, attempt, streams):
            click.echo(text, nl=False)
            sys.stdout.flush()
        return
    out = output(store, job, attempt, streams)
    for line in where_lines(out):
        click.echo(line, err=True)
    for name in streams:
        text = out.text(name)
        if len(streams) > 1 and text:
            click.echo(f"==> {'stdout' if name == 'out' else 'stderr'} <==")
        click.echo(text, nl=False)
        if text and not text.endswith("\n"):
            click.echo()
