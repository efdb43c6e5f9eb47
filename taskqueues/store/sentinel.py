"""A redis-py client from a ``redis_url``: a plain server, or a primary that Redis Sentinel names.

The Sentinel form is the one Celery (kombu) and Flower take for their broker, so one URL serves the store
and the broker alike::

    sentinel://[user:password@]host1:26379[/db];sentinel://host2:26379;sentinel://host3:26379

Each ``;``-separated part names one sentinel; the user, password and database of the first part are those
of the primary (as kombu reads them). The primary's name is not in the URL (kombu refuses unknown query
parameters): it is the ``redis_sentinel_master`` setting, handed to Celery as the ``master_name`` transport
option and to pilots as ``$PILOTFISH_REDIS_SENTINEL_MASTER`` (:data:`MASTER_VARIABLE`), ``mymaster`` when
unset. The client asks the sentinels for the primary at each new connection, so after a failover every
connection that broke reconnects to the promoted replica by itself; a connection still open to a demoted
primary gets ``READONLY`` and redis-py drops it the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel

from ..errors import ConfigError

MASTER_VARIABLE = "PILOTFISH_REDIS_SENTINEL_MASTER"
DEFAULT_MASTER = "mymaster"
SENTINEL_PORT = 26379


def is_sentinel(url: str) -> bool:
    return url.startswith("sentinel://")


def master_name(master: str | None = None) -> str:
    """``master``, else ``$PILOTFISH_REDIS_SENTINEL_MASTER``, else ``mymaster``."""
    return master or os.environ.get(MASTER_VARIABLE) or DEFAULT_MASTER


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``sentinel://`` URL: the sentinels, and the primary's credentials and database."""

    sentinels: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    db: int

    @classmethod
    def parse(cls, url: str) -> SentinelURL:
        sentinels: list[tuple[str, int]] = []
        first = None
        for part in url.split(";"):
            parts = urlsplit(part.strip())
            if parts.scheme != "sentinel" or not parts.hostname:
                raise ConfigError(
                    f"redis_url {url!r}: {part!r} is not sentinel://host:port (every ';'-separated "
                    "part names one sentinel)"
                )
            try:
                port = parts.port or SENTINEL_PORT
            except ValueError:
                raise ConfigError(f"redis_url {url!r}: {part!r} has a bad port") from None
            sentinels.append((parts.hostname, port))
            first = first or parts
        assert first is not None
        path = first.path.strip("/")
        if path and not path.isdigit():
            raise ConfigError(f"redis_url {url!r}: the database {path!r} is not a number")
        return cls(
            tuple(sentinels),
            unquote(first.username) if first.username else None,
            unquote(first.password) if first.password else None,
            int(path or 0),
        )


def client(url: str, *, master: str | None = None, **kwargs: Any) -> redis.Redis:
    """A client of ``url``: ``redis://``, ``rediss://``, ``unix://`` as redis-py reads them, or ``sentinel://``
    (the primary named ``master``: :func:`master_name`)."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **kwargs)
    parsed = SentinelURL.parse(url)
    sentinel = Sentinel(list(parsed.sentinels), socket_timeout=kwargs.get("socket_timeout", 5.0))  # type: ignore[no-untyped-call]
    primary: redis.Redis = sentinel.master_for(
        master_name(master),
        redis_class=redis.Redis,
        db=parsed.db,  # type: ignore[no-untyped-call]
        username=parsed.username,
        password=parsed.password,
        **kwargs,
    )
    return primary


def transport_options(url: str, master: str | None = None) -> dict[str, Any]:
    """Celery's ``broker_transport_options`` (and ``result_backend_transport_options``) for ``url``."""
    return {"master_name": master_name(master)} if is_sentinel(url) else {}
