"""``pilotfish director``: run the site director (a cycle every interval, or ``--once``)."""

from __future__ import annotations

import json
import signal
import threading

import click

from taskqueues import logformat
from taskqueues.context import Context
from taskqueues.settings import Settings

from .service import Director, run_forever


@click.command()
@click.option("--once", is_flag=True, help="Run one cycle, print what it did, and exit.")
@click.option("--interval", type=float, default=None, help="Seconds between cycles (default: director_interval).")
@click.option("--log-dir", type=click.Path(file_okay=False), default=None, help="Where pilots' logs go.")
@click.option(
    "--stop-pilots-on-exit",
    is_flag=True,
    help="Cancel this director's pilots when it stops (a local deployment; not for batch sites).",
)
def director(once: bool, interval: float | None, log_dir: str | None, stop_pilots_on_exit: bool) -> None:
    """Provision pilots for the waiting demand of every queue of the catalog."""
    ctx = Context(Settings.load())
    logformat.setup("director", ctx.settings.log_format, vo=ctx.settings.vo)
    service = Director(ctx, log_dir=log_dir)
    if once:
        report = service.cycle()
        click.echo(json.dumps(report.summary(), indent=2))
        return
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        run_forever(service, interval or ctx.settings.director_interval, stop=stopping)
    except KeyboardInterrupt:
        pass
    finally:
        if stop_pilots_on_exit:
            service.stop_all()
        service.close()
