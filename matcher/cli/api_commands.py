"""``pilotfish serve`` (the HTTP API), ``pilotfish token`` (the tokens the deployment issues) and ``pilotfish
audit`` (who did what). ``token`` speaks to the store (it is the deployment owner's, with the control plane's
credentials); ``audit`` goes through the API when ``api_url`` is set (operators only)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import click

from taskqueues.context import Context
from taskqueues.errors import ConfigError, ValidationError
from taskqueues.settings import Settings
from taskqueues.units import parse_duration_s

__all__ = ["audit", "serve", "token"]


@click.command("serve")
@click.option("--host", default=None, help="Address to listen on [default: the api_host setting, 127.0.0.1].")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="[default: the api_port setting, 8470]")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes serving the port (each with its own rate-limit buckets): one per core the API may use.",
)
def serve(host: str | None, port: int | None, workers: int) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, interactive docs at /docs) for holders of a token."""
    import uvicorn

    from ..api.app import create_app

    settings = Settings.load()
    host, port = host or settings.api_host, port or settings.api_port
    # Many workers: each process builds its app from the settings (an import string uvicorn can give to them).
    target = "matcher.api.app:app_from_environment" if workers > 1 else create_app(settings)
    uvicorn.run(
        target,
        factory=workers > 1,
        workers=workers if workers > 1 else None,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=5,
        server_header=False,
    )


@click.group("token")
def token() -> None:
    """Tokens of the API: create one for a user (printed once), list them, revoke one."""


def _audit(action: str, target: str, **extra: object) -> None:
    from taskqueues.store import default_owner

    from ..api.audit import AuditLog, audit_file
    from ..api.identity import OPERATOR, Identity

    ctx = Context(Settings.load())
    who = Identity(default_owner(), (), OPERATOR, "local")
    AuditLog(ctx.store, audit_file(ctx.settings)).record(who, action, target, "ok", "cli", **extra)


@token.command("create")
@click.argument("user")
@click.option("--group", "groups", multiple=True, help="A group the user may submit to (repeat).")
@click.option(
    "--role",
    type=click.Choice(["user", "group-admin", "operator"]),
    default="user",
    show_default=True,
    help="user: own jobs; group-admin: the groups' jobs; operator: everything.",
)
@click.option("--expires", default="30d", show_default=True, help='Lifetime (30d, 12h, 3600) or "never".')
@click.option("--write", "write", type=click.Path(dir_okay=False), help="Also write it to this file (mode 0600).")
def create(user: str, groups: tuple[str, ...], role: str, expires: str, write: str | None) -> None:
    """Create a token for USER; it is printed once (only its hash is kept)."""
    lifetime = None if expires == "never" else float(parse_duration_s(expires, field="--expires"))
    if not groups and role != "operator":
        raise ValidationError("a user's token needs at least one --group (where its submissions are charged)")
    store = Context(Settings.load()).store
    record, secret = store.tokens.create(user, groups, role, lifetime)
    _audit("token create", record.id, user=user, role=role, groups=list(record.groups))
    if write:
        _write_token(Path(write), secret)
    click.echo(secret)
    until = "never" if record.expires is None else _when(record.expires)
    click.echo(
        f"token {record.id} for {user} ({role}; groups {', '.join(groups) or 'none'}), expires {until}", err=True
    )


def _write_token(path: Path, token: str) -> None:
    """Write the token to ``path``, mode 0600 (an existing file is made 0600 before it is written); its
    directory is left as it is (it may be the user's home, or /tmp)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, f"{token}\n".encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the token: {exc.strerror or exc}") from None


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(as_json: bool) -> None:
    """Every token: id, user, role, groups, state, expiry, last use (never the token)."""
    store = Context(Settings.load()).store
    now = store.clock()
    records = store.tokens.list()
    if as_json:
        click.echo(json.dumps([{**r.to_json(), "state": r.state(now)} for r in records], sort_keys=True))
        return
    if not records:
        click.echo("no token")
        return
    for r in records:
        expires = "never" if r.expires is None else _when(r.expires)
        used = "never" if r.last_used is None else _when(r.last_used)
        click.echo(
            f"{r.id}  {r.user:<16} {r.role:<11} {r.state(now):<8} groups {','.join(r.groups) or '-'}  "
            f"expires {expires}  last used {used}"
        )


@token.command("revoke")
@click.argument("ident", metavar="ID")
def revoke(ident: str) -> None:
    """Revoke token ID: from now on the API refuses it."""
    store = Context(Settings.load()).store
    record = store.tokens.revoke(ident)
    _audit("token revoke", record.id, user=record.user)
    click.echo(f"token {record.id} of {record.user}: revoked")


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON lines.")
def audit(limit: int, as_json: bool) -> None:
    """The last entries of the audit log: who did what to which request or job, when, from where."""
    from ..client import Client

    for entry in Client.from_settings().audit(limit):
        if as_json:
            click.echo(json.dumps(entry, sort_keys=True))
            continue
        extra = {k: v for k, v in entry.items() if k not in _SHOWN}
        click.echo(
            f"{datetime.datetime.fromtimestamp(float(entry.get('at', 0))).strftime('%Y-%m-%d %H:%M:%S')}  "
            f"{entry.get('who')} ({entry.get('role')}, {entry.get('via')}) from {entry.get('from')}: "
            f"{entry.get('action')} {entry.get('target')} -> {entry.get('outcome')}"
            + (f"  {json.dumps(extra, sort_keys=True)}" if extra else "")
        )


_SHOWN = {"at", "who", "role", "via", "from", "action", "target", "outcome"}
