"""The periodic work of the control plane, as plain functions over a :class:`Context`.

Celery beat schedules them (:mod:`matcher.app.celery_app`); ``pilotfish run`` calls them in its own loop.
Each is safe when several processes run it at once:

* reaping, pool refresh, cleaning and the releasing sweep are atomic Lua scripts that re-check what
  they change (a lease still expired, a task queue still empty, a job still releasing), so running
  twice changes nothing the second time;
* the director cycle and re-pressure are not idempotent (they submit pilots, advance a cursor): they
  run under a Redis lock (:mod:`taskqueues.store.lock`) and a second runner skips its turn.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from taskqueues.context import Context
from taskqueues.store import Largest, canonical_json

from .job_release import sweep
from .submission import pool_of_definition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapReport:
    requeued: int
    failed: int
    restored: int
    parked: int = 0
    """Jobs parked since the last report (in any process): each is logged once, as a warning."""


def reap(ctx: Context, batch: int = 500) -> ReapReport:
    """Requeue expired leases (with back-off and a retry limit) and restore jobs whose back-off is over;
    log the jobs parked since the last run (a match or a reap could not read their member or record)."""
    total = [0, 0, 0]
    while True:
        counts = ctx.store.requeue_expired(batch)
        total = [a + b for a, b in zip(total, counts, strict=True)]
        if max(counts) < batch:
            break
    parked = ctx.store.newly_parked()
    for p in parked:
        log.warning(
            "job %s parked: %s (task queue %s, member %r); it waits for an operator: pilotfish explain %s",
            p.job,
            p.reason,
            p.task_queue or "-",
            p.member,
            p.job,
        )
    requeued, failed, restored = total
    return ReapReport(requeued, failed, restored, len(parked))


def exact_definition(tq_def: str, largest: Largest | None) -> str:
    """A task queue's canonical definition with its bucketed consumables replaced by the largest exact values
    of the jobs it holds (the definition itself when no job entered it since it was last empty)."""
    values = json.loads(tq_def)
    if not isinstance(values, dict):
        raise ValueError(f"not a JSON object: {tq_def!r}")
    if largest is None:
        return tq_def
    values.update(cpu=largest.cpu, mem=largest.mem, tmp=largest.tmp)
    if "wall" in values and largest.wall:
        values["wall"] = largest.wall
    return canonical_json(values)


def refresh_pools(ctx: Context) -> int:
    """Recompute every task queue's SubmitPool from the catalog (RFC #7: every 15 minutes); returns changes.

    Eligibility is judged on what the jobs of the task queue really ask, the largest exact value of each
    consumable among them (the store's scripts keep it as jobs enter), never on the bucket that names the
    task queue: a queue whose shapes hold every job of it stays eligible though it cannot hold the bucket
    (a 4000 MB shape and jobs of mem = "4G", exact 4000, bucket 4096). Every pool's stamp is renewed,
    changed or not: it says when the pool was last computed.
    """
    changed = 0
    definitions = ctx.store.tq_definitions()
    largest = ctx.store.tq_largest(sorted(definitions))
    for tq_id, definition in definitions.items():
        try:
            exact = exact_definition(definition, largest.get(tq_id))
        except ValueError:
            log.warning("task queue %s: its definition cannot be read (%r): pool left as it is", tq_id, definition)
            continue
        queues = pool_of_definition(ctx.catalog, exact, vo=ctx.settings.vo)
        done = ctx.store.refresh_pool(tq_id, queues)
        if done is None:  # the clean task, running beside this one, forgot it since we read the definitions
            log.debug("task queue %s: cleaned meanwhile, no pool to refresh", tq_id)
            continue
        added, removed = done
        if added or removed:
            log.info("task queue %s: pool %+d/-%d queues", tq_id, added, removed)
            changed += 1
    return changed


def clean(ctx: Context) -> list[str]:
    """Forget task queues (and their pools) empty for longer than the grace period, and, past the job
    retention, requests whose jobs all ended (:mod:`taskqueues.store.retention`); returns the task queues."""
    removed: list[str] = []
    while True:
        batch = ctx.store.clean(ctx.settings.clean_grace)
        removed += batch
        if not batch:
            break
    if ctx.settings.job_retention > 0:
        gone = ctx.store.forget_ended(ctx.store.clock() - ctx.settings.job_retention)
        if gone.jobs:
            log.info("retention: forgot %d requests and %d jobs in all", gone.requests, gone.jobs)
    return removed


def release_sweep(ctx: Context) -> int:
    """Release jobs left in the releasing set (no releaser heard of them, or their pool was cleaned)."""
    return len(sweep(ctx.store, ctx.catalog, vo=ctx.settings.vo))
