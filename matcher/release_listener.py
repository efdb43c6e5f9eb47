"""The control plane's releaser: a dependent whose requirements wait for its dependencies' outputs is
evaluated the moment its last dependency completes, by the control plane, not by the worker node.

``complete.lua`` puts such a job in the releasing set and announces its id on the store's release channel
(``keys.release_channel``). A :class:`Releaser` is a thread subscribed to that channel that evaluates the
announced jobs at once (:func:`matcher.job_release.release`), so pilots carry neither the catalog nor the
workflow language. The Celery worker runs one (:mod:`matcher.app.celery_app`, as a worker bootstep), and so
does ``pilotfish run``. Several are harmless: ``release.lua`` re-checks that the job is still releasing,
so the second evaluation changes nothing. A job no releaser heard of (none was running, or its connection
was down) waits for the periodic sweep (``release_sweep``); each releaser also sweeps once whenever it
(re)subscribes, which covers what was announced while it was away.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from taskqueues.catalog import Catalog
from taskqueues.errors import StoreUnavailable
from taskqueues.store import Outage, Store, Subscription

from .job_release import release, sweep

log = logging.getLogger(__name__)


class Releaser:
    """One thread listening on the release channel: :meth:`start`, then :meth:`stop`.

    ``poll`` is the longest it waits for a message before looking at whether it was asked to stop.
    """

    def __init__(self, store: Store, catalog: Catalog, *, vo: str, poll: float = 0.5) -> None:
        self.store = store
        self.catalog = catalog
        self.vo = vo
        self.poll = poll
        self.outage = Outage(log, "releaser", on_start=store.drop_connections)
        self.listening = threading.Event()  # set while subscribed (and swept once)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pilotfish-releaser", daemon=True)

    def start(self) -> Releaser:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except StoreUnavailable as exc:
                self._stopped.wait(self.outage.failed(exc))
            except Exception:  # the thread must outlive any one bad release; the sweep is the safety net
                log.exception("releaser: evaluating released jobs failed; subscribing again")
                self._stopped.wait(self.outage.cap)

    def _listen(self) -> None:
        """One subscription, until it breaks or the releaser is stopped."""
        pubsub = self.store.subscribe()
        try:
            pubsub.subscribe(self.store.keys.release_channel)
            while (message := self._next(pubsub)) is None or message["type"] != "subscribe":
                if self._stopped.is_set():
                    return
            sweep(self.store, self.catalog, vo=self.vo)  # what was announced while nobody listened
            self.outage.ok()
            self.listening.set()
            while not self._stopped.is_set():
                message = self._next(pubsub)
                ids: list[str] = []
                while message is not None:  # every announcement already here goes in one evaluation
                    if message["type"] == "message":
                        ids += message["data"].decode().split()
                    message = self._next(pubsub, 0)
                if ids:
                    release(self.store, self.catalog, ids, vo=self.vo)
        finally:
            self.listening.clear()
            with contextlib.suppress(Exception):
                pubsub.close()

    def _next(self, pubsub: Subscription, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, waiting at most ``timeout`` (``poll`` unless given)."""
        return pubsub.message(self.poll if timeout is None else timeout)
