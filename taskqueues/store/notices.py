"""Request-end notifications (issue 28): a request that names a webhook is watched until it ends, then its
notification is due; senders claim due ones under a lease, call the webhook, and settle each claim.

* ``notifywatch`` (zset, request id → when armed): written by ``submit.lua`` for a request whose record names
  ``notify``, and again by ``resubmit.lua`` (a new time) when jobs of such a request run again;
  :meth:`Notices.ready` takes a request out once its caller found every job ended, and makes its
  notification due (the first of two callers does, the second changes nothing);
* ``notify`` (hash, request id → JSON): the notification — ``url``, ``state`` (waiting after a resubmission,
  due, sending, retry, sent, failed), ``attempts``, the last ``error``, ``at`` (last change), ``next`` (next
  attempt), ``sent``, ``ended``, ``ends`` (which end of the request it tells: a resubmitted request ends again);
* ``notifyq`` (zset, request id → due time): :meth:`Notices.claim` takes what is due and pushes each score to
  the end of its lease, so a sender killed with its claim leaves it due again when the lease ends, and never
  to two senders at once; :meth:`Notices.settle` records the outcome if the caller still holds the claim:
  sent, retry at a time, or failed for good.

Each is an operation of ``notify.lua``, one function without ``_lib`` (see its header for why).

A sender that dies after the webhook answered and before it settled makes the notification be sent again
when the lease ends: receivers tell a repeat by the delivery id the sender puts in a header (the request id,
then ``<request>.<end>`` for its second end and later).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .guard import guarded
from .keys import Keys
from .records import text as _text

#: How a store script is called (``Store.call_script``).
Caller = Callable[[str, Sequence[str], Sequence[Any]], list[Any]]


@dataclass(frozen=True)
class Claim:
    """A notification a sender holds: where to send it, which attempt this is, its claim's token, and which end
    of the request it tells (a request whose jobs were resubmitted ends again: 2, 3...)."""

    request: str
    url: str
    attempt: int
    token: str
    end: int = 1


@dataclass(frozen=True)
class Notice:
    """A request's notification as stored."""

    url: str
    state: str
    attempts: int = 0
    error: str = ""
    at: float | None = None
    next: float | None = None
    sent: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> Notice | None:
        """The notification stored as ``raw`` (None: nothing readable)."""
        try:
            rec = json.loads(raw)
            return cls(
                str(rec["url"]),
                str(rec.get("state", "")),
                int(rec.get("attempts", 0)),
                str(rec.get("error", "")),
                *(float(rec[f]) if rec.get(f) is not None else None for f in ("at", "next", "sent")),
            )
        except (TypeError, ValueError, KeyError):
            return None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


class Notices:
    """The notification queue of one community (``Store.notices``)."""

    def __init__(self, client: redis.Redis, keys: Keys, where: str, call: Caller) -> None:
        self.client, self.keys, self.where = client, keys, where
        self._call = call

    @guarded("reading the watched requests")
    def watched(self, limit: int = 1000) -> list[tuple[str, float]]:
        """Requests with a webhook not seen ended yet, oldest first, each with when it was armed (submitted, or
        its jobs resubmitted: a new time says jobs seen ended may run again)."""
        pairs: Any = self.client.zrange(self.keys.notifywatch, 0, limit - 1, withscores=True)
        return [(_text(r), float(score)) for r, score in pairs]

    @guarded("checking a request's end")
    def first_open(self, ids: Sequence[str], start: int = 0, chunk: int = 5000) -> int:
        """The index in ``ids``, from ``start``, of the first job not in the ``ended`` index (``len(ids)``: every
        one has ended), read ``chunk`` ids per round trip."""
        for at in range(start, len(ids), chunk):
            scores = self.client.zmscore(self.keys.ended, list(ids[at : at + chunk]))
            if None in scores:
                return at + scores.index(None)
        return len(ids)

    def ready(self, request: str, now: float) -> str:
        """The request has ended: its notification becomes due (``due``), unless another caller did that
        (``gone``) or the request record is gone (``forgotten``)."""
        return _text(self._call("notify", self._keys(), ["ready", request, now])[0])

    def claim(self, sender: str, now: float, lease: float, count: int = 10) -> list[Claim]:
        """Up to ``count`` due notifications, held by ``sender`` for ``lease`` seconds."""
        reply = [_text(x) for x in self._call("notify", self._keys(), ["claim", now, lease, count, sender])]
        return [
            Claim(reply[i], reply[i + 1], int(reply[i + 2]), reply[i + 3], int(reply[i + 4]))
            for i in range(0, len(reply), 5)
        ]

    def settle(self, claim: Claim, now: float, error: str = "", retry_at: float | None = None) -> str:
        """How the claim's call went: sent (no ``error``), else retry at ``retry_at`` or failed for good (None).
        Returns the new state, or ``stale`` when the claim's lease ran out and another sender holds it."""
        args = ["settle", claim.request, claim.token, now, error, "" if retry_at is None else repr(retry_at)]
        return _text(self._call("notify", self._keys(), args)[0])

    def _keys(self) -> list[str]:
        k = self.keys
        return [k.notifywatch, k.notify, k.notifyq, k.requests]

    @guarded("reading notifications")
    def of(self, requests: Sequence[str]) -> dict[str, Notice]:
        """The notifications of these requests that exist."""
        raws = self.client.hmget(self.keys.notify, list(requests)) if requests else []
        out = {}
        for request, raw in zip(requests, raws, strict=True):
            notice = Notice.parse(raw) if raw is not None else None
            if notice is not None:
                out[request] = notice
        return out
