"""``pilotfish jobs``, ``history`` and ``logs``: the per-job views (:mod:`matcher.joblist`, :mod:`matcher.history`,
:mod:`matcher.logview`)."""

from __future__ import annotations

import json
import sys

import click

from ..formats import FORMAT_HELP, JOB_COLUMNS
from ..joblist import render_jobs

__all__ = ["history", "jobs", "logs"]


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
@click.option("--owner", default=None, help="Only the jobs of this owner.")
@click.option("--group", default=None, help="Only the jobs charged to this group.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most this many jobs.")
@click.option("--format", "fmt", default="table", show_default=True, help=FORMAT_HELP)
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"jobs": [...], "more": bool} (--format json).')
def jobs(
    states: tuple[str, ...],
    request: str | None,
    queue: str | None,
    task_queue: str | None,
    pilot: str | None,
    owner: str | None,
    group: str | None,
    limit: int,
    fmt: str,
    as_json: bool,
) -> None:
    """List jobs, one line each: running first, then waiting (most urgent first), releasing, blocked, and
    finished ones (latest end first)."""
    from ..client import Client

    form = JOB_COLUMNS.parse("json" if as_json else fmt)
    listing = Client.from_settings().listing(
        request=request,
        states=states,
        queue=queue,
        task_queue=task_queue,
        pilot=pilot,
        limit=limit,
        owner=owner,
        group=group,
    )
    if form.kind == "json":
        click.echo(json.dumps(listing.to_json(), sort_keys=True))
    elif form.kind == "fields":
        click.echo("\n".join(JOB_COLUMNS.render(listing.rows, form.fields) if listing.rows else ["no job"]))
    else:
        click.echo("\n".join(render_jobs(listing)))


@click.command("history")
@click.option("--since", "-S", default="1d", show_default=True, help="Jobs that ended since (2d, 6h, a date...).")
@click.option("--until", "-E", default="now", show_default=True, help="... and until (same forms).")
@click.option("--owner", "-u", default=None, help="Only the jobs of this owner.")
@click.option("--group", "-A", default=None, help="Only the jobs charged to this group.")
@click.option("--state", "states", multiple=True, metavar="STATE", help="done, failed, cancelled, dep-failed.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="Jobs per page.")
@click.option("--after", default=None, metavar="CURSOR", help="The next page: the cursor a page ended with.")
@click.option("--format", "fmt", default="table", show_default=True, help=FORMAT_HELP)
def history(
    since: str,
    until: str,
    owner: str | None,
    group: str | None,
    states: tuple[str, ...],
    limit: int,
    after: str | None,
    fmt: str,
) -> None:
    """List the jobs that ended in a time window, oldest end first (like sacct), a page at a time."""
    from ..client import Client
    from ..history import DEFAULT_FIELDS, render_history

    form = JOB_COLUMNS.parse(fmt)
    listing = Client.from_settings().history(
        since, until, owner=owner, group=group, states=states, after=after, limit=limit
    )
    if form.kind == "json":
        click.echo(json.dumps(listing.to_json(), sort_keys=True))
    else:
        click.echo("\n".join(render_history(listing, form.fields if form.kind == "fields" else DEFAULT_FIELDS)))


@click.command("logs")
@click.argument("job")
@click.option("--stream", default=None, metavar="stdout|stderr", help="One stream [default: both].")
@click.option("--attempt", type=int, default=None, help="Which run of the job (1 is the first) [default: the latest].")
@click.option("--follow", "-f", "follow_", is_flag=True, help="Print what the running payload prints, until it ends.")
def logs(job: str, stream: str | None, attempt: int | None, follow_: bool) -> None:
    """Print the tail of JOB's payload stdout and stderr (bytes that are not UTF-8 shown as \\xNN); where its
    pilot keeps the files is said on stderr."""
    from ..client import Client

    client = Client.from_settings()
    if follow_:
        for _, text in client.follow(job, stream=stream, attempt=attempt):
            click.echo(text, nl=False)
            sys.stdout.flush()
        return
    out = client.log_view(job, stream=stream, attempt=attempt)
    for line in out.where:
        click.echo(line, err=True)
    for name in out.streams:
        text = out.text(name)
        if len(out.streams) > 1 and text:
            click.echo(f"==> {'stdout' if name == 'out' else 'stderr'} <==")
        click.echo(text, nl=False)
        if text and not text.endswith("\n"):
            click.echo()
