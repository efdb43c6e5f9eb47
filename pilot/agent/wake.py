"""Wake-ups: the pilot's one epoll and everything that may wake it.

The pilot runs in one thread around one selector. Exits are noticed at once: each payload's pidfd is in
the selector (readable when the process exits), or, on kernels without pidfds, SIGCHLD wakes the selector
through ``signal.set_wakeup_fd``; SIGTERM and SIGINT (preemption) wake it the same way. Work entering a
task queue wakes an idle pilot through a wake channel of its queue, and a kill or stop request for this
pilot through its own channel. The pilot listens on its wake channel (one of its queue's shards,
``Keys.pilot_wake_channel``) only while its last match found nothing (:meth:`Wake.hungry`): the store wakes
as many listening pilots as jobs entered, so a pilot busy with what it holds neither hears nor is counted.
The payloads' output pipes and the reply socket of the pilot's exchanges are in the selector too:
:meth:`Wake.wait` hands their events to the pilot, which passes them to their owners.

The selector is an ``epoll`` used directly, not through :mod:`selectors`: three descriptors are registered
and unregistered per payload, and the module's bookkeeping (a key object per registration, the file object
looked up at each call) was half of that cost (4.5 us against 10 us a payload, timeit).
"""

from __future__ import annotations

import contextlib
import logging
import select
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from pilot.agent.payload import pidfds_supported
from pilot.agent.state import PilotState
from taskqueues.errors import StoreUnavailable
from taskqueues.store import Subscription

log = logging.getLogger("pilot.agent")


