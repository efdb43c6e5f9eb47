"""``pilotfish hold``, ``release``, ``resubmit``, ``update`` and ``events``: a job after its submission
(:mod:`matcher.lifecycle`), through :meth:`matcher.client.Client.from_settings` as ``cancel`` (the API when
``api_url`` is set, printing the same). Who acts is the local user, through the API the token's user (``--by``
names another, for a service acting for someone: through the API, operators only); a refusal is one line and
exit status 1, nothing changed."""

from __future__ import annotations

import json

import click

from ..calls import Calls
from ..lifecycle import parse_assignments, render_events

__all__ = ["events", "hold", "release", "resubmit", "update"]

_BY = click.option(
    "--by",
    default=None,
    help="Who acts, as the job's events say it [default: the local user; through the API the token's user, and "
    "only an operator may name another].",
)
_REQUIREMENT = 'A requirement to set (VALUE as in a workflow: 4, "8GB", ["a","b"]), or to remove (NAME=); repeatable.'
_TARGETS = click.argument("targets", nargs=-1, required=True, metavar="JOB...|REQUEST")


def _client() -> Calls:
    """The deployment: through its API when api_url is set, else its store."""
    from ..client import Client

    return Client.from_settings()


@click.command("hold")
@_TARGETS
@click.option("--reason", default="", help="Why, shown with the held job (jobs, status, explain, events).")
@_BY
def hold(targets: tuple[str, ...], reason: str, by: str | None) -> None:
    """Keep waiting jobs from being matched until released (a REQUEST: all its waiting ones; blocked ones are
    held as soon as they would wait). A running job is refused."""
    click.echo(_client().hold(*targets, reason=reason, by=by))


@click.command("release")
@_TARGETS
@click.option("--reason", default="", help="Why, as the job's events say it.")
@_BY
def release(targets: tuple[str, ...], reason: str, by: str | None) -> None:
    """Give held jobs back to their task queues, with the urgency they had (a REQUEST: all its held ones)."""
    click.echo(_client().release(*targets, reason=reason, by=by))


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
    chosen = [*states, "failed"] if failed else list(states)
    click.echo(_client().resubmit(*targets, states=chosen or None, reason=reason, by=by))


@click.command("update")
@click.argument("jobs", nargs=-1, required=True, metavar="JOB...")
@click.option("--priority", type=float, default=None, help="The job's own priority (seconds earlier it should start).")
@click.option("--requirement", "requirements", multiple=True, metavar="NAME=VALUE", help=_REQUIREMENT)
@click.option("--wall", default=None, help="The job's wall time ('2h', seconds).")
@_BY
def update(
    jobs: tuple[str, ...], priority: float | None, requirements: tuple[str, ...], wall: str | None, by: str | None
) -> None:
    """Change waiting or held jobs, validated as at submission: each moves to its new task queue at once. Every
    job is checked first: a job not waiting nor held, or new requirements that no queue can run (named with the
    queues), are refused and no job changes."""
    changes = parse_assignments(requirements)
    click.echo(_client().update(*jobs, priority=priority, requirements=changes, wall=wall, by=by))


@click.command("events")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"job": id, "events": [...]}.')
def events(job: str, as_json: bool) -> None:
    """Every change of JOB's state in order: when, from which state to which, by whom or which part
    (submit, match, a pilot, the reaper, a user), the attempt, pilot, exit code and reason."""
    found = _client().events(job)
    if as_json:
        click.echo(json.dumps({"job": job, "events": [e.to_json() for e in found]}, sort_keys=True))
    else:
        click.echo("\n".join(render_events(job, found)))
