"""The ``pilotfish`` command: one click group, each command defined beside the code it drives.

The error boundary: errors that Pilotfish raises on purpose (:class:`taskqueues.errors.PilotfishError`)
print as one line and exit with status 1; so does a Redis error that reached here without going through
the store's guard (:mod:`taskqueues.store.guard`), named with the server's URL (never its password) and the
command. ``--verbose`` shows the traceback instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from taskqueues import __version__
from taskqueues.errors import PilotfishError
from taskqueues.settings import Settings
from taskqueues.store.connection import ClientError
from taskqueues.store.guard import from_exception, shown_url


class _Group(click.Group):
    """Turns our errors into one clear line (or a traceback with --verbose)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PilotfishError, ClientError) as exc:
            if ctx.obj and ctx.obj.get("verbose"):
                raise
            error = (
                exc
                if isinstance(exc, PilotfishError)
                else from_exception(exc, _where(), f"running pilotfish {ctx.invoked_subcommand}")
            )
            click.echo(f"pilotfish: error: {error}", err=True)
            sys.exit(1)


def _where() -> str:
    """The configured Redis as messages show it (the embedded server when none is configured)."""
    try:
        url = Settings.load().redis_url
    except PilotfishError:
        url = ""
    return shown_url(url) if url else "the embedded server"


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="pilotfish")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Pilotfish: a pilot-model workload manager (task queues in Redis, pilots that pull work)."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    # Long-running parts log to files, with times; a command a person runs says what it must in one line.
    daemon = ctx.invoked_subcommand in DAEMONS or verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s" if daemon else "pilotfish: %(levelname)s: %(message)s",
    )
    if not daemon:
        for level in (logging.WARNING, logging.ERROR):
            logging.addLevelName(level, logging.getLevelName(level).lower())


#: Commands that run for long (started by `up`, a batch system or Kubernetes): their logs carry times.
DAEMONS = frozenset({"matcher", "director", "pilot"})


def _register() -> None:
    from pilot.agent.command import pilot
    from pilot.director.command import director
    from pilot.mjf.command import mjf

    from . import commands, job_commands, operator_commands, shares_command
    from .metrics import metrics

    for command in (
        commands.run,
        commands.up,
        commands.down,
        commands.config,
        commands.submit,
        commands.cancel,
        commands.kill,
        commands.drain,
        commands.matcher,
        commands.health,
        commands.acl,
        operator_commands.status,
        operator_commands.explain,
        director,
        pilot,
        mjf,
        job_commands.jobs,
        job_commands.logs,
        metrics,
        shares_command.shares,
    ):
        main.add_command(command)


_register()

if __name__ == "__main__":
    main()
