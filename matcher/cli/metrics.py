"""``pilotfish metrics``: the community's state for Prometheus, read from the store at each scrape.

A :class:`StoreCollector` takes a ``store.views.census()`` of the store every time it is collected,
so a scrape never sees a stale value and the process keeps no state of its own (any number of replicas
give the same answer). ``pilotfish metrics`` prints the exposition text once; ``--serve PORT`` answers
``/metrics`` over HTTP until stopped.

Names follow Prometheus conventions: gauges of what is now (``pilotfish_jobs{state=...}``), ``_total``
counters of what happened (kept by the store's scripts: ``taskqueues/store/counters.py``), seconds as the unit of
time. Every series carries the community (``vo``). Task queues are many and short-lived: only the
``metrics_task_queues`` largest get series of their own, the others add up under ``task_queue="other"``.

A store that does not answer (down, killed, or not started yet) is a sample, ``pilotfish_store_up 0``, with
one warning line, whether printed once or served; a store that refuses the credentials is an error.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterator

import click
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from taskqueues.context import Context
from taskqueues.errors import PilotfishError, StoreUnavailable
from taskqueues.store import MATCH_BUCKETS, Census, StatField

log = logging.getLogger(__name__)

#: Job states whose end the store counts (``ended:<state>`` of the stats hash).
ENDED = ("done", "failed", "cancelled", "dep-failed")
OTHER = "other"


class StoreCollector(Collector):
    """The metrics of one community, from a census of its store taken at each collection."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        vo = self.ctx.settings.vo
        up = GaugeMetricFamily("pilotfish_store_up", "1 if the store answered this scrape, else 0", labels=["vo"])
        try:
            census = self.ctx.store.views.census(self.ctx.store.pilots.live_window)
        except PilotfishError as exc:
            log.warning("metrics: the store did not answer: %s", exc)
            up.add_metric([vo], 0)
            yield up
            return
        up.add_metric([vo], 1)
        yield up
        yield from families(census, vo, self.ctx.settings.metrics_task_queues)


def families(census: Census, vo: str, max_task_queues: int) -> Iterator[Metric]:
    """The metric families of one census."""
    jobs = GaugeMetricFamily("pilotfish_jobs", "Jobs now in each unfinished state", labels=["vo", "state"])
    for state, n in census.jobs.items():
        jobs.add_metric([vo, state], n)
    yield jobs

    by_queue = GaugeMetricFamily(
        "pilotfish_queue_jobs",
        "Jobs by catalog queue: waiting and blocked ones in every "
        "queue their task queue may use, running ones in their pilot's queue",
        labels=["vo", "queue", "state"],
    )
    for (queue, state), n in sorted(census.by_queue.items()):
        by_queue.add_metric([vo, queue, state], n)
    yield by_queue

    by_tq = GaugeMetricFamily(
        "pilotfish_task_queue_jobs",
        f"Jobs by task queue (the largest ones; the others add "
        f'up under task_queue="{OTHER}"); running counts matched jobs too',
        labels=["vo", "task_queue", "state"],
    )
    for (tq, state), n in sorted(capped(census.by_task_queue, max_task_queues).items()):
        by_tq.add_metric([vo, tq, state], n)
    yield by_tq

    ended = CounterMetricFamily("pilotfish_jobs_ended", "Jobs that ended, by final state", labels=["vo", "state"])
    for state in ENDED:
        ended.add_metric([vo, state], census.counter(StatField.ENDED + state))
    yield ended
    for name, field, doc in (
        ("pilotfish_lease_expiries", StatField.LEASE_EXPIRED, "Leases that expired (their pilot died or lost contact)"),
        ("pilotfish_retries", StatField.RETRIES, "Jobs put back to wait for another attempt"),
        (
            "pilotfish_leases_taken_back",
            StatField.TAKEN_BACK,
            "Requeued jobs their pilot's report or heartbeat took back (a store paused longer than the lease)",
        ),
        ("pilotfish_matches", StatField.MATCHED, "Jobs leased to pilots"),
        ("pilotfish_jobs_forgotten", StatField.FORGOTTEN, "Ended jobs forgotten by the retention (job_retention)"),
        ("pilotfish_jobs_resubmitted", StatField.RESUBMITTED, "Ended jobs brought back by pilotfish resubmit"),
    ):
        counter = CounterMetricFamily(name, doc, labels=["vo"])
        counter.add_metric([vo], census.counter(field))
        yield counter

    pilots = GaugeMetricFamily(
        "pilotfish_pilots",
        "Live pilots (a heartbeat within three leases) by queue and state (idle, busy, draining, stopped)",
        labels=["vo", "queue", "state"],
    )
    for p in census.pilots:
        pilots.add_metric([vo, p.queue, p.state], p.pilots)
    yield pilots

    for name, prefix, doc in (
        ("pilotfish_director_submissions", StatField.SUBMITTED, "Pilots the director submitted, by backend"),
        (
            "pilotfish_batch_system_errors",
            StatField.ERRORS,
            "Batch-system calls of the director that failed, by backend",
        ),
    ):
        counter = CounterMetricFamily(name, doc, labels=["vo", "backend"])
        for backend, total in sorted(census.with_prefix(prefix).items()):
            counter.add_metric([vo, backend], total)
        yield counter

    yield latency(census, vo)

    oldest = GaugeMetricFamily(
        "pilotfish_oldest_waiting_job_age_seconds",
        "Seconds since the oldest job at the head of a task queue was submitted (0 when no job waits)",
        labels=["vo"],
    )
    oldest.add_metric([vo], census.oldest_waiting or 0.0)
    yield oldest


