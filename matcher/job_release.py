"""Releasing jobs that need Python before they can enter a task queue.

complete.lua releases a dependent into its task queue in the same atomic step as its last dependency's
completion. Two kinds of job cannot be released that way and land in the ``releasing`` set instead:

* a job whose requirements (or command) read its dependencies' outputs (``deps.<job>.<value>``): they
  are evaluated here, now that the outputs exist; an expression that fails fails that job alone;
* a job whose task queue lost its SubmitPool meanwhile (cleaned, or the catalog changed): its pool is
  computed again from the catalog.

complete.lua announces the jobs it puts in the set on the store's release channel, and the control plane's
releaser (:mod:`matcher.release_listener`) calls :func:`release` with those ids at once; the periodic tasks sweep
the set too, so a lost announcement or a crash between the two steps delays a job, never loses it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from taskqueues.catalog import Catalog
from taskqueues.errors import NotFound, PilotfishError
from taskqueues.store import (
    Job,
    JobState,
    Store,
    account_tq,
    job_account,
    placed_spec,
    release_refusal,
)

from .limits import MAX_COMMAND_BYTES, check_text
from .submission import place
from .workflow import JobTemplate, evaluate_deferred, render_command


def _outputs_by_name(store: Store, job: Job) -> dict[str, dict[str, Any]]:
    return {dep.name: dep.outputs for dep in store.jobs(list(job.deps))}


def account_of_job(store: Store, job: Job) -> tuple[str, str]:
    """A job's group and owner (:func:`taskqueues.store.fairshare.job_account`), reading its request if need be."""
    try:
        record = store.request(job.request) if job.request and "." not in job.tq_id else {}
    except NotFound:
        record = {}
    return job_account(job.tq_id, record)


def release_spec(store: Store, catalog: Catalog, job: Job, vo: str) -> dict[str, Any]:
    """What release.lua needs to enqueue ``job`` (or the error that fails it)."""
    try:
        requirements: dict[str, Any] = dict(job.requirements)
        command = None
        if job.deferred:
            saved = json.loads(job.deferred)
            template = JobTemplate(
                name=job.name,
                command=saved.get("command", job.command),
                requirements=saved.get("requirements", {}),
                deferred=saved.get("deferred", {}),
                command_deferred=bool(saved.get("command_deferred")),
                params=saved.get("params", {}),
            )
            outputs = _outputs_by_name(store, job)
            requirements = evaluate_deferred(template, outputs)
            command = check_text(
                render_command(template, outputs), job=job.name or job.id, field="command", limit=MAX_COMMAND_BYTES
            )  # the outputs filled in must leave a runnable command
        placement = place(catalog, requirements, job=job.name or job.id, vo=vo)
    except PilotfishError as exc:
        return release_refusal(str(exc))
    req = placement.requirements
    group, owner = account_of_job(store, job)
    return placed_spec(
        tq_id=account_tq(placement.tq_id, group, owner, job.rule),
        tq_def=placement.tq_def,
        queues=placement.queues,
        cpu=req.cpu,
        mem=req.mem,
        tmp=req.tmp,
        wall=req.wall,
        values=req.values,
        ete=job.ete,
        ete_safety_factor=store.ete_safety_factor,
        command=command,
    )


def release(store: Store, catalog: Catalog, ids: Iterable[str], *, vo: str = "default") -> dict[str, JobState]:
    """Release the given jobs if they are in the releasing set; returns the state each one reached."""
    out: dict[str, JobState] = {}
    for job in store.jobs(list(ids)):
        if job.state is not JobState.RELEASING:
            continue
        state = store.release(job.id, release_spec(store, catalog, job, vo))
        if state is not None:
            out[job.id] = state
    return out


def sweep(store: Store, catalog: Catalog, *, vo: str = "default", limit: int = 500) -> dict[str, JobState]:
    """Release whatever waits in the releasing set (the periodic safety net)."""
    return release(store, catalog, store.releasing(limit), vo=vo)
