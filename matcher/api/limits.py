"""The API's guards against too much: request bodies over ``api_max_body`` (413), calls over an identity's rate
(429 with ``Retry-After``), calls that take longer than ``api_timeout`` (504)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RateLimiter:
    """A token bucket per key (an identity, an address): ``burst`` calls at once, then ``rate`` a second. Past
    :attr:`KEPT` keys, those whose bucket has filled up again are forgotten (they would start full anyway)."""

    KEPT = 10_000

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when the call may go on (one token taken), else the seconds until it may."""
        now = self.clock()
        with self._lock:
            if len(self._buckets) > self.KEPT:
                full = self.burst / self.rate
                self._buckets = {k: (lv, t) for k, (lv, t) in self._buckets.items() if now - t < full}
            level, at = self._buckets.get(key, (self.burst, now))
            level = min(self.burst, level + (now - at) * self.rate)
            if level >= 1:
                self._buckets[key] = (level - 1, now)
                return 0.0
            self._buckets[key] = (level, now)
            return (1 - level) / self.rate


async def _answer(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"error": message, "kind": "RequestRefused"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            + (headers or []),
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuses a request whose body is over ``limit`` bytes (413), by its Content-Length or as it streams in."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body over the limit of {self.limit} bytes (api_max_body)"
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await _answer(send, 413, too_big)
                return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooBig
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooBig:
            if not started:
                await _answer(send, 413, too_big)


class _TooBig(Exception):
    pass


class TimeLimit:
    """Answers 504 when a call has not started its answer within ``seconds`` (the work it started may still
    finish). An answer that has started (a stream: ``logs --follow``) is not cut."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, watched))
        waiter = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait({task, waiter}, timeout=self.seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not task.done() and not started.is_set():
            task.cancel()
            await _answer(
                send,
                504,
                f"the call took longer than {self.seconds:g} s (api_timeout): what it changed may still "
                "complete; look before retrying",
            )
            return
        await task


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
