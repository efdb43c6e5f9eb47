"""``pilotfish pilot``: run one pilot on this worker node (what site directors submit to batch systems).

Also runnable as ``python -m pilot.agent.command`` (the batch script of a pilot needs no entry point
installed). Exit status: 0 when the pilot stopped normally (time up, idle, drained, shut down, preempted
by SIGTERM), 1 with one error line when it cannot start (Redis unreachable, bad settings).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import click
from click.core import ParameterSource

from pilot.agent.config import PilotConfig
from pilot.agent.observer import NullObserver, Observer
from pilot.agent.pilot import Pilot
from taskqueues import logformat
from taskqueues.credentials import FILE_SUFFIX, file_values, seal, take_pilot_file
from taskqueues.errors import ConfigError, PilotfishError
from taskqueues.sandbox import SANDBOXES
from taskqueues.settings import DEFAULTS, LOCAL_REDIS_URL
from taskqueues.store import is_cluster


def make_observer(events: bool, config: PilotConfig, broker_url: str = "") -> Observer:
    """The observer for ``--events``: Celery events and remote control (``pilot.celery_events``) on the broker,
    ``broker_url`` if given, else the store's Redis (which cannot be a Redis Cluster: Celery cannot use one)."""
    if not events:
        return NullObserver()
    broker_url = broker_url or config.redis_url
    if is_cluster(broker_url):
        raise click.ClickException(
            "--events needs a Celery broker apart from a Redis Cluster store: give --broker-url "
            "(env PILOTFISH_BROKER_URL), a standalone or Sentinel-managed Redis"
        )
    try:
        from pilot.celery_events import CeleryObserver  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise click.ClickException(f"--events needs pilot.celery_events, which cannot be imported: {exc}") from None
    observer: Observer = CeleryObserver(broker_url)
    return observer


