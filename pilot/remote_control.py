"""The pilot's end of Celery's remote-control (pidbox) protocol, so Flower can inspect and steer pilots.

Celery's clients (``app.control`` and Flower, which calls it) publish commands to the fanout exchange
``celery.pidbox`` as ``{"method", "arguments", "destination", "pattern", "matcher", "reply_to", "ticket"}``
(kombu/pidbox.py ``Mailbox._publish``); each worker consumes them through a queue named
``<hostname>.celery.pidbox`` and, when ``reply_to`` is set, answers ``{hostname: reply}`` on the direct
exchange ``reply.celery.pidbox`` with the ``ticket`` header (``Node.dispatch``/``Node.reply``). A pilot is
not a Celery worker, so instead of Celery's ``Panel`` of handlers it answers with a :class:`ControlTarget`
that knows the pilot's payloads.

The consumer runs in its own thread with its own kombu connection, reconnects with a capped back-off when
the broker goes away, and never lets an error reach the pilot: a monitoring outage never stops payloads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from kombu.connection import Connection
from kombu.pidbox import Mailbox, Node

log = logging.getLogger(__name__)

Reply = dict[str, Any]
_FIRST_BACKOFF = 0.1
Handler = Callable[..., Any]


def ok(value: Any) -> Reply:
    """Celery's success envelope (celery/worker/control.py ``ok``): Flower looks for the ``ok`` key."""
    return {"ok": value}


def nok(value: Any) -> Reply:
    """Celery's failure envelope: Flower shows ``error`` as the reason a command failed."""
    return {"error": value}


class ControlTarget(Protocol):
    """What the remote control asks of the pilot it speaks for (implemented by ``CeleryObserver``)."""

    def revoke(self, task_ids: list[str], terminate: bool, signal: str) -> Reply: ...
    def shutdown(self, reason: str) -> None: ...
    def drain(self, reason: str) -> None: ...
    def send_heartbeat(self) -> None: ...
    def active(self) -> list[dict[str, Any]]: ...
    def query_task(self, task_ids: list[str]) -> dict[str, Any]: ...
    def revoked(self) -> list[str]: ...
    def registered(self) -> list[str]: ...
    def stats(self) -> dict[str, Any]: ...
    def conf(self) -> dict[str, Any]: ...
    def active_queues(self) -> list[dict[str, Any]]: ...


def _as_list(value: Any) -> list[str]:
    """Celery accepts one id or a list of ids (``maybe_list``) for revoke and query_task."""
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return [str(item) for item in value]
    return [str(value)]


class _Handlers(dict[str, Handler]):
    """Handler table for kombu's ``Node``: an unknown command gets a clear ``error`` reply, not a KeyError."""

    def __missing__(self, method: str) -> Handler:
        def unknown(_state: Any, **_arguments: Any) -> Reply:
            return nok(f"a Pilotfish pilot has no remote-control command {method!r}")

        return unknown


def _unsupported(what: str) -> Handler:
    def handler(_state: Any, **_arguments: Any) -> Reply:
        return nok(f"{what} is not supported by a Pilotfish pilot: it has no Celery pool or Celery queues")

    return handler


