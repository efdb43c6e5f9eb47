"""``pilotfish hold``, ``release``, ``resubmit``, ``update`` and ``events``: a job after its submission
(:mod:`matcher.lifecycle`). Who acts is the local user (``--by`` names another, for a service acting for
someone); a refusal is one line and exit status 1, nothing changed."""

from __future__ import annotations

import json

import click

from taskqueues.context import Context
from taskqueues.store import JobState

from ..joblist import parse_states
from ..lifecycle import hold as hold_jobs
from ..lifecycle import job_events, local_user, parse_assignments, render_events
from ..lifecycle import release as release_jobs
from ..lifecycle import resubmit as resubmit_jobs
from ..lifecycle import update as update_job

__all__ = ["events", "hold", "release", "resubmit", "update"]

_BY = click.option("--by", default=None, help="Who acts, as the job's events say it [default: the local user].")
_REQUIREMENT = 'A requirement to set (VALUE as in a workflow: 4, "8GB", ["a","b"]), or to remove (NAME=); repeatable.'
_TARGETS = click.argument("targets", nargs=-1, required=True, metavar="JOB...|REQUEST")


@click.command("hold")
@_TARGETS
@click.option("--reason", default="", help="Why, shown with the held job (jobs, status, explain, events).")
@_BY
def hold(targets: tuple[str, ...], reason: str, by: str | None) -> None:
    """Keep waiting jobs from being matched until released (a REQUEST: all its waiting ones; blocked ones are
    held as soon as they would wait). A running job is refused."""
    click.echo(hold_jobs(Context().store, targets, by or local_user(), reason))


@click.command("release")
@_TARGETS
@click.option("--reason", default="", help="Why, as the job's events say it.")
@_BY
def release(targets: tuple[str, ...], reason: str, by: str | None) -> None:
    """Give held jobs back to their task queues, with the urgency they had (a REQUEST: all its held ones)."""
    click.echo(release_jobs(Context().store, targets, by or local_user(), reason))


@click.command("resubmit")
@_TARGETS
@click.option("--failed", is_flag=True, help="Of a REQUEST, its failed jobs (the default).")
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    help="Of a REQUEST, its jobs in this state (done, failed, cancelled; repeat or separate with commas).",
)
@click.option("--reason", default="", help="Why, as the job's events say it.")
@_BY
def resubmit(targets: tuple[str, ...], failed: bool, states: tuple[str, ...], reason: str, by: str | None) -> None:
    """Run ended jobs again as a new attempt (earlier attempts' logs are kept); their dep-failed dependents come
    back with them and run after them. A job still waiting or running is refused."""
    picked = set(parse_states(states)) if states else set()
    if failed:
        picked.add(JobState.FAILED)
    chosen = frozenset(picked) if picked else None
    click.echo(resubmit_jobs(Context().store, targets, by or local_user(), reason, chosen))


@click.command("update")
@click.argument("jobs", nargs=-1, required=True, metavar="JOB...")
@click.option("--priority", type=float, default=None, help="The job's own priority (seconds earlier it should start).")
@click.option("--requirement", "requirements", multiple=True, metavar="NAME=VALUE", help=_REQUIREMENT)
@click.option("--wall", default=None, help="The job's wall time ('2h', seconds).")
@_BY
def update(
    jobs: tuple[str, ...], priority: float | None, requirements: tuple[str, ...], wall: str | None, by: str | None
) -> None:
    """Change waiting or held jobs, validated as at submission: each moves to its new task queue at once. New
    requirements that no queue can run are refused, naming the requirement and the queues; nothing changed."""
    ctx = Context()
    changes = parse_assignments(requirements)
    for job in jobs:
        click.echo(
            update_job(
                ctx.store,
                ctx.catalog,
                job,
                by or local_user(),
                vo=ctx.settings.vo,
                priority=priority,
                requirements=changes,
                wall=wall,
            )
        )


@click.command("events")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"job": id, "events": [...]}.')
def events(job: str, as_json: bool) -> None:
    """Every change of JOB's state in order: when, from which state to which, by whom or which part
    (submit, match, a pilot, the reaper, a user), the attempt, pilot, exit code and reason."""
    found = job_events(Context().store, job)
    if as_json:
        click.echo(json.dumps({"job": job, "events": [e.to_json() for e in found]}, sort_keys=True))
    else:
        click.echo("\n".join(render_events(job, found)))
