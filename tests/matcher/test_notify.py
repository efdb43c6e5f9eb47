"""Request-end notifications against real HTTP servers on loopback (one that fails twice then answers, one that
hangs) and a real redis-server: once per request end, retried with back-off, visible in ``status``; two
senders at once, and a sender killed with ``kill -9`` mid-call, still deliver once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from matcher.notify import DELIVERY_HEADER, Notifier
from matcher.status import render_requests, request_status
from matcher.submission import JobSpec, SubmissionError, Submitter
from matcher.workflow.load import parse_workflow
from matcher.workflow.model import WorkflowError
from taskqueues.catalog import Catalog
from taskqueues.errors import ValidationError
from taskqueues.store import Store, retention
from taskqueues.store.records import PilotOffer, RunResult
from taskqueues.webhook import check_webhook
from tests.support.catalogs import TWO_SITES
from tests.support.clock import FakeClock
from tests.support.paths import ROOT
from tests.support.polling import wait_until
from tests.support.store import job


class Hook:
    """A webhook on loopback: answers ``codes`` in turn (then 200); ``hang`` holds every call until released
    (recorded with code 0: whoever called has given up or died by then, or is the one caller left)."""

    def __init__(self, codes: tuple[int, ...] = (), hang: bool = False) -> None:
        self.codes = list(codes)
        self.hang = hang
        self.release = threading.Event()
        self.calls: list[tuple[dict[str, Any], dict[str, str], int]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hook.lock:
                    held = hook.hang
                    code = hook.codes.pop(0) if hook.codes else 200
                    hook.calls.append((body, dict(self.headers), 0 if held else code))  # 0: held, no timely answer
                if held:
                    hook.release.wait(30)
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answered(self) -> list[dict[str, Any]]:
        """Bodies of the calls answered 2xx."""
        return [body for body, _, code in self.calls if 200 <= code < 300]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


@pytest.fixture
def hooks() -> Iterator[list[Hook]]:
    made: list[Hook] = []
    yield made
    for hook in made:
        hook.close()


def end_request(store: Store, url: str, n: int = 2, request: str = "r1") -> list[str]:
    """A request of ``n`` jobs naming ``url``, submitted, matched and ended (the last one failed)."""
    ids = store.submit([job(score=i) for i in range(n)], (request, {"name": "demo", "notify": url}))
    for i in range(n):
        [leased] = store.match(PilotOffer("p1", "site/ce/q1", cpu=1, mem=1000), 1)
        if i == n - 1:
            store.fail(leased.id, 1, "p1", RunResult(exit_code=3, reason="exit code 3"))
        else:
            store.complete(leased.id, 1, "p1")
    return ids


def test_a_request_end_is_posted_once_after_two_failures(store: Store, hooks: list[Hook]) -> None:
    hook = Hook(codes=(500, 503))
    hooks.append(hook)
    clock = FakeClock()
    notifier = Notifier(store, timeout=5, attempts=5, backoff=10, clock=clock)
    store.submit([job(score=1), job(score=2)], ("r1", {"name": "demo", "notify": hook.url}))
    assert notifier.run_once() == (0, []) and hook.calls == []  # nothing ended: nothing due
    assert request_status(store, "r1").notify == {"url": hook.url, "state": "waiting"}
    [leased] = store.match(PilotOffer("p1", "site/ce/q1", cpu=1, mem=1000), 1)
    store.complete(leased.id, 1, "p1")
    assert notifier.run_once() == (0, [])  # one job left
    [leased] = store.match(PilotOffer("p1", "site/ce/q1", cpu=1, mem=1000), 1)
    store.fail(leased.id, 1, "p1", RunResult(exit_code=3, reason="exit code 3"))
    assert notifier.run_once() == (1, ["retry"])
    status = request_status(store, "r1")
    assert status.notify is not None
    assert (status.notify["state"], status.notify["attempts"]) == ("retry", 1)
    assert status.notify["error"] == "HTTP 500 Internal Server Error" and status.notify["next"] == clock.now + 10
    assert any(
        "attempt 1 failed: HTTP 500 Internal Server Error; next" in line
        for line in render_requests([status], clock.now)
    )
    assert notifier.run_once() == (0, [])  # not due before its back-off
    clock.now += 10
    assert notifier.run_once() == (0, ["retry"])
    assert request_status(store, "r1").notify["next"] == clock.now + 20  # type: ignore[index]  # doubled
    clock.now += 20
    assert notifier.run_once() == (0, ["sent"])
    clock.now += 3600
    assert notifier.run_once() == (0, [])  # once: never again
    [body] = hook.answered()
    assert len(hook.calls) == 3 and hook.calls[-1][1][DELIVERY_HEADER] == "r1"
    assert body["event"] == "request.ended" and body["delivery"] == {"id": "r1", "attempt": 3, "end": 1}
    assert body["id"] == "r1" and body["states"] == {"done": 1, "failed": 1} and body["final"] is True
    assert request_status(store, "r1").notify["state"] == "sent"  # type: ignore[index]


def test_a_hanging_webhook_times_out_and_fails_for_good_after_its_attempts(store: Store, hooks: list[Hook]) -> None:
    hook = Hook(hang=True)
    hooks.append(hook)
    end_request(store, hook.url)
    clock = FakeClock()
    notifier = Notifier(store, timeout=0.5, attempts=2, backoff=1, clock=clock)
    assert notifier.run_once() == (1, ["retry"])
    clock.now += 1
    assert notifier.run_once() == (0, ["failed"])
    notice = request_status(store, "r1").notify
    assert notice is not None and (notice["state"], notice["attempts"]) == ("failed", 2)
    assert notice["error"] == "no answer within 0.5 s"
    clock.now += 3600
    assert notifier.run_once() == (0, []) and len(hook.calls) == 2


def test_two_senders_at_once_post_once(store: Store, hooks: list[Hook]) -> None:
    hook = Hook(hang=True)
    hooks.append(hook)
    end_request(store, hook.url)
    one, two = Notifier(store, sender="one"), Notifier(store, sender="two")
    assert one.detect() == 1 and two.detect() == 0  # the end is made due once
    results: dict[str, list[str]] = {}
    threads = [threading.Thread(target=lambda n=n: results.update({n.sender: n.send_due()})) for n in (one, two)]
    for t in threads:
        t.start()
    wait_until(lambda: len(hook.calls) == 1, what="the webhook called")
    hook.release.set()
    for t in threads:
        t.join(10)
    assert sorted(map(tuple, results.values())) == [(), ("sent",)]
    assert len(hook.calls) == 1


def test_a_sender_killed_mid_call_leaves_it_to_the_next_after_its_lease(
    store: Store, redis_url: str, hooks: list[Hook]
) -> None:
    hook = Hook(hang=True)
    hooks.append(hook)
    end_request(store, hook.url)
    code = (
        "from taskqueues.store import Store; from matcher.notify import Notifier;"
        f"Notifier(Store.from_url({redis_url!r}), timeout=60, sender='doomed').run_once()"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    try:
        wait_until(lambda: len(hook.calls) == 1, timeout=30, what="the doomed sender's call")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    hook.release.set()
    hook.hang = False
    clock = FakeClock(time.time() + 1)  # the killed sender claimed on the real clock
    heir = Notifier(store, timeout=60, sender="heir", clock=clock)
    assert heir.run_once() == (0, [])  # the dead sender's claim still holds
    clock.now += heir.lease
    assert heir.run_once() == (0, ["sent"])
    notice = request_status(store, "r1").notify
    assert notice is not None and (notice["state"], notice["attempts"]) == ("sent", 2)
    assert [b["delivery"] for b in hook.answered()] == [{"id": "r1", "attempt": 2, "end": 1}]


def test_where_a_webhook_comes_from_and_bad_ones(store: Store) -> None:
    submitter = Submitter(store, Catalog.loads(TWO_SITES), capacity=lambda: 1e6, notify_url="https://ops.example.org/h")
    spec = [JobSpec("a", "true", {"Platform": "EL9"}, ete=10)]
    default = submitter.submit(spec, name="one").request
    own = submitter.submit(spec, name="two", notify="http://me.example.org:8080/x").request
    assert store.request(default)["notify"] == "https://ops.example.org/h"
    assert store.request(own)["notify"] == "http://me.example.org:8080/x"
    assert sorted(r for r, _ in store.notices.watched()) == sorted([default, own])  # the same (fake) time
    with pytest.raises(SubmissionError, match=r"notify 'ftp://x' is not an http\(s\) URL with a host"):
        submitter.submit(spec, notify="ftp://x")
    flow = parse_workflow({"name": "w", "notify": "https://h.example.org/", "jobs": [{"name": "a", "command": "true"}]})
    assert flow.notify == "https://h.example.org/"
    with pytest.raises(WorkflowError, match="notify 'nope' is not"):
        parse_workflow({"name": "w", "notify": "nope", "jobs": [{"name": "a", "command": "true"}]})
    with pytest.raises(ValidationError, match="is not a URL"):
        check_webhook("http://h/ x")


def test_retention_forgets_a_notification_with_its_request(store: Store, hooks: list[Hook]) -> None:
    hook = Hook()
    hooks.append(hook)
    end_request(store, hook.url)
    store.submit([job()], ("r2", {"name": "open", "notify": hook.url}))  # still waiting: watched, kept
    assert Notifier(store, clock=store.clock).run_once() == (1, ["sent"])
    store.client.hset(store.keys.cursor, "repressure", "2e9")  # learnt from already
    retention.forget_ended(store, store.clock() + 1)
    assert store.notices.of(["r1"]) == {} and [r for r, _ in store.notices.watched()] == ["r2"]
    assert store.client.zcard(store.keys.notifyq) == 0


def run_one(store: Store, fail: bool = False) -> str:
    """Match the most urgent job on p1 and end it (failed with exit 3, or done); its id."""
    [leased] = store.match(PilotOffer("p1", "site/ce/q1", cpu=1, mem=1000), 1)
    if fail:
        store.fail(leased.id, leased.attempt, "p1", RunResult(exit_code=3, reason="exit code 3"))
    else:
        store.complete(leased.id, leased.attempt, "p1")
    return leased.id


def test_a_resubmitted_request_is_posted_again_when_it_ends_again(store: Store, hooks: list[Hook]) -> None:
    hook = Hook()
    hooks.append(hook)
    ids = end_request(store, hook.url)  # the second job failed
    notifier = Notifier(store, clock=store.clock)
    assert notifier.run_once() == (1, ["sent"])
    store.lifecycle.resubmit([ids[1]], "alice")
    notice = request_status(store, "r1").notify  # armed again
    assert notice is not None and (notice["state"], notice["attempts"]) == ("waiting", 0)
    assert notifier.run_once() == (0, [])  # running again: not ended
    assert run_one(store) == ids[1]
    assert notifier.run_once() == (1, ["sent"])
    first, second = hook.answered()
    assert (first["delivery"], first["states"]) == ({"id": "r1", "attempt": 1, "end": 1}, {"done": 1, "failed": 1})
    assert (second["delivery"], second["states"]) == ({"id": "r1", "attempt": 1, "end": 2}, {"done": 2})
    assert [headers[DELIVERY_HEADER] for _, headers, _ in hook.calls] == ["r1", "r1.2"]  # each end told once
    store.lifecycle.resubmit([ids[0]], "alice")
    run_one(store)
    assert notifier.run_once() == (1, ["sent"]) and hook.calls[-1][1][DELIVERY_HEADER] == "r1.3"


def test_a_notification_not_sent_yet_is_dropped_when_its_request_runs_again(store: Store, hooks: list[Hook]) -> None:
    hook = Hook(codes=(503,))
    hooks.append(hook)
    clock = FakeClock()
    notifier = Notifier(store, timeout=5, attempts=5, backoff=10, clock=clock)
    ids = end_request(store, hook.url)
    assert notifier.run_once() == (1, ["retry"])  # the first end's notification waits for its next attempt
    store.lifecycle.resubmit([ids[1]], "alice")
    clock.now += 3600
    assert notifier.run_once() == (0, []) and len(hook.calls) == 1  # that end is over: not told any more
    run_one(store)
    assert notifier.run_once() == (1, ["sent"])
    assert [b["delivery"]["end"] for b in hook.answered()] == [2] and hook.answered()[0]["states"] == {"done": 2}


def test_jobs_seen_ended_are_read_again_once_resubmitted(store: Store, hooks: list[Hook]) -> None:
    """The notifier skips the jobs it saw ended before (its cursor); a resubmission arms the request again at a
    new time, so a resubmitted job is waited for, not taken as ended."""
    hook = Hook()
    hooks.append(hook)
    ids = store.submit([job(score=0), job(score=1)], ("r1", {"name": "demo", "notify": hook.url}))
    notifier = Notifier(store, clock=store.clock)
    assert run_one(store, fail=True) == ids[0]
    assert notifier.run_once() == (0, [])  # the first job seen ended, the second waits
    store.lifecycle.resubmit([ids[0]], "alice")  # on the store's clock, which stands still: armed at a new time
    [again] = store.match(PilotOffer("p1", "site/ce/q1", cpu=1, mem=1000), 1)
    assert again.id == ids[0] and run_one(store) == ids[1]
    assert notifier.run_once() == (0, [])  # the first job runs again: the request has not ended
    store.complete(again.id, again.attempt, "p1")
    assert notifier.run_once() == (1, ["sent"]) and hook.answered()[0]["states"] == {"done": 2}
