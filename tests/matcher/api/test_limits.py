"""The API's time limit, on small ASGI apps: a call that has not started its answer in time gets 504, a stream
that started is not cut; the rate limiter's bucket, on a test clock."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from matcher.api.limits import RateLimiter, TimeLimit


def _run(app: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(app({"type": "http", "headers": []}, receive, send))
    return sent


def test_a_call_that_has_not_answered_in_time_gets_504() -> None:
    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(5)

    sent = _run(TimeLimit(slow, 0.05))
    assert sent[0]["status"] == 504
    assert "api_timeout" in json.loads(sent[1]["body"])["error"]


def test_a_stream_that_started_in_time_is_not_cut() -> None:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.5)
        await send({"type": "http.response.body", "body": b"late", "more_body": False})

    sent = _run(TimeLimit(stream, 0.2))
    assert [m.get("status") or m.get("body") for m in sent] == [200, b"late"]


def test_the_rate_limiter_gives_a_burst_then_the_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == 0.5  # one token comes every 0.5 s
    assert limiter.take("b") == 0.0  # buckets are per key
    now[0] = 0.5
    assert limiter.take("a") == 0.0


def test_the_rate_limiter_forgets_buckets_that_filled_up_again() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2, clock=lambda: now[0])
    limiter.KEPT = 3
    for key in "abcd":
        limiter.take(key)
    now[0] = 10.0  # every bucket full again
    limiter.take("e")
    assert set(limiter._buckets) == {"e"}
    assert limiter.take("a") == 0.0
