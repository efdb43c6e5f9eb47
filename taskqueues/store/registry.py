"""The director's pilot registry: what each director submitted, so that a later one can adopt it.

One hash (``Keys.provisioned``) maps ``queue|kind|batch id`` to the record the director wrote when it
submitted the pilot (its shape, state, options, and what the batch system needs to find it again). The
registry is the only code that reads or writes that hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .guard import guarded
from .part import Part
from .records import text as _text


class Registry(Part):
    """The pilots the directors of one community submitted, by queue and batch system (``store.registry``)."""

    @staticmethod
    def name(queue: str, kind: str, batch_id: str) -> str:
        """The field of one pilot."""
        return f"{queue}|{kind}|{batch_id}"

    @guarded("recording a submitted pilot")
    def record(self, queue: str, kind: str, batch_id: str, record: dict[str, Any]) -> None:
        """Write (or rewrite) the record of one pilot."""
        self.client.hset(self.keys.provisioned, self.name(queue, kind, batch_id), json.dumps(record))

    @guarded("forgetting submitted pilots")
    def forget(self, queue: str, kind: str, batch_ids: Iterable[str]) -> None:
        """Drop the records of these pilots (ended, cancelled, or retired)."""
        names = [self.name(queue, kind, b) for b in batch_ids]
        if names:
            self.client.hdel(self.keys.provisioned, *names)

    @guarded("reading the submitted pilots")
    def of(self, queue: str, kind: str) -> dict[str, dict[str, Any]]:
        """Batch id -> record, for the pilots of one queue in one batch system."""
        prefix = self.name(queue, kind, "")
        out: dict[str, dict[str, Any]] = {}
        for key, raw in self.client.hgetall(self.keys.provisioned).items():
            name = _text(key)
            if name.startswith(prefix):
                out[name.removeprefix(prefix)] = json.loads(raw)
        return out
