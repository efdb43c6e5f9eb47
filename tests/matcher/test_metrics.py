"""``pilotfish metrics``: the counters the scripts keep, and what a real server, a real pilot and a served
/metrics endpoint report, parsed with prometheus_client's own parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from matcher.cli.metrics import registry
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.counters import MATCH_BUCKETS, LatencyHistogram
from taskqueues.store.keys import Keys
from taskqueues.store.records import PilotOffer, RunResult
from taskqueues.store.redis_server import RedisServer, free_port
from tests.support.clock import FakeClock
from tests.support.paths import ROOT
from tests.support.pilots import QUEUE, pilot_env, running_pilot
from tests.support.polling import wait_until
from tests.support.store import job

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition text, by name and labels (the ``vo`` label left out)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if k != "vo")
            out[sample.name, labels] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_scripts_count_ends_expiries_retries_matches_and_blocked_jobs(any_redis: redis.Redis) -> None:
    clock = FakeClock()
    store = Store(any_redis, lease_seconds=10, backoff=0, clock=clock)
    a, _, c, d = store.submit([job("t1", dependents=(1,)), job("t2", pending=1), job("t3"), job("t1")])
    seen = store.views.census(30, clock())
    assert seen.jobs["blocked"] == 1 and seen.by_task_queue["t2", "blocked"] == 1
    assert seen.jobs["waiting"] == 3 and seen.by_queue["site/ce/q1", "waiting"] == 3
    assert seen.by_queue["site/ce/q1", "blocked"] == 1

    offer = PilotOffer("p", "site/ce/q1", 1, 1000)
    [m] = store.match(offer)
    assert m.id == a
    store.complete(a, m.attempt, "p", RunResult(wall=1))  # releases b
    [m2] = store.match(offer)
    store.fail(m2.id, m2.attempt, "p", RunResult(reason="preempted"), requeue=True)  # a retry
    [m3] = store.match(offer)
    clock.now += 11
    store.requeue_expired()  # its lease expired: a retry
    store.cancel(c if m3.id != c else d)
    seen = store.views.census(30, clock())
    assert seen.counter("ended:done") == 1 and seen.counter("ended:cancelled") == 1
    assert seen.counter("matched") == 3 and seen.counter("retries") == 2 and seen.counter("lease_expired") == 1
    assert seen.jobs["blocked"] == 0 and ("t2", "blocked") not in seen.by_task_queue
    assert not any(k.startswith("blocked:") for k in seen.counters), "a task queue's blocked field goes at 0"


def test_a_cancelled_dependency_ends_its_blocked_dependents_as_dep_failed(any_redis: redis.Redis) -> None:
    store = Store(any_redis)
    first, _, _ = store.submit(
        [job("t1", dependents=(1,)), job("t2", pending=1, dependents=(2,)), job("t2", pending=1)]
    )
    store.cancel(first)
    seen = store.views.census(30)
    assert seen.counter("ended:cancelled") == 1 and seen.counter("ended:dep-failed") == 2
    assert seen.jobs["blocked"] == 0


def test_held_jobs_are_counted_apart_from_waiting_ones(any_redis: redis.Redis) -> None:
    store = Store(any_redis)
    held, _ = store.submit([job("t1"), job("t1")])
    store.lifecycle.hold([held], "alice")
    seen = store.views.census(30)
    assert seen.jobs["held"] == 1 and seen.jobs["waiting"] == 1 and seen.by_queue["site/ce/q1", "waiting"] == 1
    store.lifecycle.hold([held], "alice", release=True)
    assert store.views.census(30).jobs["held"] == 0


def test_task_queue_series_are_capped_and_the_rest_adds_up_under_other(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    store.submit([job(f"tq{i}") for i in range(5) for _ in range(i + 1)])
    settings = Settings().with_(redis_url=redis_url, state_dir=str(tmp_path), metrics_task_queues=2)
    samples = parse(generate_latest(registry(Context(settings))).decode())
    per_tq = {
        dict(labels)["task_queue"]: v for (name, labels), v in samples.items() if name == "pilotfish_task_queue_jobs"
    }
    assert per_tq == {"tq4": 5, "tq3": 4, "other": 1 + 2 + 3}


def test_the_latency_histogram_sends_what_it_saw_once() -> None:
    hist = LatencyHistogram()
    assert hist.take() is None
    hist.observe(0.0001)
    hist.observe(0.003)
    hist.observe(100.0)
    taken = hist.take()
    assert taken is not None and len(taken) == len(MATCH_BUCKETS) + 2
    assert taken[0] == 1 and taken[MATCH_BUCKETS.index(0.005)] == 1 and taken[-2] == 1
    assert taken[-1] == pytest.approx(100.0031)
    assert hist.take() is None
    hist.give_back(taken)
    assert hist.take() == taken


@contextmanager
def serving(redis_url: str, tmp_path: Path, port: int | None = None) -> Iterator[str]:
    """``pilotfish metrics --serve PORT`` (a free port when none is given) as a real process; yields its URL once
    it answers."""
    port = port or free_port()
    env = {
        **os.environ,
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": str(ROOT),
    }
    log = (tmp_path / "metrics.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "matcher.cli", "metrics", "--serve", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: proc.poll() is not None or scrape(url) is not None, timeout=30, what="the metrics server")
        assert proc.poll() is None, (tmp_path / "metrics.log").read_text()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def scrape(url: str) -> Samples | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return parse(reply.read().decode())
    except OSError:
        return None


def test_a_served_endpoint_reports_a_real_pilots_work(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    ids = store.submit(
        [
            job("tqA", command="true"),
            job("tqA", command="true"),
            job("tqA", command="true"),
            job("tqA", command="exit 3"),
            job("tqLong", command="sleep 60", dependents=(5,)),
            job("tqA", pending=1),
            job("tqBig", cpu=8),
            job("tqBig", cpu=8),
        ]
    )
    long_job = ids[4]
    env = pilot_env(tmp_path, cores=2, mem=4000)
    with (
        running_pilot(redis_url, tmp_path, "--idle-timeout", "60", "--heartbeat", "0.3", env=env),
        serving(redis_url, tmp_path) as url,
    ):

        def settled() -> Samples | None:
            samples = scrape(url)
            done = (
                samples
                and value(samples, "pilotfish_jobs_ended_total", state="done") == 3
                and value(samples, "pilotfish_jobs", state="running") == 1
                and (value(samples, "pilotfish_match_latency_seconds_count") or 0) >= 1
            )
            return samples if done else None

        samples = wait_until(settled, timeout=60, what="the pilot's work in the metrics", interval=0.3)
        assert value(samples, "pilotfish_store_up") == 1
        assert value(samples, "pilotfish_jobs_ended_total", state="failed") == 1
        assert value(samples, "pilotfish_matches_total") == 5
        assert value(samples, "pilotfish_jobs", state="waiting") == 2
        assert value(samples, "pilotfish_jobs", state="blocked") == 1
        assert value(samples, "pilotfish_queue_jobs", queue=QUEUE, state="waiting") == 2
        assert value(samples, "pilotfish_queue_jobs", queue=QUEUE, state="blocked") == 1
        assert value(samples, "pilotfish_queue_jobs", queue=QUEUE, state="running") == 1
        assert value(samples, "pilotfish_task_queue_jobs", task_queue="tqBig", state="waiting") == 2
        assert value(samples, "pilotfish_task_queue_jobs", task_queue="tqLong", state="running") == 1
        assert value(samples, "pilotfish_pilots", queue=QUEUE, state="busy") == 1
        count = value(samples, "pilotfish_match_latency_seconds_count")
        assert value(samples, "pilotfish_match_latency_seconds_bucket", le="+Inf") == count
        assert (value(samples, "pilotfish_match_latency_seconds_sum") or 0) > 0
        assert (value(samples, "pilotfish_oldest_waiting_job_age_seconds") or 0) > 0

        store.cancel(long_job)  # the pilot kills it; its blocked dependent ends dep-failed
        samples = wait_until(
            lambda: (s := scrape(url)) and value(s, "pilotfish_jobs_ended_total", state="cancelled") == 1 and s,
            timeout=60,
            what="the cancelled job in the metrics",
            interval=0.3,
        )
        assert value(samples, "pilotfish_jobs_ended_total", state="dep-failed") == 1
        assert value(samples, "pilotfish_jobs", state="blocked") == 0
        assert value(samples, "pilotfish_jobs", state="running") == 0


def test_the_exporter_rides_out_a_redis_outage_and_a_kill_9_without_resetting_a_counter(tmp_path: Path) -> None:
    """The counters live in the store, not in the exporter: through a Redis outage a scrape says the store is
    down (one warning line, no traceback) and the exporter lives on; killed -9 and started again on the same
    port, it reports the same counters (Prometheus sees no reset)."""
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    try:
        store = Store.from_url(server.url, lease_seconds=10)
        a, _ = store.submit([job("t1"), job("t1")])
        [m] = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))
        store.complete(a, m.attempt, "p", RunResult(wall=1))
        port = free_port()

        def counted(samples: Samples | None) -> bool:
            return bool(
                samples
                and value(samples, "pilotfish_store_up") == 1
                and value(samples, "pilotfish_matches_total") == 1
                and value(samples, "pilotfish_jobs_ended_total", state="done") == 1
                and value(samples, "pilotfish_jobs", state="waiting") == 1
            )

        with serving(server.url, tmp_path, port) as url:
            assert counted(scrape(url))
            server.stop()
            down = scrape(url)
            assert down is not None and value(down, "pilotfish_store_up") == 0
            assert value(down, "pilotfish_matches_total") is None, "no stale counters while the store is down"
            server.start()
            wait_until(lambda: counted(scrape(url)), timeout=30, what="the counters back after the outage")
            pid = int(
                subprocess.run(
                    ["pgrep", "-f", f"metrics --serve {port}"], capture_output=True, text=True
                ).stdout.split()[0]
            )
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: scrape(url) is None, timeout=10, what="the killed exporter gone")
        log = (tmp_path / "metrics.log").read_text()
        assert "Traceback" not in log, log
        assert "the store did not answer" in log, log
        with serving(server.url, tmp_path, port) as url:  # the same port at once, the same counters
            assert counted(scrape(url))
    finally:
        server.stop()


def run_metrics(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """``pilotfish metrics`` (printed once) with these ``PILOTFISH_*`` settings and a state directory of its own."""
    env = {**os.environ, "PILOTFISH_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("PILOTFISH_REDIS_URL", None)
    env.update({f"PILOTFISH_{name.upper()}": value for name, value in settings.items()})
    return subprocess.run(
        [sys.executable, "-m", "matcher.cli", "metrics"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_metrics_report_a_store_that_does_not_answer_as_down(tmp_path: Path) -> None:
    """Issue 32: the store down (killed, stopped, or not started yet) is a sample, not a failed command."""
    server = RedisServer(tmp_path / "redis", persistent=True).start()
    server.stop()  # a port nothing listens on any more
    for settings in ({}, {"redis_url": server.url}):  # the embedded store not running; a configured one down
        done = run_metrics(tmp_path, **settings)
        assert done.returncode == 0, done.stderr
        samples = parse(done.stdout)
        assert value(samples, "pilotfish_store_up") == 0
        assert [family.name for family in text_string_to_metric_families(done.stdout)] == ["pilotfish_store_up"]
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
        assert "the store did not answer" in done.stderr, done.stderr


def test_metrics_with_a_wrong_password_is_a_one_line_error(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", options=("--requirepass", "right"), password="right").start()
    try:
        done = run_metrics(tmp_path, redis_url=server.url.replace("://", "://:wrong@", 1))
    finally:
        server.stop()
    assert done.returncode == 1 and done.stderr.startswith("pilotfish: error:"), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "wrong" not in done.stderr, done.stderr


def test_keys_name_the_stats_hash() -> None:
    assert Keys(vo="lhcb").stats == "pf:{lhcb}:stats"


def test_a_lease_taken_back_after_a_paused_store_is_counted(redis_url: str, tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store.from_url(redis_url, lease_seconds=10, backoff=0, clock=clock)
    (jid,) = store.submit([job("t1")])
    [m] = store.match(PilotOffer("p", "site/ce/q1", 1, 1000))
    clock.now += 11
    store.requeue_expired()  # the store paused longer than the lease: requeued while its pilot lives
    assert store.heartbeat("p", {jid: m.attempt}).lost == ()  # its pilot takes it back
    settings = Settings().with_(redis_url=redis_url, state_dir=str(tmp_path))
    samples = parse(generate_latest(registry(Context(settings))).decode())
    assert value(samples, "pilotfish_leases_taken_back_total") == 1
    assert value(samples, "pilotfish_lease_expiries_total") == 1
