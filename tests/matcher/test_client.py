"""matcher.client.Client against a real redis-server: the CLI's operations from Python, its errors named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from matcher.client import Client, Request, WaitTimeout
from matcher.workflow.model import WorkflowError
from taskqueues.errors import JobRefused, NoEligibleQueue, NotFound, PilotfishError, ValidationError
from taskqueues.settings import Settings
from taskqueues.store.lifecycle import Lifecycle
from taskqueues.store.records import JobState, PilotOffer

HELLO = {
    "name": "hello",
    "jobs": [{"name": "a", "command": "echo a"}, {"name": "b", "command": "echo b", "deps": ["a"]}],
}


class Ticks:
    """A clock that a sleep advances (no real waiting)."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_submit_status_jobs_cancel(redis_url: str, tmp_path: Path) -> None:
    client = Client(redis_url)
    request = client.submit(HELLO)
    assert isinstance(request, Request) and request.name == "hello" and set(request.ids) == {"a", "b"}
    assert client.status(request).states == {"blocked": 1, "waiting": 1}
    assert client.status("hello").id == request.id  # by its unique name, as the CLI
    assert [(r.name, r.state) for r in client.jobs(request=request)] == [("a", "waiting"), ("b", "blocked")]
    path = tmp_path / "again.json"
    path.write_text(json.dumps({**HELLO, "name": "again"}))
    again = client.submit(path)
    assert client.cancel(again) == f"request {again.id}: 1 jobs cancelled, 0 matched or running jobs asked to stop now"
    assert sorted(r.state for r in client.jobs(request=again, states=["finished"])) == ["cancelled", "dep-failed"]
    listing = client.listing(limit=1)
    assert listing.more and len(listing.rows) == 1


def test_wait_reports_progress_and_times_out_naming_the_request(redis_url: str) -> None:
    client = Client(redis_url)
    request = client.submit(HELLO)
    ticks = Ticks()
    seen: list[dict[str, int]] = []
    with pytest.raises(WaitTimeout, match=f"request {request.id} has not ended after 3 s: 1 blocked, 1 waiting"):
        client.wait(
            request, 3, progress=lambda s: seen.append(s.states), poll=1, sleep=ticks.sleep, clock=lambda: ticks.now
        )
    assert len(seen) == 4 and seen[0] == {"blocked": 1, "waiting": 1}
    client.cancel(request)
    final = client.wait(request, 3, sleep=ticks.sleep, clock=lambda: ticks.now)
    assert final.final and final.states == {"cancelled": 1, "dep-failed": 1}


def test_bad_input_is_named_and_stores_nothing(redis_url: str) -> None:
    client = Client(redis_url)
    with pytest.raises(WorkflowError, match="<dict>"):
        client.submit({"name": "bad", "jobs": [{"name": "x"}]})
    assert client.store.requests() == {}
    with pytest.raises(NotFound, match="no request with id or name 'nope'"):
        client.status("nope")
    with pytest.raises(NotFound, match="no job '999'"):
        client.logs("999")
    request = client.submit(HELLO)
    with pytest.raises(ValidationError, match="--stream 'stdin' is not a stream"):
        client.logs(request.ids["a"], stream="stdin")
    with pytest.raises(ValidationError, match="has not run yet \\(waiting\\): it has no attempt 2"):
        client.logs(request.ids["a"], attempt=2)
    with pytest.raises(ValidationError, match="--state 'late' is not a job state"):
        client.jobs(states=["late"])
    with pytest.raises(PilotfishError, match="needs a redis_url or settings"):
        Client()
    assert client.logs(request.ids["a"]).log is None