@click.command("pilot")
@click.option(
    "--redis-url",
    envvar="PILOTFISH_REDIS_URL",
    default=LOCAL_REDIS_URL,
    show_default=True,
    help="The task-queue store (env PILOTFISH_REDIS_URL).",
)
@click.option(
    "--vo", envvar="PILOTFISH_VO", default=DEFAULTS.vo, show_default=True, help="Community whose jobs this pilot runs."
)
@click.option("--queue", required=True, help="Catalog queue id this pilot runs in (site/ce/queue).")
@click.option(
    "--prefix",
    envvar="PILOTFISH_PREFIX",
    default=DEFAULTS.prefix,
    show_default=True,
    help="Redis key prefix of the store.",
)
@click.option("--cores", type=click.IntRange(min=1), default=None, help="Override MJF allocated_CPU.")
@click.option("--mem", type=click.IntRange(min=0), default=None, help="Override MJF mem_limit_MB (MB).")
@click.option("--tmp", type=click.IntRange(min=0), default=None, help="Override the scratch space (MB).")
@click.option(
    "--idle-timeout",
    envvar="PILOTFISH_PILOT_IDLE_TIMEOUT",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULTS.pilot_idle_timeout,
    show_default=True,
    help="Stop after this many seconds with nothing running and nothing matched (env PILOTFISH_PILOT_IDLE_TIMEOUT).",
)
@click.option(
    "--stop-margin",
    type=click.FloatRange(min=0),
    default=PilotConfig.stop_margin,
    show_default=True,
    help="Seconds kept free before the pilot's end to stop payloads and report.",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds between heartbeats [default: lease/3].",
)
@click.option(
    "--lease",
    envvar="PILOTFISH_LEASE_SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULTS.lease_seconds,
    show_default=True,
    help="Lease length the heartbeat renews, seconds (env PILOTFISH_LEASE_SECONDS).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Payload sandboxes, logs and $JOBSTATUS [default: ./pilot-work-<pid>].",
)
@click.option(
    "--wall",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds this pilot may run (its batch job's wall limit) when MJF and the batch system say nothing.",
)
@click.option("--max-jobs", type=click.IntRange(min=1), default=None, help="Stop after starting this many jobs.")
@click.option("--own-machine", is_flag=True, help="Run MJF shutdown_command when the pilot ends (VMs).")
@click.option(
    "--kill-grace",
    type=click.FloatRange(min=0),
    default=PilotConfig.kill_grace,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL of a payload.",
)
@click.option(
    "--output-cap",
    type=click.IntRange(min=0),
    default=PilotConfig.output_cap,
    show_default=True,
    help="Bytes of each payload's stdout/stderr tail kept in the log directory and in the store.",
)
@click.option(
    "--log-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=PilotConfig.log_interval,
    show_default=True,
    help="Seconds between two shipments of a running payload's new output to the store.",
)
@click.option(
    "--mem-tolerance",
    type=click.FloatRange(min=0),
    default=PilotConfig.mem_tolerance,
    show_default=True,
    help="Fraction above its memory requirement a payload may use before it is killed.",
)
@click.option(
    "--priority-factor",
    type=int,
    default=PilotConfig.priority_factor,
    show_default=True,
    help="Integer published as $JOBSTATUS priority_factor (higher is better; its meaning is yours).",
)
@click.option(
    "--jobstatus-hold",
    type=click.FloatRange(min=0),
    default=PilotConfig.jobstatus_revert_hold,
    show_default=True,
    help="Seconds the other $JOBSTATUS values stay as published after can_postpone_last_job reverts "
    "to True (a withdrawn drain); 0: no hold.",
)
@click.option(
    "--broker-url",
    envvar="PILOTFISH_BROKER_URL",
    default="",
    help="Celery's broker for --events (env PILOTFISH_BROKER_URL); empty: --redis-url.",
)
@click.option(
    "--events/--no-events",
    default=False,
    show_default=True,
    help="Send Celery events and take remote-control commands (Flower).",
)
@click.option(
    "--log-format",
    envvar="PILOTFISH_LOG_FORMAT",
    type=click.Choice(logformat.FORMATS),
    default="text",
    show_default=True,
    help="Log lines as text, or one JSON object a line (env PILOTFISH_LOG_FORMAT).",
)
@click.option(
    "--payload-sandbox",
    envvar="PILOTFISH_PAYLOAD_SANDBOX",
    type=click.Choice(SANDBOXES),
    default=DEFAULTS.payload_sandbox,
    show_default=True,
    help="How payloads run: bwrap (own namespaces, nothing of the deployment visible; the pilot refuses to "
    "start where bwrap cannot) or none (unconfined) (env PILOTFISH_PAYLOAD_SANDBOX).",
)
@click.option(
    "--payload-shared-paths",
    envvar="PILOTFISH_PAYLOAD_SHARED_PATHS",
    default=DEFAULTS.payload_shared_paths,
    show_default=True,
    help="':'-separated places under which a job may ask its sandbox for a path (sandbox_ro, sandbox_rw) "
    "(env PILOTFISH_PAYLOAD_SHARED_PATHS).",
)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def pilot(
    redis_url: str,
    vo: str,
    queue: str,
    prefix: str,
    cores: int | None,
    mem: int | None,
    tmp: int | None,
    idle_timeout: float,
    stop_margin: float,
    wall: float | None,
    heartbeat: float | None,
    lease: float,
    workdir: Path | None,
    max_jobs: int | None,
    own_machine: bool,
    kill_grace: float,
    output_cap: int,
    log_interval: float,
    mem_tolerance: float,
    priority_factor: int,
    jobstatus_hold: float,
    broker_url: str,
    events: bool,
    log_format: str,
    payload_sandbox: str,
    payload_shared_paths: str,
    verbose: int,
) -> None:
    """Run a pilot: fill this node's cores with the most urgent jobs that fit, until its time is up."""
    seal()  # its environment, memory and descriptors closed to other processes of the user (its payloads)
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    root = logging.getLogger()
    if root.handlers:  # `pilotfish -v pilot`: the command's own level, if more verbose
        level = min(level, root.level)
    tags = logformat.setup("pilot", log_format, level, vo=vo)
    try:
        # The director hands the credentials in a one-use file (taskqueues.credentials), never the environment.
        handed = take_pilot_file(os.environ)
        # A pod gets them as files its Secret is mounted as (PILOTFISH_REDIS_URL_FILE...: the Helm chart).
        mounted = file_values(os.environ, ("PILOTFISH_REDIS_URL", "PILOTFISH_BROKER_URL"))
        for option, variable in (("redis_url", "PILOTFISH_REDIS_URL"), ("broker_url", "PILOTFISH_BROKER_URL")):
            if (
                variable in mounted
                and click.get_current_context().get_parameter_source(option) is ParameterSource.COMMANDLINE
            ):
                flag = "--" + option.replace("_", "-")
                raise ConfigError(f"both {flag} and ${variable}{FILE_SUFFIX} are given: give only one")
        redis_url = handed.get("PILOTFISH_REDIS_URL") or mounted.get("PILOTFISH_REDIS_URL", redis_url)
        broker_url = handed.get("PILOTFISH_BROKER_URL") or mounted.get("PILOTFISH_BROKER_URL", broker_url)
        config = PilotConfig(
            queue=queue,
            redis_url=redis_url,
            vo=vo,
            prefix=prefix,
            workdir=workdir if workdir is not None else Path(tempfile.gettempdir()) / f"pilotfish-pilot-{os.getpid()}",
            scratch_workdir=workdir is None,
            cores=cores,
            mem=mem,
            tmp=tmp,
            lease=lease,
            heartbeat_interval=heartbeat,
            idle_timeout=idle_timeout,
            stop_margin=stop_margin,
            wall=wall,
            max_jobs=max_jobs,
            own_machine=own_machine,
            kill_grace=kill_grace,
            output_cap=output_cap,
            log_interval=log_interval,
            mem_tolerance=mem_tolerance,
            priority_factor=priority_factor,
            jobstatus_revert_hold=jobstatus_hold,
            payload_sandbox=payload_sandbox,
            payload_shared_paths=payload_shared_paths,
        )
        runner = Pilot(config, observer=make_observer(events, config, broker_url))
        tags.set(pilot=runner.name)
        reason = runner.run()
    except PilotfishError as exc:
        if log_format == "json":
            logging.getLogger("pilot.agent").error("%s", exc)
            sys.exit(1)
        raise click.ClickException(str(exc)) from None
    last = f"pilot {runner.name} stopped: {reason}; {runner.processed} payloads processed"
    if log_format == "json":
        logformat.announce("pilot.agent", last)
    else:
        click.echo(last, err=True)


if __name__ == "__main__":
    pilot()
