"""Who may do what in Redis: the control plane's user and one pilot user per community (Redis ACL).

The control plane (Celery worker and beat, directors, operators' commands, Flower) connects as
:data:`CONTROL_USER`, which may do anything. A pilot connects as ``pf-pilot-<vo>``, which may only:

* touch its own community's keys (``~<prefix>:{<vo>}:*``) with the commands the pilot's scripts and reads
  use (:data:`PILOT_COMMANDS`): no ``FLUSHALL``, ``CONFIG``, ``KEYS``, ``SCAN``, ``DEL``, ``ACL``...;
* listen on its community's wake channel and the pilots' own channels (kill and stop requests), and
  publish on its release channel (``complete`` announces there the dependents the control plane evaluates);
* speak Celery's event and remote-control protocols on the broker (Flower sees pilots as workers): publish
  on ``celeryev``, listen (only) on the broadcast ``celery.pidbox``, and answer into the reply queues.

The store's operations are functions of one library (:mod:`taskqueues.store.functions`); a pilot may call them
(``+fcall``; it runs :data:`PILOT_FUNCTIONS`) but not load, replace or delete any, and runs no Lua of its own
(no ``eval``, ``evalsha``, ``script``). Redis checks a function's commands against the caller's rights, so a
pilot still needs the data commands they use on its community's keys, and could run those directly: what
it can do is bounded by the key pattern, not by the function (see docs/operator/security.md). Every rule
has the form Redis and Valkey recommend: no rule on a command's first argument (deprecated), selectors for
rights that hold only on some keys or channels.

A payload never holds either credential: :func:`scrubbed` takes them out of its environment.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from ..errors import ConfigError

CONTROL_USER = "pf-control"

#: Commands a pilot runs, directly or inside the store's scripts (taskqueues/store/lua), on its community's keys.
PILOT_DATA_COMMANDS = (
    "hget",
    "hset",
    "hsetnx",
    "hmget",
    "hdel",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zscore",
    "zcard",
    "zcount",
    "smembers",
    "sadd",
    "incr",
    "incrby",
    "exists",
    "publish",
    "hincrby",
    "hincrbyfloat",
)
#: The store's functions a pilot calls (taskqueues/store/lua/<name>.lua, function ``pf_<name>``). The ACL grants
#: ``fcall`` whole: a rule on a command's first argument (``+fcall|pf_match``) is deprecated (Redis 7, Valkey log
#: "misuse of ACL"), and a function runs each of its commands with the caller's rights, so calling another of the
#: library's functions gives a pilot nothing its own commands on its own keys do not (it cannot load functions).
PILOT_FUNCTIONS = ("start", "complete", "fail", "heartbeat", "match", "ship_log")
#: Commands of the connection, and ``fcall`` (the store's functions).
PILOT_SESSION_COMMANDS = (
    "ping",
    "hello",
    "auth",
    "select",
    "quit",
    "echo",
    "client|setname",
    "client|setinfo",
    "client|getname",
    "client|id",
    "multi",
    "exec",
    "discard",
    "time",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "fcall",
)
#: What Celery's remote control needs of the broker's keys: the lookup of the reply exchange's table and the
#: LPUSH of a reply into the asker's reply queue. A pilot declares nothing on the broker (its remote-control
#: queue is bound to a fanout exchange, carried by PUBLISH/SUBSCRIBE: pilot.remote_control.listen), so it writes no
#: ``_kombu.binding.*`` table and runs none of kombu's Lua (binding expiry, the ``unacked`` mutex): no ``eval``,
#: ``evalsha`` or ``script``.
PILOT_BROKER_COMMANDS = ("smembers", "lpush")
PILOT_COMMANDS = tuple(dict.fromkeys((*PILOT_SESSION_COMMANDS, *PILOT_DATA_COMMANDS)))


def pilot_user(vo: str) -> str:
    """The ACL user of the pilots of community ``vo``."""
    return f"pf-pilot-{vo}"


def pilot_rules(prefix: str, vo: str, db: int = 0) -> list[str]:
    """ACL rules (``ACL SETUSER`` arguments, after ``reset``) of ``vo``'s pilot user.

    The broker's keys and the remote-control channel are granted through selectors (:func:`pilot_selectors`,
    added by :func:`apply`), so the broker commands never apply to the store's keys, and the channel where
    Flower's commands are broadcast can be listened to but not published on.
    """
    base = f"{prefix}:{{{vo}}}:"
    return [
        "resetkeys",
        f"~{base}*",
        "resetchannels",
        f"&{base}wake:*",
        f"&{base}release",
        f"&{base}ctl:*",
        f"&/{db}.celeryev/*",
        "-@all",
        *(f"+{c}" for c in PILOT_COMMANDS),
    ]


#: Broker keys a pilot touches: the reply exchange's binding table, read only, and the reply queues it answers
#: into (``<id>.reply.celery.pidbox``; kombu's own keys start with ``_``).
BROKER_KEYS = ("%R~_kombu.binding.reply.celery.pidbox", "[^_]*.reply.celery.pidbox*")
#: Commands on Celery's broadcast channel: listen only. Only the control plane (Flower, ``celery control``)
#: publishes there, so no pilot user can shut down, revoke or drain another pilot, of its community or another.
PIDBOX_COMMANDS = ("subscribe", "psubscribe", "unsubscribe", "punsubscribe")


def broker_selector() -> str:
    """The ACL selector of what Celery's remote control needs of the broker's keys: those commands, on those
    keys only."""
    keys = " ".join(k if k.startswith("%") else f"~{k}" for k in BROKER_KEYS)
    return f"({keys} {' '.join(f'+{c}' for c in PILOT_BROKER_COMMANDS)})"


def pidbox_selector(db: int = 0) -> str:
    """The ACL selector that lets a pilot listen, and only listen, on Celery's broadcast channel."""
    return f"(&/{db}.celery.pidbox {' '.join(f'+{c}' for c in PIDBOX_COMMANDS)})"


