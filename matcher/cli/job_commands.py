"""``pilotfish jobs`` and ``pilotfish logs``: the per-job views (:mod:`matcher.joblist`, :mod:`matcher.logview`)."""

from __future__ import annotations

import json
import sys

import click

from ..joblist import render_jobs

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
    from ..client import Client

    listing = Client.from_settings().listing(
        request=request, states=states, queue=queue, task_queue=task_queue, pilot=pilot, limit=limit
    )
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
