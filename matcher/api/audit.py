"""The audit log: who did what to which request or job, when, from where, and how it ended.

One JSON object a line in ``api_audit_file`` (default ``<state_dir>/logs/audit.jsonl``, mode 0600) and the same
entry in the store's capped stream (``Store.audit``; ``pilotfish audit`` reads it). Fields: ``at`` (UNIX
seconds), ``who`` (user, or ``-`` when no credential was accepted), ``role``, ``via`` (which token or issuer),
``from`` (the client's address, or ``cli`` for a local command), ``action``, ``target``, ``outcome`` (``ok``, or
``401``/``403``/``4xx``/``5xx`` with the reason).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from taskqueues.errors import PilotfishError
from taskqueues.settings import Settings
from taskqueues.store import Store

from .identity import Identity

log = logging.getLogger(__name__)


def audit_file(settings: Settings) -> Path:
    return Path(settings.api_audit_file or Path(settings.state_dir) / "logs" / "audit.jsonl")


class AuditLog:
    """Appends entries to the file and the store (a store that does not answer loses the entry there, never
    the call: the file keeps it)."""

    def __init__(self, store: Store, path: Path) -> None:
        self.store = store
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(
        self,
        caller: Identity | None,
        action: str,
        target: str,
        outcome: str,
        origin: str,
        **extra: Any,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "at": round(time.time(), 3),
            "who": caller.user if caller else "-",
            "role": caller.role if caller else "-",
            "via": caller.via if caller else "-",
            "from": origin,
            "action": action,
            "target": target,
            "outcome": outcome,
            **extra,
        }
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        try:
            self.store.audit.record(entry)
        except PilotfishError as exc:
            log.warning("audit entry not stored in the store (%s); it is in %s", exc, self.path)
        return entry
