"""The periodic work of the control plane, as plain functions over a :class:`Context`.

Celery beat schedules them (:mod:`matcher.celery_app`); ``pilotfish run`` calls them in its own loop.
Each is safe when several processes run it at once:

* reaping, pool refresh, cleaning and the releasing sweep are atomic Lua scripts that re-check what
  they change (a lease still expired, a task queue still empty, a job still releasing), so running
  twice changes nothing the second time;
* the director cycle and re-pressure are not idempotent (they submit pilots, advance a cursor): they
  run under a Redis lock (:mod:`taskqueues.lock`) and a second runner skips its turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .context import Context
from .release import sweep
from .submission import pool_of_definition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapReport:
    requeued: int
    failed: int
    restored: int


def reap(ctx: Context, batch: int = 500) -> ReapReport:
    """Requeue expired leases (with back-off and a retry limit) and restore jobs whose back-off is over."""
    total = [0, 0, 0]
    while True:
        counts = ctx.store.requeue_expired(batch)
        total = [a + b for a, b in zip(total, counts, strict=True)]
        if max(counts) < batch:
            return ReapReport(*total)


def refresh_pools(ctx: Context) -> int:
    """Recompute every task queue's SubmitPool from the catalog (RFC #7: every 15 minutes); returns changes."""
    changed = 0
    for tq_id, definition in ctx.store.tq_definitions().items():
        queues = pool_of_definition(ctx.catalog, definition, vo=ctx.settings.vo)
        if set(queues) != ctx.store.pool(tq_id):
            added, removed = ctx.store.refresh_pool(tq_id, queues)
            log.info("task queue %s: pool %+d/-%d queues", tq_id, added, removed)
            changed += 1
    return changed


def clean(ctx: Context) -> list[str]:
    """Forget task queues (and their pools) empty for longer than the grace period."""
    removed: list[str] = []
    while True:
        batch = ctx.store.clean(ctx.settings.clean_grace)
        removed += batch
        if not batch:
            return removed


def release_sweep(ctx: Context) -> int:
    """Release jobs left in the releasing set (no releaser heard of them, or their pool was cleaned)."""
    return len(sweep(ctx.store, ctx.catalog, vo=ctx.settings.vo))