def build_handlers(target: ControlTarget, clock: Callable[[], int]) -> _Handlers:
    """The commands Celery clients send and Flower's pages need, answered in Celery's reply formats.

    Formats follow celery/worker/control.py: ``ping`` -> ``{"ok": "pong"}``; ``revoke``/``terminate`` ->
    ``{"ok": ...}``; inspect commands return bare values (lists or dicts). ``shutdown`` is a cast in
    Celery (the worker raises ``WorkerShutdown``); we queue a command for the pilot and answer if asked.

    Shutdown is Celery's warm shutdown for a pilot: it takes no new work and gives its running payloads back
    to their task queue at once (a pilot's payloads may run for days: waiting for them is a drain). A drain
    is asked for as Celery asks a worker to stop taking work from a queue: ``cancel_consumer`` of the
    pilot's queue (Flower: ``POST /api/worker/queue/cancel-consumer/<pilot>?queue=<queue>``), or the
    pilot's own ``drain`` command (``app.control.broadcast("drain", destination=[pilot])``).
    """

    def revoke(
        _state: Any, task_id: Any = None, terminate: bool = False, signal: str | None = None, **_kw: Any
    ) -> Reply:
        return target.revoke(_as_list(task_id), bool(terminate), signal or "SIGTERM")

    def terminate(_state: Any, signal: str | None = None, task_id: Any = None, **_kw: Any) -> Reply:
        return target.revoke(_as_list(task_id), True, signal or "SIGTERM")

    def shutdown(_state: Any, msg: str = "Got shutdown from remote", **_kw: Any) -> Reply:
        target.shutdown(msg)
        return ok("shutting down: running payloads go back to their task queue")

    def drain(_state: Any, reason: str = "drain requested from Celery/Flower", **_kw: Any) -> Reply:
        target.drain(reason)
        return ok("draining: no new work; running payloads finish, then the pilot stops")

    def cancel_consumer(_state: Any, queue: str | None = None, **_kw: Any) -> Reply:
        served = [q["name"] for q in target.active_queues()]
        if queue not in served:
            return nok(f"this pilot serves only queue {', '.join(served) or '?'}, not {queue!r}")
        target.drain(f"stopped consuming from {queue} (Celery/Flower cancel_consumer)")
        return ok(f"no longer consuming from {queue}: draining, running payloads finish")

    def heartbeat(_state: Any, **_kw: Any) -> None:
        target.send_heartbeat()

    def hello(_state: Any, from_node: str = "", revoked: Any = None, **_kw: Any) -> Reply | None:
        # Celery workers say hello at start-up (mingle) and merge the replies' revoked ids and clocks.
        # Our task ids are not Celery tasks, so we share no revoked ids with them.
        return {"revoked": [], "clock": clock()}

    handlers = _Handlers(
        ping=lambda _state, **_kw: ok("pong"),
        revoke=revoke,
        terminate=terminate,
        shutdown=shutdown,
        drain=drain,
        heartbeat=heartbeat,
        hello=hello,
        clock=lambda _state, **_kw: {"clock": clock()},
        enable_events=lambda _state, **_kw: ok("task events already enabled"),
        disable_events=lambda _state, **_kw: nok("a pilot always sends events"),
        stats=lambda _state, **_kw: target.stats(),
        active=lambda _state, **_kw: target.active(),
        reserved=lambda _state, **_kw: [],
        scheduled=lambda _state, **_kw: [],
        revoked=lambda _state, **_kw: target.revoked(),
        registered=lambda _state, **_kw: target.registered(),
        conf=lambda _state, **_kw: target.conf(),
        active_queues=lambda _state, **_kw: target.active_queues(),
        query_task=lambda _state, ids=None, **_kw: target.query_task(_as_list(ids)),
        report=lambda _state, **_kw: ok(f"Pilotfish pilot; stats: {target.stats()!r}"),
        pool_restart=_unsupported("pool_restart"),
        pool_grow=_unsupported("pool_grow"),
        pool_shrink=_unsupported("pool_shrink"),
        autoscale=_unsupported("autoscale"),
        add_consumer=_unsupported("add_consumer"),
        cancel_consumer=cancel_consumer,
        rate_limit=_unsupported("rate_limit"),
        time_limit=_unsupported("time_limit"),
    )
    # Celery's aliases for the same inspect commands (celery/worker/control.py ``alias=``).
    handlers.update(
        dump_active=handlers["active"],
        dump_reserved=handlers["reserved"],
        dump_schedule=handlers["scheduled"],
        dump_revoked=handlers["revoked"],
        dump_conf=handlers["conf"],
    )
    return handlers


def celery_mailbox(conf: Any) -> Mailbox:
    """The mailbox Celery's ``Control`` uses (celery/app/control.py ``Control.__init__``), from an app's conf.

    Built from the same settings so queue names, serializer and TTLs match what Flower publishes.
    """
    return Mailbox(  # type: ignore[no-untyped-call]
        conf.control_exchange,
        type="fanout",
        accept=conf.accept_content,
        serializer=conf.task_serializer,
        queue_ttl=conf.control_queue_ttl,
        reply_queue_ttl=conf.control_queue_ttl,
        queue_expires=conf.control_queue_expires,
        queue_exclusive=conf.control_queue_exclusive,
        queue_durable=conf.control_queue_durable,
        reply_queue_expires=conf.control_queue_expires,
    )


