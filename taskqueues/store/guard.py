"""The one choke point where a Redis error becomes a Pilotfish error (dramatiq's ``raise ... from None``).

Every operation of the store runs inside :func:`guard` (through :func:`guarded` on the store's methods),
so whatever redis-py raises reaches the caller as a :class:`~taskqueues.errors.StoreError` subclass whose
message names the server (never its password) and what we were doing::

    cannot reach Redis at redis://127.0.0.1:1/0 (connection refused) while reading request status

The CLI prints that one line; long-running components log it once per outage (:mod:`taskqueues.store.outage`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis

from ..errors import PilotfishError, StoreAccessDenied, StoreError, StoreUnavailable
from . import cluster

P = ParamSpec("P")
R = TypeVar("R")


def shown_url(url: str) -> str:
    """``url`` without its password (the user name stays: it says which ACL user was refused)."""
    if cluster.is_cluster(url):
        return cluster.shown_url(url)
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}@" if parts.username else ""
    netloc += f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def client_url(client: redis.Redis) -> str:
    """Where ``client`` connects, as a URL without password."""
    if cluster.is_slot_client(client):
        return cluster.where(client)
    kw = client.connection_pool.connection_kwargs
    user = f"{kw['username']}@" if kw.get("username") else ""
    service = getattr(client.connection_pool, "service_name", None)
    if service:  # a primary that Sentinel names (taskqueues.store.sentinel)
        return f"sentinel://{user}{service}/{kw.get('db', 0)}"
    if kw.get("path"):
        return f"unix://{user}{kw['path']}?db={kw.get('db', 0)}"
    scheme = "rediss" if client.connection_pool.connection_class.__name__ == "SSLConnection" else "redis"
    return f"{scheme}://{user}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


#: How a store script refuses a call it finds malformed: "<script>: ARGV[3] (back-off): wants ..." (_lib.lua).
_REFUSAL = re.compile(r"^(\w+): ((?:ARGV|KEYS)\b.*)$", re.S)

_CONNECTING = re.compile(r"^Error -?\d+ connecting to \S+?\.?\s+(.*?)\.?$")


def _reason(exc: BaseException) -> str:
    """The heart of a redis-py message, lower case: 'connection refused', 'timeout reading from socket'."""
    text = str(exc).strip() or type(exc).__name__
    match = _CONNECTING.match(text)
    if match:
        text = match.group(1)
    if text[1:2].islower():  # "Connection refused" reads as a clause; "WRONGTYPE ..." keeps its code
        text = text[:1].lower() + text[1:]
    return text.rstrip(".")


def converted(exc: redis.RedisError, where: str, operation: str) -> StoreError:
    """The Pilotfish error for a redis-py error raised at ``where`` (a URL) while doing ``operation``."""
    while_ = f" while {operation}" if operation else ""
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.NoPermissionError):
        return StoreAccessDenied(f"Redis at {where} refused this operation ({_reason(exc)}){while_}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return StoreUnavailable(f"cannot reach Redis at {where} ({_reason(exc)}){while_}")
    if isinstance(exc, redis.ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
        return StoreAccessDenied(f"Redis at {where} refused this operation ({_reason(exc)}){while_}")
    refusal = _REFUSAL.match(str(exc))
    if isinstance(exc, redis.ResponseError) and refusal:  # a script's own check of its arguments (_lib.lua)
        return StoreError(f"script {refusal[1]} refused the call: {refusal[2]}")
    return StoreError(f"Redis at {where} answered an error ({_reason(exc)}){while_}")


@contextmanager
def guard(where: str, operation: str) -> Iterator[None]:
    """Run a block of Redis calls; a redis-py error leaves it as a :class:`StoreError` (see module doc)."""
    try:
        yield
    except PilotfishError:
        raise
    except redis.RedisError as exc:
        raise converted(exc, where, operation) from None


class _Guarded(Protocol):
    where: str


S = TypeVar("S", bound=_Guarded)


def guarded(operation: str) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Decorate a method of an object with a ``where`` attribute: its Redis errors go through :func:`guard`."""

    def wrap(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        @functools.wraps(method)
        def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            with guard(self.where, operation):
                return method(self, *args, **kwargs)

        return call

    return wrap


__all__ = ["client_url", "converted", "guard", "guarded", "shown_url"]