class Wake:
    """The selector, the signal wake-up descriptor and the subscriptions: :meth:`open` in the pilot's
    setup, :meth:`close` in its teardown."""

    def __init__(self, state: PilotState) -> None:
        self.state = state
        self._selector: select.epoll | None = None
        self._handlers: dict[int, tuple[str, Any]] = {}  # registered descriptor -> (kind, data)
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._saved_signals: dict[int, Any] = {}
        self._saved_wakeup = -1
        self._on_signal: Callable[[int], None] | None = None
        self._pubsub: Subscription | None = None
        self._sockets: dict[str, tuple[socket.socket, int]] = {}  # kind -> the socket watched for it, its number
        self._wake_channel = ""
        self._own_channel = b""
        self._hungry = False  # listening on the wake channel

    def open(self) -> None:
        self._selector = select.epoll()

    @property
    def is_open(self) -> bool:
        return self._selector is not None

    @property
    def on_signals(self) -> bool:
        """Whether signals wake the selector (the pilot runs in the main thread): without pidfds, a payload's
        exit is then noticed by SIGCHLD, and every payload without a pidfd must be checked after a wake-up."""
        return self._wake is not None

    @property
    def listening(self) -> bool:
        """Subscribed, on the socket in the selector. An outage's start closes the subscription's connection
        (its socket leaves the epoll by itself) and the next command on it would reconnect it on a socket nobody
        watches, which the store would count among the listeners: such a subscription is not listening (it is
        renewed at the next heartbeat)."""
        return self._pubsub is not None and self._pubsub.socket() is self.watched("work")

    def register(self, fd: int, kind: str, data: Any = None) -> None:
        """Watch ``fd`` for reading; its events go to ``kind``'s handler with ``data``.

        A number still held by an earlier registration was freed under its owner: an outage's start closes
        every connection of the store from another thread, the subscription's and the exchanges' too, and the
        kernel hands the number to the next descriptor (a payload's pipe). The new one takes it; a
        subscription that lost its socket so is dropped (renewed at the next heartbeat). Only a descriptor
        registered twice while open is an error.
        """
        assert self._selector is not None
        stale = self._handlers.pop(fd, None)
        try:
            self._selector.register(fd, select.EPOLLIN)
        except FileExistsError:
            if stale is not None:
                self._handlers[fd] = stale
            raise ValueError(f"descriptor {fd} is already registered ({stale[0] if stale else '?'})") from None
        self._handlers[fd] = (kind, data)
        if stale is not None:
            log.info(
                "pilot %s: descriptor %d, closed under its %s, now watched for its %s",
                self.state.name,
                fd,
                stale[0],
                kind,
            )
            if self._sockets.get(stale[0], (None, -1))[1] == fd:
                del self._sockets[stale[0]]  # its socket is closed: the number is not its any more
            if stale[0] == "work":
                self._drop_pubsub()

    def watch(self, kind: str, sock: socket.socket | None) -> None:
        """Keep ``sock`` watched for ``kind`` (its one socket; None: none). The socket itself, not its number: an
        outage's start closes the store's connections under the pilot (a closed socket leaves the epoll by
        itself) and a reconnection may get the same number back, which must be registered again."""
        watched = self._sockets.get(kind)
        if (watched[0] if watched else None) is sock:
            return
        if watched is not None:
            del self._sockets[kind]
            with contextlib.suppress(OSError):  # closed under us: it left the epoll already
                self.unregister(watched[1], kind)
        fd = -1 if sock is None else sock.fileno()
        if sock is not None and fd >= 0:
            self.register(fd, kind)
            self._sockets[kind] = (sock, fd)

    def watched(self, kind: str) -> socket.socket | None:
        """The socket watched for ``kind`` (:meth:`watch`), or None."""
        watched = self._sockets.get(kind)
        return watched[0] if watched else None

    def unregister(self, fd: int, kind: str | None = None) -> None:
        """Stop watching ``fd`` (before it is closed: a closed descriptor has left the epoll already). With
        ``kind``, only if it is still registered for that (its number may have gone to another since)."""
        assert self._selector is not None
        if kind is not None and self._handlers.get(fd, ("", None))[0] != kind:
            return
        del self._handlers[fd]
        self._selector.unregister(fd)

    def install_signals(self, on_signal: Callable[[int], None]) -> None:
        """SIGTERM/SIGINT (preemption) and SIGCHLD all wake the selector; only in the main thread.
        ``on_signal`` is called, in the handler, with each SIGTERM or SIGINT."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("pilot %s runs outside the main thread: no signal handling", self.state.name)
            return
        assert self._selector is not None
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._wake = (reader, writer)
        self._on_signal = on_signal
        self.register(reader.fileno(), "wake")
        self._saved_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        watched = [signal.SIGTERM, signal.SIGINT]
        if not pidfds_supported():
            watched.append(signal.SIGCHLD)  # no pidfds: a child's exit must wake the selector
        for number in watched:
            self._saved_signals[number] = signal.signal(number, self._signalled)

    def _signalled(self, number: int, _frame: FrameType | None) -> None:
        if number != signal.SIGCHLD and self._on_signal is not None:
            self._on_signal(number)

    def listen(self) -> None:
        """Subscribe to the pilot's wake channel: work entering a task queue of its queue wakes it at once
        instead of at its next back-off poll (it starts hungry: its first match has not been answered);
        and to the pilot's own channel, on which a kill or stop request for it is announced
        (``store.pilots``): it heartbeats at once. Polling and the heartbeat stay the fallback
        (a lost subscription is renewed at the next heartbeat)."""
        assert self._selector is not None
        self._drop_pubsub()  # one that lost its socket (listening)
        state = self.state
        store = state.store
        self._wake_channel = store.keys.pilot_wake_channel(state.config.queue, state.name)
        self._own_channel = store.keys.pilot_channel(state.name).encode()
        try:
            pubsub = store.subscribe(ignore_subscribe_messages=True)
            pubsub.subscribe(self._wake_channel)
            while pubsub.message(0.5) is not None:
                pass
            try:  # apart: a server whose ACL refuses this channel must not cost the wake channel
                pubsub.subscribe(store.keys.pilot_channel(state.name))
                while pubsub.message(0.5) is not None:
                    pass
            except Exception as exc:
                log.warning(
                    "pilot %s: no channel of its own (%s): kills and stops wait for its heartbeat", state.name, exc
                )
            self.watch("work", pubsub.socket())
        except Exception as exc:
            if isinstance(exc, StoreUnavailable):
                state.outage.failed(exc)
            else:
                log.warning("pilot %s: no wake subscription (%s): polling only", state.name, exc)
            return
        self._pubsub = pubsub
        self._hungry = True

    def hungry(self, yes: bool) -> None:
        """Listen on the wake channel (``yes``: the last match found nothing) or stop listening (it brought
        jobs: the pilot matches again when one ends, and the store must not count it among the idle). The
        command is sent without waiting for its notice; a wake published meanwhile is missed, and the
        back-off's first poll (``backoff_min`` after the empty match) finds the work."""
        pubsub = self._pubsub
        if pubsub is None or yes == self._hungry:
            return
        if not self.listening:  # its socket was closed under it: not reconnected unwatched (listening)
            self._drop_pubsub()
            return
        try:
            if yes:
                pubsub.subscribe(self._wake_channel)
            else:
                pubsub.unsubscribe(self._wake_channel)
        except Exception as exc:
            self._lost(exc)
            return
        self._hungry = yes

    def wait(self, timeout: float, handle: Callable[[str, Any, int], None]) -> None:
        """Sleep until something is ready or ``timeout`` passes. Signals and subscriptions are handled here;
        every other ready descriptor goes to ``handle(kind, data, fd)`` (what it was registered with), in
        the order the selector gave them."""
        assert self._selector is not None
        handlers = self._handlers
        # Resolved before any is handled, as selectors.select does: a handler may close a descriptor and a
        # new one may take its number in the same batch (an event of the old one must not reach the new).
        ready = [(fd, handlers[fd]) for fd, _ in self._selector.poll(timeout) if fd in handlers]
        for fd, (kind, data) in ready:
            if kind == "wake":
                self._drain_wake()
            elif kind == "work":
                if self._pubsub is not None:
                    self._work_arrived()
            else:
                handle(kind, data, fd)

    def _drain_wake(self) -> None:
        assert self._wake is not None
        with contextlib.suppress(BlockingIOError):
            while self._wake[0].recv(4096):
                pass

    def _work_arrived(self) -> None:
        assert self._pubsub is not None
        state = self.state
        try:
            messages = self._pubsub.drain()
        except Exception as exc:
            self._lost(exc)
            state.match_now()
            return
        for message in messages:
            if message.get("channel") == self._own_channel:
                state.next_heartbeat = 0.0  # a kill or stop request: read it now
            else:
                state.match_now()  # work entered: the notices of (un)subscribing wake nobody

    def _lost(self, exc: Exception) -> None:
        state = self.state
        if isinstance(exc, StoreUnavailable):
            state.outage.failed(exc)
        else:
            log.warning("pilot %s: wake subscription lost (%s)", state.name, exc)
        self._drop_pubsub()

    def _drop_pubsub(self) -> None:
        if self._pubsub is None:
            return
        if self._selector is not None:
            self.watch("work", None)  # the socket registered, not the connection's current one
        with contextlib.suppress(Exception):
            self._pubsub.close()
        self._pubsub = None
        self._hungry = False

    def close(self) -> None:
        """Unsubscribe, give the signals back their previous handlers, close the selector."""
        self._drop_pubsub()
        if self._wake is not None:
            signal.set_wakeup_fd(self._saved_wakeup)
            for number, handler in self._saved_signals.items():
                signal.signal(number, handler)
            for sock in self._wake:
                sock.close()
            self._wake = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
            self._handlers.clear()
