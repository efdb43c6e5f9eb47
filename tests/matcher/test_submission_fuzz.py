"""Fuzzing the submission path: every hostile document is refused in one line, writing nothing, or stored whole.

A document goes the way ``pilotfish submit`` takes it: written to a TOML or JSON file, loaded
(:func:`matcher.workflow.load_workflow`), then submitted (:func:`matcher.submission.submit_workflow`) to a
real redis-server. The contract, for every document the strategies of ``tests/subfuzz.py`` draw:

* either it is refused with a :class:`~taskqueues.errors.ValidationError` (or ConfigError) whose message is
  one line, starts with the file's name, and names the job and the field the hostile change was about
  (a file too big to read or that is no document at all is refused as a whole); and the keyspace is
  byte-identical to what it was (the key list and a DUMP of every key);
* or it is accepted, and the request is stored whole: one record per job, the id counter moved by the
  number of jobs, every job in the state its dependencies call for, each waiting job in its task queue.

Never another exception, never a hang: a watchdog turns an example that runs for a minute into a failure
(it asserts nothing about speed: the slowest examples, megabyte strings, take a fraction of a second).
``place`` alone is fuzzed with hostile requirement values too.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from matcher.submission import JobSpec, Submitter, place, submit_workflow
from matcher.workflow import Workflow, load_workflow
from taskqueues.catalog import Catalog
from taskqueues.errors import ConfigError, NoEligibleQueue, ValidationError
from taskqueues.store import Store
from taskqueues.store.records import JobState
from taskqueues.store.redis_server import RedisServer
from tests.support.clock import FakeClock
from tests.support.documents import (
    JUNK,
    REQUIREMENT_NAMES,
    TEXT,
    Change,
    junk_docs,
    mutated_docs,
    valid_docs,
    write_doc,
)
from tests.support.keyspace import snapshot

CATALOG = """
[sites.A]
Platform = "EL9"
[sites.A.ces.ce]
[sites.A.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }, { name = "big", cpu = 16, mem = "64G" }]
[sites.B]
Platform = "EL8"
SoftwareTag = ["AppV1", "AppV2"]
MaxMemory = 4000
[sites.B.ces.ce]
batch = "slurm"
[sites.B.ces.ce.queues.q]
shapes = [{ name = "small", cpu = 4, mem = "8G" }]
"""

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
WATCHDOG_SECONDS = 60


class Hang(Exception):
    """An example ran for WATCHDOG_SECONDS: the submission path is not bounded for this input."""


@contextmanager
def watchdog(seconds: int = WATCHDOG_SECONDS) -> Iterator[None]:
    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # the test's own timeout (pytest-timeout): put back
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


@dataclass
class Lab:
    client: redis.Redis
    store: Store
    submitter: Submitter
    directory: Path

    def reset(self) -> None:
        """An emptied store holding one earlier request, so a refusal has pools and records to leave alone."""
        self.client.flushall()
        self.submitter.submit(
            [JobSpec("old", "true", {"Platform": "EL9"}), JobSpec("old2", "true", {"cpu": 2}, deps=("old",))],
            name="earlier",
        )

    def seq(self) -> int:
        return int(self.client.get(self.store.keys.seq) or 0)


@pytest.fixture
def lab(redis_server: RedisServer, tmp_path: Path) -> Iterator[Lab]:
    client = redis.Redis.from_url(redis_server.url)
    clock = FakeClock(1_000_000.0)
    store = Store(client, lease_seconds=30, clock=clock)
    yield Lab(client, store, Submitter(store, Catalog.loads(CATALOG), clock=clock, capacity=lambda: 8.0), tmp_path)
    client.flushall()
    client.close()


def check_refusal(exc: Exception, path: Path, change: Change | None) -> None:
    message = str(exc)
    assert isinstance(exc, ValidationError | ConfigError), f"{type(exc).__name__}: {message[:300]}"
    assert len(message.splitlines()) == 1, message[:2000]
    assert message.startswith(f"{path}: "), message[:300]
    assert len(message) <= 4000, message[:300]
    if change is None or " syntax: " in message or ": file is " in message:
        return  # a file too big to read, or that is no document, is refused as a whole
    if change.jobs:
        assert any(f"job {job!r}" in message for job in change.jobs), (change, message[:1000])
    if change.fields:
        assert any(f"field {field!r}"[:40] in message for field in change.fields), (change, message[:1000])


def check_stored(lab: Lab, workflow: Workflow, request: str, ids: dict[str, str], seq_before: int) -> None:
    store, client, keys = lab.store, lab.client, lab.store.keys
    count = len(workflow.jobs)
    assert lab.seq() == seq_before + count
    assert sorted(int(i) for i in ids.values()) == list(range(seq_before + 1, seq_before + count + 1))
    record = store.request(request)
    assert (record["n"], record["name"]) == (count, workflow.name)
    jobs = {job.name: job for job in store.request_jobs(request)}
    assert set(jobs) == {template.name for template in workflow.jobs}
    for template in workflow.jobs:
        job = jobs[template.name]
        assert (job.id, job.request) == (ids[template.name], request)
        assert set(job.deps) == {ids[dep] for dep in template.deps}
        if not template.command_deferred:
            assert job.command == template.command
        if job.state is JobState.WAITING:
            members = [m.decode().split(":", 1)[0] for m in client.zrange(keys.tq(job.tq_id), 0, -1)]
            assert job.id in members
            assert client.hexists(keys.tqdefs, job.tq_id) and client.scard(keys.pool(job.tq_id)) > 0
        else:  # a job whose requirements cannot be evaluated is refused, never stored failed (issue 32)
            assert job.state is JobState.BLOCKED, job.state
            assert 0 < job.pending <= len(template.deps)
        json.loads(client.hget(keys.jobs, job.id) or b"")


def attempt(lab: Lab, doc: Any, kind: str, change: Change | None) -> bool:
    """Submit ``doc`` as a file of ``kind``; check the contract; True when it was accepted."""
    path = write_doc(doc, lab.directory, kind)
    lab.reset()
    before, seq_before = snapshot(lab.client), lab.seq()
    try:
        with watchdog():
            workflow = load_workflow(path)
            done = submit_workflow(lab.submitter, workflow)
    except Hang:
        raise
    except Exception as exc:  # the contract is about every exception
        check_refusal(exc, path, change)
        assert snapshot(lab.client) == before, "a refused submission changed the keyspace"
        event(f"refused {change.what if change else ''}")
        return False
    assert change is None or not change.must_refuse, f"accepted: {change}"
    event(f"accepted {change.what if change else ''}")
    check_stored(lab, workflow, done.request, done.ids, seq_before)
    return True


KINDS = st.sampled_from(["toml", "json"])


@settings(FUZZ, max_examples=15)
@given(doc=valid_docs(), kind=KINDS)
def test_valid_documents_are_stored_whole(lab: Lab, doc: dict[str, Any], kind: str) -> None:
    assert attempt(lab, doc, kind, None)


@FUZZ
@given(case=mutated_docs(), kind=KINDS)
def test_a_hostile_change_is_refused_naming_job_and_field_or_stored_whole(
    lab: Lab, case: tuple[dict[str, Any], Change], kind: str
) -> None:
    doc, change = case
    attempt(lab, doc, kind, change.as_written(kind))


@settings(FUZZ, max_examples=60)
@given(doc=junk_docs(), kind=KINDS)
def test_shapeless_documents_are_refused_in_one_line_or_stored_whole(lab: Lab, doc: Any, kind: str) -> None:
    attempt(lab, doc, kind, None)


@settings(FUZZ, max_examples=200)
@given(values=st.dictionaries(st.sampled_from(REQUIREMENT_NAMES) | TEXT, JUNK, max_size=4))
def test_requirement_values_are_placed_or_refused_naming_job_and_field(values: dict[str, Any]) -> None:
    try:
        with watchdog():
            placement = place(Catalog.loads(CATALOG), values, job="j", vo="default")
    except Hang:
        raise
    except Exception as exc:  # the contract is about every exception
        message = str(exc)
        assert isinstance(exc, ValidationError), f"{type(exc).__name__}: {message[:300]}"
        assert len(message.splitlines()) == 1 and len(message) <= 4000, message[:300]
        # Only "no queue can run it" may lack a field: when no one requirement alone stands in the way.
        assert message.startswith("job 'j', field " if not isinstance(exc, NoEligibleQueue) else "job 'j'")
        return
    assert placement.queues and json.loads(placement.tq_def)
    assert placement.requirements.canonical_json().isascii()