def pilot_selectors(db: int = 0) -> list[str]:
    """The selectors :func:`apply` adds to a pilot user's rules (``broker=True``)."""
    return [broker_selector(), pidbox_selector(db)]


def control_rules() -> list[str]:
    return ["resetkeys", "~*", "resetchannels", "&*", "+@all"]


def new_password() -> str:
    """A password safe in a URL without quoting (the chart's rule: URL-safe characters only)."""
    return secrets.token_urlsafe(24)


def server_version(client: redis.Redis) -> tuple[int, int]:
    """(major, minor) of the server (Valkey reports the Redis version it is compatible with, 7.2)."""
    info = client.info("server")
    text = str(info.get("redis_version") or info.get("valkey_version") or "0.0")
    major, _, rest = text.partition(".")
    return int(major), int(rest.partition(".")[0] or 0)


#: Selectors came with Redis 7.0; ``client|setinfo`` (which redis-py sends on connect) with 7.2.
MIN_VERSION = (7, 2)


def apply(
    client: redis.Redis, user: str, password: str, rules: Sequence[str], *, broker: bool = False, db: int = 0
) -> None:
    """Create or reset ``user`` with ``password`` and ``rules`` (``ACL SETUSER``), in one command.

    ``broker`` adds what Celery's remote-control protocol needs, as selectors (:func:`pilot_selectors`, for
    database ``db``). Needs Redis >= 7.2 or Valkey (:data:`MIN_VERSION`).
    """
    version = server_version(client)
    if version < MIN_VERSION:
        raise ConfigError(
            f"Redis {version[0]}.{version[1]} cannot hold Pilotfish's ACL users: Redis >= 7.2 or "
            "Valkey is needed (ACL selectors)"
        )
    extra = pilot_selectors(db) if broker else []
    client.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules, *extra)  # type: ignore[no-untyped-call]


def save(client: redis.Redis) -> None:
    """Write the server's users to its ACL file (``ACL SAVE``: they survive a restart)."""
    client.execute_command("ACL", "SAVE")  # type: ignore[no-untyped-call]


def with_credentials(url: str, user: str, password: str) -> str:
    """``url`` with ``user``/``password`` as its credentials."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigError(f"cannot put credentials into {parts.scheme!r} URL (redis:// or rediss:// only)")
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


_URL_VARIABLES = (
    "PILOTFISH_REDIS_URL",
    "PILOTFISH_PILOT_REDIS_URL",
    "PILOTFISH_BROKER_URL",
    "PILOTFISH_PILOT_BROKER_URL",
)

#: Environment variables that carry credentials, whatever their value looks like: the URL settings, and the
#: names of the files that hold them (``PILOTFISH_REDIS_URL_FILE``...: a process this one starts, a pilot on
#: another node, must not read this one's files, nor find a path that is not there).
SECRET_VARIABLES = frozenset(
    {
        *_URL_VARIABLES,
        *(f"{name}_FILE" for name in _URL_VARIABLES),
        "REDISCLI_AUTH",
        "FLOWER_BASIC_AUTH",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
    }
)
_SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@", re.IGNORECASE)


def is_secret(name: str, value: str) -> bool:
    """Whether an environment variable must not reach a payload."""
    return name in SECRET_VARIABLES or bool(_SECRET_NAME.search(name)) or bool(_URL_WITH_PASSWORD.search(value))


def scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without any variable that carries a credential (what a payload's environment is built on)."""
    return {name: value for name, value in env.items() if not is_secret(name, value)}
