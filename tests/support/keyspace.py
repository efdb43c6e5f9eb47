"""A server's whole keyspace as data: what a refused or repeated call must leave byte-identical."""

from __future__ import annotations

import redis


def snapshot(client: redis.Redis) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key with its DUMP and its time to live: equal snapshots mean a byte-identical keyspace (read in
    one round trip after the KEYS)."""
    keys = sorted(client.keys("*"))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    replies = pipe.execute()
    return {key: (replies[2 * i], replies[2 * i + 1]) for i, key in enumerate(keys)}


def text(value: object) -> str:
    """A value read from Redis as text (bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def dump_all(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key of the database with its DUMP (what a refused call must leave byte-identical)."""
    keys = sorted(client.scan_iter(count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
    return dict(zip(keys, pipe.execute(), strict=True))


def restore_all(client: redis.Redis, dumped: dict[bytes, bytes]) -> None:
    """The database emptied and set back to ``dumped`` (one round trip)."""
    pipe = client.pipeline(transaction=True)
    pipe.flushdb()
    for key, value in dumped.items():
        pipe.restore(key, 0, value)
    pipe.execute()
