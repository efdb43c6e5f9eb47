"""The ``pilotfish`` command: one click group, each command defined beside the code it drives.

The error boundary: errors that Pilotfish raises on purpose (:class:`taskqueues.errors.PilotfishError`)
print as one line and exit with status 1; ``--verbose`` shows the traceback instead. A Redis error is one
of them: every call into the store goes through its guard, which names the server's URL (never its
password) and the operation, so no raw client error reaches this boundary.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from taskqueues import __version__
from taskqueues.credentials import seal
from taskqueues.errors import PilotfishError


class _Group(click.Group):
    """Turns our errors into one clear line (or a traceback with --verbose); finds its commands in
    :data:`COMMANDS`, importing each one's module when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PilotfishError as exc:
            if ctx.obj and ctx.obj.get("verbose"):
                raise
            click.echo(f"pilotfish: error: {exc}", err=True)
            sys.exit(1)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="pilotfish")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Pilotfish: a pilot-model workload manager (task queues in Redis, pilots that pull work)."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    if ctx.invoked_subcommand in LONG_RUNNING:
        seal()  # its environment, memory and descriptors closed to other processes of the user
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
DAEMONS = frozenset({"matcher", "director", "pilot", "serve"})
#: Commands that hold a credential for long: they mark themselves non-dumpable (taskqueues.credentials).
LONG_RUNNING = DAEMONS | {"run", "up", "metrics", "flower"}


#: Every command: its name, and the module and attribute that define it. A command's module is imported only
#: when that command runs (or ``--help`` lists them all): a pilot starting on a worker node, or a quick
#: ``pilotfish status``, does not pay for importing the director, the metrics exporter or the workflow parser.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("matcher.cli.commands", "run"),
    "up": ("matcher.cli.commands", "up"),
    "down": ("matcher.cli.commands", "down"),
    "config": ("matcher.cli.commands", "config"),
    "submit": ("matcher.cli.commands", "submit"),
    "cancel": ("matcher.cli.commands", "cancel"),
    "kill": ("matcher.cli.commands", "kill"),
    "drain": ("matcher.cli.commands", "drain"),
    "matcher": ("matcher.cli.commands", "matcher"),
    "health": ("matcher.cli.commands", "health"),
    "acl": ("matcher.cli.commands", "acl"),
    "flower": ("matcher.cli.flower", "flower"),
    "status": ("matcher.cli.operator_commands", "status"),
    "explain": ("matcher.cli.operator_commands", "explain"),
    "move": ("matcher.cli.operator_commands", "move"),
    "director": ("pilot.director.command", "director"),
    "pilot": ("pilot.agent.command", "pilot"),
    "mjf": ("pilot.mjf.command", "mjf"),
    "jobs": ("matcher.cli.job_commands", "jobs"),
    "logs": ("matcher.cli.job_commands", "logs"),
    "hold": ("matcher.cli.lifecycle_commands", "hold"),
    "release": ("matcher.cli.lifecycle_commands", "release"),
    "resubmit": ("matcher.cli.lifecycle_commands", "resubmit"),
    "update": ("matcher.cli.lifecycle_commands", "update"),
    "events": ("matcher.cli.lifecycle_commands", "events"),
    "history": ("matcher.cli.job_commands", "history"),
    "metrics": ("matcher.cli.metrics", "metrics"),
    "shares": ("matcher.cli.shares_command", "shares"),
    "serve": ("matcher.cli.api_commands", "serve"),
    "token": ("matcher.cli.api_commands", "token"),
    "audit": ("matcher.cli.api_commands", "audit"),
}


if __name__ == "__main__":
    main()
