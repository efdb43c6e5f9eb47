"""Operator commands of the control plane: config, submit, cancel, kill, drain, matcher, health, acl."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import click

from taskqueues import logformat
from taskqueues.context import Context
from taskqueues.credentials import SECRET_SETTINGS
from taskqueues.errors import PilotfishError, ValidationError
from taskqueues.settings import Settings
from taskqueues.store import (
    CONTROL_USER,
    DEFAULT_GROUP,
    Keys,
    check_account_name,
    control_rules,
    default_owner,
    new_password,
    pilot_rules,
    pilot_selectors,
    pilot_user,
    shown_url,
)
from taskqueues.webhook import check_webhook

from ..calls import Calls
from ..workflow import load_workflow


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config(as_json: bool) -> None:
    """Print the effective settings and where each comes from (URLs without their passwords)."""
    rows = [
        (name, shown_url(value) if name in SECRET_SETTINGS and value else value, source)
        for name, value, source in Settings.load().items()
    ]
    if as_json:
        click.echo(json.dumps({name: {"value": value, "source": source} for name, value, source in rows}, indent=2))
        return
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        click.echo(f"{name:<{width}}  {value!s:<40}  ({source})")


@click.command()
@click.argument("workflow")  # a missing or unreadable file is the loader's one-line error
@click.option("--remote", is_flag=True, help="Submit through the Celery broker (needs a running matcher).")
@click.option("--timeout", default=30.0, show_default=True, help="With --remote: seconds to wait for the answer.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--owner", default="", help="Who submits (default: the file's owner, else the local user).")
@click.option("--group", default="", help='The group charged (default: the file\'s group, else "default").')
@click.option("--notify", default="", metavar="URL", help="A webhook called (POST, JSON) when the request ends.")
def submit(workflow: str, remote: bool, timeout: float, as_json: bool, owner: str, group: str, notify: str) -> None:
    """Submit a workflow file (TOML or JSON) as one request."""
    checks: list[Callable[[], object]] = [
        lambda: owner and check_account_name(owner, "owner"),
        lambda: group and check_account_name(group, "group"),
        lambda: notify and check_webhook(notify, "--notify"),
    ]
    for check in checks:
        try:
            check()
        except ValidationError as exc:
            raise click.ClickException(str(exc)) from None
    if remote:
        from ..app.celery_app import configure

        ctx = Context(Settings.load())
        loaded = load_workflow(workflow)
        owner, group = owner or loaded.owner or default_owner(), group or loaded.group or DEFAULT_GROUP
        app = configure(ctx)
        with open(workflow, "rb") as handle:
            data = handle.read()
        raw = json.loads(data) if workflow.endswith(".json") else __import__("tomllib").loads(data.decode())
        raw.update(owner=owner, group=group)  # resolved here: the matcher's user is not the submitter
        if notify:
            raw["notify"] = notify
        reply = app.send_task("pilotfish.submit_workflow", args=[raw, workflow]).get(timeout=timeout)
        request, ids, eta = reply["request"], reply["ids"], reply["eta"]
    else:
        # Through the API (api_url) the owner is the token's user; locally the file's, else the local user.
        done = _client().submit(workflow, owner=owner or None, group=group or None, notify=notify or None)
        request, ids, eta = done.id, done.ids, done.eta
    if as_json:
        click.echo(json.dumps({"request": request, "ids": ids, "eta": eta}))
    else:
        when = time.strftime("%H:%M:%S", time.localtime(eta))
        click.echo(f"request {request}: {len(ids)} jobs submitted, ETA {when}")


def _client() -> Calls:
    """The deployment the commands act on: through its API when api_url is set, else its store."""
    from ..client import Client

    return Client.from_settings()


@click.command()
@click.argument("targets", nargs=-1, required=True)
@click.option("--reason", default="cancelled by operator", show_default=True)
def cancel(targets: tuple[str, ...], reason: str) -> None:
    """Cancel requests (by request id) or single jobs (by job id): waiting jobs end now, running ones are
    stopped by their pilot at once."""
    client = _client()
    _each(targets, lambda target: client.cancel(target, reason))


@click.command()
@click.argument("jobs", nargs=-1, required=True)
@click.option("--reason", default="killed by operator", show_default=True)
def kill(jobs: tuple[str, ...], reason: str) -> None:
    """Kill running jobs: their pilot, told on its own channel, terminates the payload at once."""
    client = _client()
    _each(jobs, lambda job: client.kill(job, reason))


@click.command()
@click.argument("pilots", nargs=-1, required=True)
@click.option(
    "--shutdown",
    is_flag=True,
    help="Give the running payloads back to their task queue now instead of letting them finish.",
)
@click.option("--reason", default=None, help="Why (shown in the pilot's log and record).")
def drain(pilots: tuple[str, ...], shutdown: bool, reason: str | None) -> None:
    """Drain PILOTS (names as in Flower): they take no new work, let their payloads finish, then exit."""
    client = _client()
    _each(pilots, lambda name: client.drain(name, shutdown=shutdown, reason=reason))


def _each(targets: tuple[str, ...], act: Callable[[str], str]) -> None:
    """Act on every target; errors are one line each on stderr, and the status is non-zero if any failed."""
    failed = False
    for target in targets:
        try:
            click.echo(act(target))
        except PilotfishError as exc:
            click.echo(f"pilotfish: error: {exc}", err=True)
            failed = True
    if failed:
        sys.exit(1)


@click.command()
@click.option("--beat/--no-beat", default=True, help="Run Celery beat inside this worker.")
@click.option("--beat-only", is_flag=True, help="Run only Celery beat (exactly one per deployment).")
@click.option("--concurrency", type=int, default=2, show_default=True)
@click.option("--loglevel", default="INFO", show_default=True)
def matcher(beat: bool, beat_only: bool, concurrency: int, loglevel: str) -> None:
    """Run the control plane: a Celery worker (with beat unless --no-beat), or beat alone."""
    from taskqueues.store import OutageLogFilter

    from ..app import beat as beat_module
    from ..app import celery_app
    from ..app.celery_app import configure

    settings = Settings.load()
    app = configure(Context(settings))
    logformat.setup("beat" if beat_only else "worker", settings.log_format, loglevel, vo=settings.vo)
    # Celery logs every retry of a broker it cannot reach, with tracebacks: one outage, two lines instead.
    quiet = OutageLogFilter(beat_module.OUTAGE if beat_only else celery_app.OUTAGE)
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)
    banner = ["--quiet"] if settings.log_format == "json" else []  # no banner: every line is a JSON object
    if banner:
        celery_app.say_through_logging()
    if beat_only:
        app.start([*banner, "beat", f"--loglevel={loglevel}"])
        return
    argv = [
        *banner,
        "worker",
        f"--loglevel={loglevel}",
        f"--concurrency={concurrency}",
        "--pool=threads",
        "--without-mingle",
        "--without-gossip",
        "-E",
    ]
    if beat:
        argv.append("--beat")
    app.worker_main(argv)


@click.command()
@click.option("--component", type=click.Choice(["worker", "beat", "director", "pilot"]))
@click.option("--redis", "check_redis", is_flag=True, help="Only check that Redis answers.")
@click.option("--max-age", default=60.0, show_default=True, help="Seconds this process's last beat may be old.")
def health(component: str | None, check_redis: bool, max_age: float) -> None:
    """Exit 0 when Redis answers and (with --component) that component's process on THIS host beat recently.

    Only the process's own entry counts (see taskqueues/store/control.py): ``<component>@<host name>``, or for a
    pilot its own name (the same environment gives the same name), so a Kubernetes probe run in a pod
    judges that pod's process and never a sibling's. One PING and one ZSCORE.
    """
    ctx = Context(Settings.load())
    try:
        ctx.store.ping()
    except Exception as exc:
        raise PilotfishError(f"Redis does not answer: {exc}") from None
    if check_redis or component is None:
        click.echo("redis: ok")
        return
    who = component
    if component == "pilot":
        from pilot.agent.config import identity_from_environment

        who = f"pilot:{identity_from_environment().name}"
    now = time.time()
    name, seen = ctx.store.control.last_beat(who)
    if seen is None or now - seen > max_age:
        when = "never beat" if seen is None else f"last beat {now - seen:.0f} s ago"
        others = ctx.store.control.others_beating(who, now - max_age)
        click.echo(
            f"{component}: {name} {when} (max age {max_age:.0f} s); {others} other {component} process(es) "
            f"beat within it, which do not count for this one",
            err=True,
        )
        sys.exit(1)
    click.echo(f"{component}: ok ({name}, last beat {now - seen:.0f} s ago)")


def acl_commands(prefix: str, vo: str, db: int, control_password: str, pilot_password: str) -> list[str]:
    """``ACL SETUSER`` commands (redis-cli syntax) making Pilotfish's two users, as :mod:`taskqueues.store.access` has
    them (Redis >= 7.2 or Valkey). ``Keys`` refuses a glob character in ``prefix`` or ``vo``, which would widen the
    pilots' key pattern to other communities' keys."""
    Keys(prefix=prefix, vo=vo)
    control = ["ACL", "SETUSER", CONTROL_USER, "reset", "on", f">{control_password}", *control_rules()]
    pilot = [
        "ACL",
        "SETUSER",
        pilot_user(vo),
        "reset",
        "on",
        f">{pilot_password}",
        *pilot_rules(prefix, vo, db),
        *(f'"{selector}"' for selector in pilot_selectors(db)),
    ]
    return [" ".join(control), " ".join(pilot)]


@click.command()
@click.option("--vo", help="The community (default: the vo setting).")
@click.option("--prefix", help="The key prefix (default: the prefix setting).")
@click.option("--db", type=click.IntRange(min=0), help="The database (default: redis_url's, else 0).")
def acl(vo: str | None, prefix: str | None, db: int | None) -> None:
    """Print the ACL SETUSER commands of Pilotfish's two users, for a Redis or Valkey (>= 7.2) you run yourself.

    pf-control is the control plane's user (everything); pf-pilot-VO may run only the pilots' commands on VO's
    keys and channels and Celery's broker keys (taskqueues/store/access.py). Both get a new random password. Feed
    the commands to redis-cli as an administrator (``pilotfish acl > users.txt; redis-cli ... < users.txt``),
    then give the control plane redis_url with pf-control's password and the pilots pilot_redis_url with
    pf-pilot-VO's (the chart's externalRedis.url and externalRedis.pilot.url).
    """
    settings = Settings.load()
    vo, prefix = vo or settings.vo, prefix or settings.prefix
    if db is None:
        path = urlsplit(settings.redis_url).path.strip("/")
        db = int(path) if path.isdigit() else 0
    control, pilot = new_password(), new_password()
    for line in acl_commands(prefix, vo, db, control, pilot):
        click.echo(line)
    click.echo("pilotfish: both users get new passwords; their URLs (put in your host and port):", err=True)
    for who, user, password in (
        ("control plane", CONTROL_USER, control),
        ("pilots", pilot_user(vo), pilot),
    ):
        click.echo(f"  {who + ':':<14} redis://{user}:{password}@HOST:PORT/{db}", err=True)


@click.command()
@click.argument("workflow")  # a missing or unreadable file is the loader's one-line error
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
def run(workflow: str, timeout: float | None) -> None:
    """Run WORKFLOW to completion on this machine: Redis (embedded unless configured), director, pilots.

    An embedded server this run had to start is stopped when it ends (one that ``pilotfish up`` or an
    earlier command started keeps running)."""
    from taskqueues import embedded

    from .run import Interrupt, run_workflow

    settings = Settings.load()
    started_here = not settings.redis_url and embedded.running(settings.state_dir) is None
    with Interrupt() as interrupt:
        try:
            summary = run_workflow(Context(settings, start_redis=True), workflow, timeout=timeout, interrupt=interrupt)
        finally:
            if started_here:
                embedded.stop(settings.state_dir)
        if summary.interrupted is not None:
            with contextlib.suppress(OSError):  # a closed terminal
                click.echo(summary.interrupt_line(), err=True)
            sys.exit(128 + summary.interrupted.value)
    for line in summary.lines():
        click.echo(line)
    if not summary.ok:
        sys.exit(2)


@click.command()
def up() -> None:
    """Start every part of the local deployment that is not running: Redis, Celery worker, beat, director,
    Flower, the HTTP API (what a supervisor runs after any of them died)."""
    from .deploy import up as start

    ctx = Context(Settings.load(), start_redis=True)
    for name, state in start(ctx):
        click.echo(f"{name}: {state}")
    click.echo(f"Redis: {ctx.where}")
    from .flower import login_file

    click.echo(
        f"Flower: http://127.0.0.1:{ctx.settings.flower_port} (login in {login_file(ctx.settings.state_dir)}, "
        "or: pilotfish flower --login)"
    )
    click.echo(f"API: http://127.0.0.1:{ctx.settings.api_port} (tokens: pilotfish token create USER --group G)")
    sandbox_warning = payload_sandbox_warning(ctx.settings.payload_sandbox)
    if sandbox_warning:
        click.echo(f"Warning: {sandbox_warning}", err=True)


def payload_sandbox_warning(kind: str) -> str:
    """What ``up`` must say about the payload sandbox on this host: unconfined payloads, or pilots that will
    refuse to start because bwrap is missing; empty when all is well."""
    import shutil

    from taskqueues.sandbox import NONE, none_warning

    if kind == NONE:
        return none_warning()
    if shutil.which("bwrap") is None:
        return (
            "payload_sandbox = bwrap but bubblewrap (bwrap) is not installed here: local pilots will refuse to "
            "start (install the bubblewrap package, or set payload_sandbox = none)"
        )
    return ""


@click.command()
def down() -> None:
    """Stop the local deployment and every process it started (the embedded Redis keeps its data)."""
    from .deploy import down as stop

    for name, state in stop(Context(Settings.load())):
        click.echo(f"{name}: {state}", nl=True)