def latency(census: Census, vo: str) -> HistogramMetricFamily:
    """The match latency the pilots saw (their heartbeats add it to the stats hash)."""
    per_bucket = census.with_prefix(StatField.MATCH_SECONDS)
    buckets, seen = [], 0.0
    for i, bound in enumerate([*map(repr, MATCH_BUCKETS), "+Inf"]):
        seen += per_bucket.get(str(i), 0.0)
        buckets.append((bound, seen))
    family = HistogramMetricFamily(
        "pilotfish_match_latency_seconds",
        "Match calls as pilots timed them, from the request sent to the reply read",
        labels=["vo"],
    )
    family.add_metric([vo], buckets, sum_value=per_bucket.get("sum", 0.0))
    return family


def capped(counts: Counter[tuple[str, str]], keep: int) -> Counter[tuple[str, str]]:
    """Per-task-queue counts with the ``keep`` largest task queues (by all their jobs) kept, the others summed
    under ``other``: the number of series stays bounded however many task queues there are."""
    totals: Counter[str] = Counter()
    for (tq, _), n in counts.items():
        totals[tq] += n
    kept = {tq for tq, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]}
    out: Counter[tuple[str, str]] = Counter()
    for (tq, state), n in counts.items():
        out[tq if tq in kept else OTHER, state] += n
    return out


def registry(ctx: Context) -> CollectorRegistry:
    """A registry with this community's collector only (no process metrics of the one serving them)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(ctx))
    return reg


@click.command()
@click.option(
    "--serve",
    "port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve /metrics on this TCP port until stopped, instead of printing once.",
)
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to serve on (--serve).")
def metrics(port: int | None, address: str) -> None:
    """Print the Prometheus metrics of the community (or serve them with --serve PORT)."""
    ctx = Context()
    reg = registry(ctx)
    # A wrong password or a URL that is no Redis: the CLI's one-line error, now. The store down, or not
    # started: the samples say so (pilotfish_store_up 0), and a warning.
    with contextlib.suppress(StoreUnavailable):
        ctx.store.ping()
    if port is None:
        click.echo(generate_latest(reg).decode(), nl=False)
        return
    start_http_server(port, addr=address, registry=reg)
    click.echo(f"serving metrics on http://{address}:{port}/metrics", err=True)
    threading.Event().wait()
