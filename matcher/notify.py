"""Request-end notifications: a request that names a webhook (``notify`` in its workflow, ``--notify`` on submit,
else the deployment's ``notify_url``) has its summary POSTed there once when its last job ends.

A :class:`Notifier` is a thread of every Celery worker (beside the releaser), off the worker's pool and off
the match path; each round it

1. looks at the requests with a webhook not seen ended yet (the store's watch set) and makes the notification
   of each one whose jobs have all ended due (``Notices.ready``: exactly once, whichever worker sees it first);
2. claims due notifications under a lease (``Notices.claim``: never two senders at once; a sender killed
   mid-call leaves its claim to expire and be taken again), POSTs each in a thread of its own with a timeout,
   and settles it: sent on a 2xx answer, else tried again after a back-off (``notify_backoff`` doubling, at
   most an hour) until ``notify_attempts`` are used, then failed for good.

The body is the request's summary (what ``pilotfish status REQUEST --json`` prints) with ``event``
``request.ended`` and ``delivery`` (``id``: the request, ``attempt``); the header ``X-Pilotfish-Delivery``
carries the request id too, so a receiver can tell a repeat (a sender killed after the webhook answered and
before it settled sends again when its lease ends). Failures show in ``pilotfish status``: state, attempts,
last error.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from taskqueues import __version__
from taskqueues.context import Context
from taskqueues.errors import NotFound, PilotfishError
from taskqueues.store import Claim, Store

from .status import request_status

__all__ = ["DELIVERY_HEADER", "Notifier", "post"]

log = logging.getLogger(__name__)

DELIVERY_HEADER = "X-Pilotfish-Delivery"
#: The longest wait between two attempts (seconds).
MAX_BACKOFF = 3600.0


def post(url: str, body: dict[str, Any], timeout: float, delivery: str) -> str:
    """POST ``body`` as JSON; "" when the webhook answered 2xx, else what went wrong, in a few words."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body, sort_keys=True).encode(),
        headers={
            "Content-Type": "application/json",
            "User-Agent": f"pilotfish/{__version__}",
            DELIVERY_HEADER: delivery,
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status = int(answer.status)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}".strip()
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return f"no answer within {timeout:g} s"
        return f"cannot reach {url}: {exc.reason}"
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return f"cannot reach {url}: {exc}"
    return "" if 200 <= status < 300 else f"HTTP {status}"


def delivery_id(claim: Claim) -> str:
    """What the delivery header says: the request id for its first end, ``<request>.<end>`` for a later one (its
    jobs resubmitted), so that a receiver telling repeats by it sees each end once."""
    return claim.request if claim.end <= 1 else f"{claim.request}.{claim.end}"


@dataclass
class Notifier:
    """Makes ended requests' notifications due and sends the due ones (see the module's docstring)."""

    store: Store
    timeout: float = 10.0
    attempts: int = 8
    backoff: float = 30.0
    interval: float = 2.0
    batch: int = 10
    sender: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    clock: Callable[[], float] = time.time
    #: request -> (when it was armed, how many of its first jobs were seen ended): the jobs before are not read
    #: again while it stays armed at that time (resubmitted jobs arm it again: counted from the first then)
    _ended_before: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, ctx: Context) -> Notifier:
        s = ctx.settings
        return cls(ctx.store, timeout=s.notify_timeout, attempts=s.notify_attempts, backoff=s.notify_backoff)

    @property
    def lease(self) -> float:
        """How long a claim holds: well past its call's timeout, so a live sender always settles in time."""
        return 2 * self.timeout + 10

    def detect(self) -> int:
        """Make due the notification of every watched request whose jobs have all ended; returns how many."""
        made = 0
        notices = self.store.notices
        for request, armed in notices.watched():
            try:
                rec = self.store.request(request)
            except NotFound:
                notices.ready(request, self.clock())  # forgotten: dropped from the watch set
                self._ended_before.pop(request, None)
                continue
            try:
                ids = [str(i) for i in range(int(rec["first"]), int(rec["last"]) + 1)]
            except (KeyError, TypeError, ValueError):
                log.warning("request %s: its record has no readable job range: no notification", request)
                continue
            # Jobs before the first unfinished one seen last time have ended: not read again (unless re-armed).
            since, seen = self._ended_before.get(request, (armed, 0))
            open_at = notices.first_open(ids, seen if since == armed else 0)
            self._ended_before[request] = (armed, open_at)
            if open_at == len(ids):
                self._ended_before.pop(request)
                made += notices.ready(request, self.clock()) == "due"
        return made

    def send_due(self) -> list[str]:
        """Claim the due notifications, send them (each in its own thread) and settle them; their new states."""
        claims = self.store.notices.claim(self.sender, self.clock(), self.lease, self.batch)
        if not claims:
            return []
        with ThreadPoolExecutor(max_workers=len(claims), thread_name_prefix="pilotfish-notify") as pool:
            return list(pool.map(self._deliver, claims))

    def _deliver(self, claim: Claim) -> str:
        delivery = {"id": claim.request, "attempt": claim.attempt, "end": claim.end}
        try:
            body = {
                **request_status(self.store, claim.request).to_json(),
                "event": "request.ended",
                "delivery": delivery,
            }
        except NotFound:
            body = {"id": claim.request, "event": "request.ended", "delivery": delivery}
        error = post(claim.url, body, self.timeout, delivery_id(claim))
        now = self.clock()
        if not error:
            return self.store.notices.settle(claim, now)
        again = (
            None if claim.attempt >= self.attempts else now + min(MAX_BACKOFF, self.backoff * 2 ** (claim.attempt - 1))
        )
        state = self.store.notices.settle(claim, now, error, again)
        log.warning(
            "request %s: webhook %s attempt %d failed (%s)%s",
            claim.request,
            claim.url,
            claim.attempt,
            error,
            "" if again is None else f"; next attempt in {again - now:.0f} s",
        )
        return state

    def run_once(self) -> tuple[int, list[str]]:
        """One round: (notifications made due, states of those sent)."""
        return self.detect(), self.send_due()

    # -- the worker's thread ------------------------------------------------------------------------

    def start(self) -> Notifier:
        self._thread = threading.Thread(target=self._run, name="pilotfish-notifier", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except PilotfishError as exc:  # an outage: the worker's other parts say so; try again next round
                log.debug("notifications: %s", exc)
            except Exception:  # a bug must not end the thread: said once a round, with its traceback
                log.exception("notifications: a round failed")
            self._stopped.wait(self.interval)