def listen(node: Node, mailbox: Mailbox, channel: Any, callback: Callable[[Any, Any], None]) -> Any:
    """``node.listen``, but on kombu's Redis transport without declaring the node's queue on the broker.

    The pidbox exchange is a fanout, which that transport carries by PUBLISH/SUBSCRIBE: the queue's list and
    its binding in ``_kombu.binding.<exchange>`` (written when the queue is declared, deleted when it is, kept
    alive with Lua when it expires) are never read for delivery. So the pilot records the binding in its
    channel only (what ``Channel._queue_bind`` does before its writes) and consumes: its ACL user writes
    nothing but replies on the broker (taskqueues.store.access). Other transports declare as kombu does.
    """
    fanout = getattr(channel, "_fanout_queues", None)
    if not isinstance(fanout, dict):
        return node.listen(channel=channel, callback=callback)  # type: ignore[no-untyped-call]
    queue: Any = mailbox.get_queue(node.hostname)  # type: ignore[no-untyped-call]
    exchange: Any = mailbox.exchange
    fanout[queue.name] = (exchange.name, "")
    consumer: Any = node.Consumer(  # type: ignore[no-untyped-call]
        channel=channel, callbacks=[callback], on_decode_error=node.on_decode_error, auto_declare=False
    )
    consumer.consume()
    return consumer


class RemoteControl:
    """Consumes this pilot's pidbox messages in a background thread and answers them through ``target``.

    ``connect`` makes a fresh kombu connection (one per attempt, so a broken one is never reused);
    ``poll`` bounds how long a drain waits, hence how fast :meth:`stop` returns.
    """

    def __init__(
        self,
        connect: Callable[[], Connection],
        mailbox: Mailbox,
        hostname: str,
        target: ControlTarget,
        *,
        poll: float = 0.5,
        max_backoff: float = 10.0,
    ) -> None:
        self.hostname = hostname
        self._connect = connect
        self._mailbox = mailbox
        self._handlers = build_handlers(target, lambda: int(mailbox.clock.value))
        self._poll = poll
        self._max_backoff = max_backoff
        self._backoff = _FIRST_BACKOFF
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pidbox {hostname}", daemon=True)
        self.handled = 0
        self.reconnects = 0

    def start(self) -> RemoteControl:
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> bool:
        """True once the consumer is subscribed (commands sent before that are not seen: fanout is pub/sub)."""
        return self._ready.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            except Exception as exc:
                self._ready.clear()
                self.reconnects += 1
                # One warning per outage, not one per retry: a long outage must not flood the pilot's log.
                log.log(
                    logging.WARNING if self._backoff == _FIRST_BACKOFF else logging.DEBUG,
                    "pilot %s: remote control cannot reach the broker (%s: %s); retrying every %.0f s at most",
                    self.hostname,
                    type(exc).__name__,
                    exc,
                    self._max_backoff,
                )
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, self._max_backoff)

    def _consume(self) -> None:
        with self._connect() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0)
            channel = conn.channel()
            mailbox = self._mailbox(conn)
            node: Node = mailbox.Node(self.hostname, handlers=self._handlers, channel=channel)
            consumer = listen(node, mailbox, channel, lambda body, message: self._on_message(node, body, message))
            try:
                # The subscription is made by the first drain (kombu's Redis poller subscribes lazily).
                first = True
                while not self._stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        conn.drain_events(timeout=0.01 if first else self._poll)
                    if first:
                        first = False
                        if self._backoff != _FIRST_BACKOFF:
                            log.info("pilot %s: remote control reconnected", self.hostname)
                            self._backoff = _FIRST_BACKOFF
                        self._ready.set()
            finally:
                self._ready.clear()
                try:
                    consumer.cancel()
                    channel.close()
                except Exception as exc:  # closing a dead connection may fail again: nothing to do
                    log.debug("pilot %s: closing the pidbox channel: %s", self.hostname, exc)

    def _on_message(self, node: Node, body: Any, message: Any) -> None:
        """Like Celery's ``Pidbox.on_message``: never let one bad command stop the consumer."""
        self.handled += 1
        if not isinstance(body, dict):
            log.warning("pilot %s: ignored a pidbox message that is not a mapping: %r", self.hostname, body)
            return
        try:
            node.handle_message(body, message)  # type: ignore[no-untyped-call]
        except Exception as exc:
            log.error("pilot %s: remote-control command %r failed: %s", self.hostname, body.get("method"), exc)
