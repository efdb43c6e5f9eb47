"""Releasing dependents is the control plane's work, not the worker node's.

A dependent whose requirements read its dependency's outputs is announced by ``complete`` on the release
channel and evaluated at once by the control plane's releaser (:mod:`matcher.release_listener`), which the Celery
worker runs; the pilot carries neither the catalog nor the workflow language and imports no ``matcher``
module. Real redis-server, real ``pilotfish matcher`` worker and real pilot processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from matcher.release_listener import Releaser
from matcher.submission import Submitter, submit_workflow
from matcher.workflow import parse_workflow
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState, PilotOffer, RunResult
from tests.support.paths import ROOT
from tests.support.pilots import QUEUE, finish, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job

# The control plane's catalog: the pilots' queue is in it, and only there (a worker node never reads it).
CATALOG = """
[sites.site]
[sites.site.ces.ce]
[sites.site.ces.ce.queues.q1]
shapes = [{ name = "small", cpu = 2, mem = "4G" }]
"""

CHAIN = {
    "name": "chain",
    "jobs": [
        {"name": "size", "command": "echo mb=300 >> $PILOTFISH_OUTPUTS"},
        {
            "name": "use",
            "command": "echo {deps.size.mb}",
            "deps": ["size"],
            "requirements": {"mem": "2 * deps.size.mb"},
        },
    ],
}


@pytest.fixture
def ctx(redis_url: str, tmp_path: Path) -> Context:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    return Context(Settings(redis_url=redis_url, catalog=str(catalog), state_dir=str(tmp_path / "state")))


@pytest.fixture
def worker(ctx: Context, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``pilotfish matcher --no-beat``: the control plane's worker without beat, so no periodic sweep runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")}
    env.update(
        PYTHONPATH=str(ROOT),
        PILOTFISH_REDIS_URL=ctx.redis_url,
        PILOTFISH_CATALOG=ctx.settings.catalog,
        PILOTFISH_STATE_DIR=ctx.settings.state_dir,
        PILOTFISH_CONFIG=os.devnull,
        PILOTFISH_BEAT_DIRECTOR="false",
    )
    with open(tmp_path / "worker.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "matcher.cli",
                "matcher",
                "--no-beat",
                "--concurrency",
                "1",
                "--loglevel",
                "WARNING",
            ],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def listeners(ctx: Context) -> int:
    [(_, count)] = ctx.client.pubsub_numsub(ctx.keys.release_channel)
    return int(count)


def test_a_dependent_waiting_for_outputs_is_released_by_the_worker(
    ctx: Context, worker: subprocess.Popen[bytes], redis_url: str, tmp_path: Path
) -> None:
    """The pilot's environment names no catalog: had it evaluated the dependent itself, the local default
    catalog would have put it in a task queue this pilot's queue does not serve."""
    wait_until(lambda: listeners(ctx) or worker.poll() is not None, timeout=60, what="the worker's releaser")
    assert worker.poll() is None, (tmp_path / "worker.log").read_text()
    ids = submit_workflow(Submitter.of(ctx), parse_workflow(CHAIN, "<test>")).ids
    env = {k: v for k, v in pilot_env(tmp_path).items() if not k.startswith("PILOTFISH_")}
    with running_pilot(redis_url, tmp_path, "--idle-timeout", "30", env=env) as proc:
        wait_until(lambda: ctx.store.job(ids["use"]).state is JobState.DONE, timeout=60, what="the dependent to run")
        proc.terminate()
        log = finish(proc, tmp_path, 30)
    use = ctx.store.job(ids["use"])
    assert (use.mem, use.command) == (600, "echo 300"), log
    assert ctx.store.releasing() == []


def test_a_pilot_imports_no_matcher_module(redis_url: str, tmp_path: Path) -> None:
    """Every module of the pilot agent, and a pilot run that completes a job releasing a dependent."""
    store = Store.from_url(redis_url)
    store.submit([job(command="true", dependents=(1,)), job(command="true", pending=1)])
    code = f"""
import importlib, pkgutil, sys
import pilot.agent
for module in pkgutil.walk_packages(pilot.agent.__path__, "pilot.agent."):
    importlib.import_module(module.name)
from pilot.agent.command import pilot
try:
    pilot.main(["--redis-url", {redis_url!r}, "--queue", {QUEUE!r}, "--workdir", {str(tmp_path / "work")!r},
                "--idle-timeout", "0.5"], standalone_mode=False)
finally:
    print(sorted(m for m in sys.modules if m == "matcher" or m.startswith("matcher.")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=pilot_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    assert "2 payloads processed" in done.stderr


def test_complete_announces_what_it_puts_in_the_releasing_set(ctx: Context, real_redis: redis.Redis) -> None:
    ids = submit_workflow(Submitter.of(ctx), parse_workflow(CHAIN, "<test>")).ids
    pubsub = real_redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(ctx.keys.release_channel)
    wait_until(lambda: listeners(ctx), timeout=10, what="the subscription")
    (size,) = ctx.store.match(PilotOffer("p", QUEUE, 2, 4000))
    assert ctx.store.complete(size.id, size.attempt, "p", RunResult(outputs={"mb": 300})) == [ids["use"]]
    message = wait_until(lambda: pubsub.get_message(timeout=0.1), timeout=10, what="the announcement")
    assert message["data"] == ids["use"].encode()
    pubsub.close()


def test_the_releaser_releases_what_is_announced_and_what_waited(ctx: Context) -> None:
    """Announced while it listens: released at once. Left in the releasing set while none listened: released
    when it subscribes."""
    first = submit_workflow(Submitter.of(ctx), parse_workflow(CHAIN, "<test>")).ids
    (size,) = ctx.store.match(PilotOffer("p", QUEUE, 2, 4000))
    ctx.store.complete(size.id, size.attempt, "p", RunResult(outputs={"mb": 300}))
    assert ctx.store.job(first["use"]).state is JobState.RELEASING
    releaser = Releaser(ctx.store, ctx.catalog, vo=ctx.settings.vo).start()
    try:
        wait_until(releaser.listening.is_set, timeout=10, what="the releaser to subscribe")
        assert ctx.store.job(first["use"]).state is JobState.WAITING, "released by the sweep at subscription"
        second = submit_workflow(Submitter.of(ctx), parse_workflow({**CHAIN, "name": "again"}, "<test>")).ids
        (size,) = [j for j in ctx.store.match(PilotOffer("p", QUEUE, 2, 4000), 2) if j.id == second["size"]]
        ctx.store.complete(size.id, size.attempt, "p", RunResult(outputs={"mb": 100}))
        wait_until(
            lambda: ctx.store.job(second["use"]).state is JobState.WAITING, timeout=10, what="the announced release"
        )
        assert ctx.store.job(second["use"]).mem == 200
    finally:
        releaser.stop()
