"""The audit log in the store: who did what to which request or job, when and from where (a capped stream).

The API (``matcher.api.audit``) and the token commands append one entry per call that changes something or is
refused: a JSON object with at least ``at``, ``who``, ``action``, ``target``, ``outcome``. The stream
(``keys.audit``, outside the pilots' key pattern) keeps about the last :data:`CAP` entries; the JSON-lines file
the API writes beside it keeps everything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from .guard import client_url, guarded
from .keys import Keys
from .records import text

#: Entries the stream keeps (approximately: trimmed with MAXLEN ~).
CAP = 100_000


class Audit:
    """The audit stream of one community."""

    def __init__(self, client: redis.Redis, keys: Keys, cap: int = CAP) -> None:
        self.client = client
        self.keys = keys
        self.cap = cap
        self.where = client_url(client)

    @guarded("writing the audit log")
    def record(self, entry: Mapping[str, Any]) -> None:
        self.client.xadd(self.keys.audit, {"e": json.dumps(dict(entry), sort_keys=True)}, maxlen=self.cap)

    @guarded("reading the audit log")
    def read(self, count: int = 50) -> list[dict[str, Any]]:
        """The last ``count`` entries, oldest first."""
        entries: Any = self.client.xrevrange(self.keys.audit, count=count) or []
        out = []
        for _, fields in reversed(entries):
            try:
                out.append(json.loads(text(fields.get(b"e", fields.get("e")))))
            except (ValueError, TypeError):
                continue
        return out
