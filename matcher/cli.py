"""The ``pilotfish`` command: one click group, each command defined beside the code it drives.

Errors that Pilotfish raises on purpose (:class:`taskqueues.errors.PilotfishError`) print as one line
and exit with status 1; ``--verbose`` shows the traceback instead.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from taskqueues import __version__
from taskqueues.errors import PilotfishError


class _Group(click.Group):
    """Turns our errors into one clear line (or a traceback with --verbose)."""

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
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _register() -> None:
    from pilot.agent.command import pilot
    from pilot.director.command import director
    from pilot.mjf.command import mjf

    from . import commands, operator_commands

    for command in (commands.run, commands.up, commands.down, commands.config, commands.submit, commands.cancel,
                    commands.kill, commands.drain, commands.matcher, commands.health, operator_commands.status,
                    operator_commands.explain, director, pilot, mjf):
        main.add_command(command)


_register()

if __name__ == "__main__":
    main()
