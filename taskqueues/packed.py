"""A script call whose constant part is packed once: the match hot path.

redis-py encodes every argument of every call; a pilot's match sends the same dozens of task-queue keys
each time, so they are packed into RESP bytes once per change and only the few varying arguments are
packed per call. Replies and errors go through redis-py's own parser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def bulk(value: Any) -> bytes:
    """One RESP bulk string."""
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_script(sha: str, keys: Sequence[str], args: Sequence[Any]) -> bytes:
    """One EVALSHA command in RESP."""
    parts = [b"EVALSHA", sha, len(keys), *keys, *args]
    return b"*%d\r\n" % len(parts) + b"".join(bulk(p) for p in parts)


class PackedCall:
    """EVALSHA of ``script`` with a fixed list of keys; rebuild it when the keys change."""

    def __init__(self, client: redis.Redis, script: Script, keys: Sequence[str], n_args: int) -> None:
        self.client = client
        self.script = script
        self.keys = list(keys)
        self._head = b"*%d\r\n" % (3 + len(keys) + n_args) + bulk(b"EVALSHA") + bulk(script.sha) + bulk(len(keys))
        self._head += b"".join(bulk(k) for k in keys)
        self._n_args = n_args

    def pack(self, args: Sequence[Any]) -> bytes:
        """The whole command in RESP, to send alone or with others in one round trip."""
        if len(args) != self._n_args:
            raise ValueError(f"expected {self._n_args} arguments, got {len(args)}")
        return self._head + b"".join(bulk(a) for a in args)

    def __call__(self, args: Sequence[Any]) -> Any:
        packed = self.pack(args)
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
            try:
                return conn.read_response()
            except NoScriptError:
                self.client.script_load(self.script.script)
                conn.send_packed_command([packed])  # type: ignore[no-untyped-call]
                return conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            pool.release(conn)