def test_from_settings_uses_the_settings_the_cli_reads(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PILOTFISH_REDIS_URL", redis_url)
    monkeypatch.setenv("PILOTFISH_VO", "lhcb")
    client = Client.from_settings()
    request = client.submit(HELLO)
    assert client.store.keys.vo == "lhcb"
    assert Client(redis_url, vo="lhcb").status(request.id).jobs == 2
    assert Client.from_settings(Settings(redis_url=redis_url)).store.keys.vo == "default"
    assert client.store.job(request.ids["a"]).state is JobState.WAITING


def test_owner_and_group_reach_the_request_and_every_job_row(redis_url: str) -> None:
    """The blocked job is in no task queue yet: its account comes from its request's record; the waiting one's
    from its task queue (which names its account)."""
    client = Client(redis_url)
    request = client.submit(HELLO, owner="alice", group="ana")
    rows = client.jobs(request=request)
    assert {(r.name, r.state, r.owner, r.group) for r in rows} == {
        ("a", "waiting", "alice", "ana"),
        ("b", "blocked", "alice", "ana"),
    }
    with pytest.raises(ValidationError, match="al ice"):
        client.submit(HELLO, owner="al ice")


def test_hold_release_resubmit_update_and_events(redis_url: str) -> None:
    client = Client(redis_url)
    request = client.submit(HELLO)
    a, b = request.ids["a"], request.ids["b"]
    assert client.hold(request, reason="wait", by="alice") == (
        f"request {request.id}: 1 held, 1 hold-pending by alice (wait)".replace(
            "hold-pending", "held when they would wait"
        )
    )
    assert client.store.job(b).held_by == "alice" and {r.id: r.state for r in client.jobs(request=request)} == {
        a: "held",
        b: "blocked",
    }
    assert client.release(a, b, by="bob") == "2 jobs: 2 released by bob"
    assert "priority 0 -> 30" in client.update(a, priority=30, by="bob")
    client.cancel(request)
    assert client.resubmit(request, states=["cancelled"], by="carol") == (
        f"request {request.id}: 1 jobs resubmitted by carol, and 1 dep-failed dependents with them"
    )
    assert [(e.source, e.state, e.by) for e in client.events(a)] == [
        (None, "waiting", "submit"),
        ("waiting", "held", "alice"),
        ("held", "waiting", "bob"),
        ("waiting", "waiting", "bob"),  # the update
        ("waiting", "cancelled", "cancel"),
        ("cancelled", "waiting", "carol"),
    ]
    assert client.store.job(b).state is JobState.BLOCKED


def test_an_update_of_several_jobs_checks_every_one_before_changing_any(redis_url: str) -> None:
    client = Client(redis_url)
    request = client.submit(HELLO)
    a, b = request.ids["a"], request.ids["b"]  # b is blocked behind a: not updatable
    events = len(client.events(a))
    with pytest.raises(JobRefused, match=f"job {b} is blocked: .*nothing changed"):
        client.update(a, b, priority=30)
    with pytest.raises(ValidationError, match="cpu"):
        client.update(a, a, requirements={"cpu": 10_000})
    assert client.store.job(a).priority is None and len(client.events(a)) == events
    other = client.submit({**HELLO, "name": "other"}).ids["a"]
    lines = client.update(a, other, a, priority=30, by="bob").splitlines()
    assert [line.split(":")[0] for line in lines] == [f"job {a}", f"job {other}"]  # once each, in the order named
    assert all("priority 0 -> 30" in line and line.endswith(", waiting") for line in lines)
    assert client.store.job(a).priority == 30 and client.store.job(other).priority == 30


def test_an_update_of_two_jobs_changes_neither_when_the_second_is_matched_before_the_change(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``update A B``: every job is checked and placed, then B is leased by a real match in the instant before
    the change (made deterministic: the match runs just before the store's update step). The command is
    refused naming B, and A is not changed either (the step that changes them checks them all first)."""
    client = Client(redis_url)
    two = {"name": "two", "jobs": [{"name": "a", "command": "echo a"}, {"name": "b", "command": "echo b"}]}
    request = client.submit(two)
    a, b = request.ids["a"], request.ids["b"]
    client.update(b, priority=3600)  # the most urgent: the one a pilot takes
    before = client.store.jobs([a, b])
    events = [client.events(a), client.events(b)]
    (queue,) = client.store.pool(before[1].tq_id)
    step = Lifecycle.update
    matched: list[str] = []

    def matched_first(self: Lifecycle, *args: Any, **kwargs: Any) -> Any:
        if not matched:
            matched.extend(j.id for j in client.store.match(PilotOffer("racer", queue, 8, 64_000)))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(Lifecycle, "update", matched_first)
    with pytest.raises(JobRefused, match=f"^job {b} is matched: only a waiting or held job is updated"):
        client.update(a, b, priority=30, requirements={"cpu": 2})
    assert matched == [b]
    after = client.store.jobs([a, b])
    assert after[0] == before[0] and after[1].state is JobState.MATCHED and after[1].tq_id == before[1].tq_id
    assert client.events(a) == events[0]  # and b's are its own, then its match (no update between)
    assert [(e.state, e.by) for e in client.events(b)[len(events[1]) :]] == [("matched", "match")]
    assert client.events(b)[: len(events[1])] == events[1]


CHOICE = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce.queues.q]
shapes = [{ name = "big", cpu = 16, mem = "64G" }]
[sites.B]
Platform = "EL8"
[sites.B.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""


def test_an_update_that_fits_one_job_and_not_the_other_changes_neither(redis_url: str, tmp_path: Path) -> None:
    """8 cores fit the job of site A (16-core shapes) and no queue of the job of site B: refused naming B's job,
    the requirement and the queue that excluded it; neither job changed."""
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CHOICE)
    client = Client(redis_url, catalog=str(catalog))
    jobs = [{"name": n, "command": "true", "requirements": {"Platform": p}} for n, p in (("a", "EL9"), ("b", "EL8"))]
    request = client.submit({"name": "mix", "jobs": jobs})
    a, b = request.ids["a"], request.ids["b"]
    before = client.store.jobs([a, b])
    with pytest.raises(NoEligibleQueue, match=f"job '{b}'.*B/ce/q: consumables: wants cpu=8"):
        client.update(a, b, requirements={"cpu": 8}, priority=60)
    assert client.store.jobs([a, b]) == before and len(client.events(a)) == 1
    assert "cpu 1 -> 8" in client.update(a, requirements={"cpu": 8})


def test_history_requests_and_notify_from_python(redis_url: str) -> None:
    """Issue 28: every new command is a method too."""
    client = Client(redis_url)
    ended = client.submit(HELLO, owner="alice", group="phys", notify="https://hooks.example.org/pf")
    client.cancel(ended)
    running = client.submit({**HELLO, "name": "later"}, owner="bob")
    assert [s.id for s in client.requests()] == [running.id]
    assert [s.id for s in client.requests(ended=True, owner="alice")] == [ended.id]
    assert client.status(ended).notify == {"url": "https://hooks.example.org/pf", "state": "waiting"}
    page = client.history("1h", owner="alice", limit=1)
    assert [r.state for r in page.rows] == ["cancelled"] and page.next is not None
    rest = client.history("1h", owner="alice", after=page.next)
    assert [r.state for r in rest.rows] == ["dep-failed"] and rest.next is None
    assert client.history("1h", group="phys", states=["done"]).rows == []
    assert [r.owner for r in client.jobs(owner="bob")] == ["bob", "bob"] and client.jobs(group="phys") == []
    with pytest.raises(ValidationError, match="--since 'then' is not a time"):
        client.history("then")


def test_an_update_of_many_jobs_reads_what_it_plans_once_not_per_job(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job, its request and its task queue's definition were read one round trip at a time before the one
    call that changes them: three commands a job. Now a few for the whole update, however many jobs (the
    commands the client sends counted on the real client; the script's own are the server's business)."""
    client = Client(redis_url)
    many = {"name": "many", "jobs": [{"name": f"j{i}", "command": "true"} for i in range(40)]}
    ids = list(client.submit(many).ids.values())
    sent: list[object] = []
    real = client.store.client.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        sent.append(args[0])
        return real(*args, **options)

    monkeypatch.setattr(client.store.client, "execute_command", counted)
    lines = client.update(*ids, priority=60, requirements={"mem": 100}).splitlines()
    assert len(lines) == 40 and all("priority 0 -> 60" in line and "mem" in line for line in lines)
    assert len(sent) < 20, f"{len(sent)} commands for 40 jobs: {sent}"
    assert {client.store.job(i).priority for i in ids} == {60}
