"""Submission: the validation chain that turns user jobs into stored jobs in their task queues.

For a request (a set of jobs with dependencies, from Python or a workflow file), in order, collecting
every problem before storing anything (a refused request writes nothing: the store is called once, last):

0. the request's name and priority, and each job's name, command, key, rule, estimate and retries, are
   text the store and a shell can carry, within the limits of :mod:`matcher.limits` (a program's job names
   need only be one short printable line; a workflow file's are stricter);
1. the dependency graph is a DAG of known, unique names (:func:`taskqueues.dag.check_dag`);
2. each job's requirements parse and validate (:func:`taskqueues.requirements.parse_requirements`), every
   requirement name is offered by some queue of the catalog (RFC #7), and some queue is eligible —
   else the error says which requirement excluded which queue;
3. an instance-type hint names a shape of an eligible queue that can hold the job, and a
   ``BackendOptions`` string parses for the backend of some eligible queue;
4. run-time estimates: the last success of the job's key, else the user's hint (``ete``, else ``wall``)
   and its rule's learnt statistics, each by its worth (a widely spread rule has no say over a hint), else
   the default (:func:`taskqueues.ete.estimate`); the hint is kept on the record;
5. pressures along the DAG give each job its score: ``ETA(request) - pressure(job) - priority``, the
   date by which it should start (lower is more urgent, one scale for every request); the ETA counts
   the critical path, what the request's shape needs on the cores (a long job behind a wide fan) and
   the load of everyone's outstanding work (:mod:`matcher.request_eta`); the request's record keeps the date
   that load gave (``load``) and the cores it counted (``cores``): re-pressure moves that date when the
   estimates it summed are corrected (:mod:`matcher.repressure_load`).

A job whose template failed to evaluate is stored as failed with the reason, and the jobs depending on
it as dep-failed; the rest of the request runs. Requirements that read dependency outputs are kept
with the job and evaluated when it is released (:mod:`matcher.job_release`). Both kinds are still checked at
submission as far as they are known: their requirement names, their plain values, and that some queue
is eligible for what is known.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taskqueues import dag
from taskqueues.backend_options import check_job_options, normalize_options
from taskqueues.catalog import Catalog, Queue
from taskqueues.context import Context
from taskqueues.errors import PilotfishError, ProblemList, RequirementError, ValidationError, located, shown
from taskqueues.ete import estimate
from taskqueues.placement import BACKEND_OPTIONS, INSTANCE_TYPE, SUBMIT_POOL
from taskqueues.requirements import CONSUMABLES, Requirements, bucket, check_name, check_value, parse_requirements
from taskqueues.settings import DEFAULTS
from taskqueues.store import (
    DEFAULT_GROUP,
    NewJob,
    Store,
    account_tq,
    canonical_json,
    check_account_name,
    default_owner,
    request_record,
)
from taskqueues.webhook import check_webhook

from .limits import (
    MAX_COMMAND_BYTES,
    MAX_ETE,
    MAX_KEY,
    MAX_NAME,
    MAX_PRIORITY,
    MAX_REQUEST_TEXT,
    MAX_RETRIES,
    RULE_NAME_RE,
    RULE_NAME_RULE,
    check_number,
    check_text,
)
from .request_eta import fan_in_bound, live_cores, load_seconds, request_eta


@dataclass(frozen=True)
class JobSpec:
    """One job as a user describes it; ``max_retries`` None: the submitter's (the ``max_retries`` setting)."""

    name: str
    command: str
    requirements: Mapping[str, object] = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    key: str = ""
    rule: str = ""
    ete: float | None = None
    max_retries: int | None = None
    deferred: Mapping[str, str] = field(default_factory=dict)
    deferred_spec: Mapping[str, Any] = field(default_factory=dict)
    #: Exit codes on which a failed payload runs again, at most ``retry_max`` times (the workflow's ``retry``).
    retry_on: tuple[int, ...] = ()
    retry_max: int = 0


@dataclass(frozen=True)
class Submitted:
    """What a submission stored: the request id and each job's id by name."""

    request: str
    ids: dict[str, str]
    eta: float
    critical_path: float


@dataclass(frozen=True)
class Placement:
    """Where a requirement class can run: its task queue, its canonical form and its eligible queues."""

    requirements: Requirements
    tq_id: str
    tq_def: str
    queues: tuple[str, ...]


class SubmissionError(ProblemList):
    """A request was refused: one line, ``<source>: <problem>; ...`` (the source is the workflow file, or
    "request refused"); ``problems`` lists every reason, each naming its job and field."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        super().__init__(source or "request refused", problems)


def place(catalog: Catalog, raw: Mapping[str, object], *, job: str, vo: str) -> Placement:
    """Validate one job's requirements against the catalog and name its task queue.

    An ``InstanceType`` requirement is the Seven Bridges instance-type hint: it restricts the job to the
    queues offering that shape, which must hold the job. A ``BackendOptions`` requirement is open-lmake's
    ``-b``/``--backend`` string (``"-p long -q high"`` for Slurm, ``"-p -100"`` for Grid Engine): it
    restricts the job to the queues whose backend accepts it, and the director submits the pilots planned
    for such jobs with it. Both are part of the task-queue identity, so the director honours them per task
    queue; the option string is normalised first, so spellings of the same options share a task queue.
    """
    if not isinstance(raw, Mapping):
        raise ValidationError(
            f"must be a table of names to values, not {type(raw).__name__}", job=job, field="requirements"
        )
    values = dict(raw)
    hint = values.pop(INSTANCE_TYPE, None)
    if hint is not None:
        if not isinstance(hint, str):
            raise ValidationError(f"must name one shape, not {shown(hint)}", job=job, field=INSTANCE_TYPE)
        check_value(INSTANCE_TYPE, hint, job=job)
    options = _options(values.pop(BACKEND_OPTIONS, None), job)
    req = parse_requirements(values, job=job)
    catalog.check_names(req, job=job, vo=vo)
    queues = _with_options(_with_shape(catalog.require_eligible(req, job=job, vo=vo), req, hint, job), options, job)
    extras = {k: v for k, v in ((INSTANCE_TYPE, hint), (BACKEND_OPTIONS, options)) if v is not None}
    pool = tuple(q.id for q in queues)
    split = _pool_mark(catalog, req, extras, pool, vo)
    if split is not None:
        extras[SUBMIT_POOL] = split
    if not extras:
        return Placement(req, req.tq_id, req.canonical_json(), pool)
    canonical = canonical_json({**req.canonical(), **extras})
    tq_id = Requirements(values={**req.values, **extras}).tq_id
    return Placement(req, tq_id, canonical, tuple(q.id for q in queues))


def _pool_mark(
    catalog: Catalog, req: Requirements, extras: Mapping[str, str], pool: Sequence[str], vo: str
) -> str | None:
    """The ``SubmitPool`` mark splitting the job off its requirement class, None when it needs none.

    A task queue's SubmitPool is one set of queues for all its jobs (RFC #7: the pool belongs to a set of
    requirements), and the queue heads a pilot matches are the task queue's: a job that fits more queues
    than the largest job of its bucket would be stuck behind it there (a 4000 MB job sharing the 4096 MB
    bucket with a 4001 MB one, on 4000 MB shapes). So a job whose exact values fit more queues than the
    bucket's own values gets a task queue of its own kind, named by the queues it fits: jobs of one bucket
    and one pool share it, and every job of a task queue fits its whole pool.
    """
    exact = (req.cpu, req.mem, req.tmp, req.wall or 0)
    if exact == (bucket(req.cpu), bucket(req.mem), bucket(req.tmp), bucket(req.wall or 0)):
        return None
    definition = canonical_json({**req.canonical(), **extras})
    if _bucket_pool(catalog, definition, vo) == frozenset(pool):
        return None
    return hashlib.sha256(",".join(sorted(pool)).encode()).hexdigest()[:12]


#: Per catalog (a catalog never changes once loaded): a bucket's definition and VO -> its eligible queues.
_BUCKET_POOLS: weakref.WeakKeyDictionary[Catalog, dict[tuple[str, str], frozenset[str]]] = weakref.WeakKeyDictionary()


def _bucket_pool(catalog: Catalog, definition: str, vo: str) -> frozenset[str]:
    """:func:`pool_of_definition` of a bucket's definition, remembered: the jobs of a request share a few
    buckets, and judging one costs twice what placing a job does."""
    known = _BUCKET_POOLS.setdefault(catalog, {})
    pool = known.get((definition, vo))
    if pool is None:
        if len(known) >= 4096:
            known.clear()
        pool = known[(definition, vo)] = frozenset(pool_of_definition(catalog, definition, vo=vo))
    return pool


def _with_shape(queues: list[Queue], req: Requirements, hint: str | None, job: str) -> list[Queue]:
    """The queues that offer the hinted shape and whose shape holds the job (all of them without a hint)."""
    if hint is None:
        return queues
    offering = [q for q in queues if any(s.name == hint for s in q.shapes)]
    if not offering:
        raise ValidationError(f"no eligible queue offers the shape {hint!r}", job=job, field=INSTANCE_TYPE)
    holding = [
        q
        for q in offering
        if any(s.name == hint and s.holds(req.cpu, req.mem, req.tmp, req.wall or 0) for s in q.shapes)
    ]
    if not holding:
        raise ValidationError(
            f"the shape {hint!r} cannot hold cpu={req.cpu} mem={req.mem} MB tmp={req.tmp} MB wall={req.wall}",
            job=job,
            field=INSTANCE_TYPE,
        )
    return holding


def _options(raw: object, job: str) -> str | None:
    """A job's ``BackendOptions`` normalised, None when absent or blank."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValidationError(f"must be a -b style option string, not {shown(raw)}", job=job, field=BACKEND_OPTIONS)
    check_value(BACKEND_OPTIONS, raw, job=job)
    try:
        options = normalize_options(raw, where=BACKEND_OPTIONS) or None
    except PilotfishError as exc:
        raise ValidationError(str(exc), job=job, field=BACKEND_OPTIONS) from None
    if options is not None:
        check_value(BACKEND_OPTIONS, options, job=job)  # quoting may have made it longer
    return options


def _with_options(queues: list[Queue], options: str | None, job: str) -> list[Queue]:
    """The queues whose backend accepts the job's option string (all of them without one)."""
    if options is None:
        return queues
    reasons: dict[str, str] = {}
    for queue in queues:
        try:
            check_job_options(queue.batch, options, where=queue.batch)
        except PilotfishError as exc:
            reasons[queue.id] = str(exc)
    accepting = [q for q in queues if q.id not in reasons]
    if not accepting:
        why = "; ".join(f"{q}: {r}" for q, r in sorted(reasons.items()))
        raise ValidationError(f"no eligible queue accepts {options!r} ({why})", job=job, field=BACKEND_OPTIONS)
    return accepting


def pool_of_definition(catalog: Catalog, tq_def: str, *, vo: str) -> list[str]:
    """The queues eligible for a task queue, from a canonical form (the periodic pool refresh).

    The stored canonical form holds bucketed consumables; the refresh gives it the largest exact values of
    the jobs the task queue holds instead (:func:`matcher.periodic.exact_definition`), so that no queue
    that holds every one of them is dropped. A class no queue can run any more gets an empty pool (its
    jobs wait, and ``pilotfish explain`` says why).
    """
    values = json.loads(tq_def)
    values.pop(SUBMIT_POOL, None)
    hint = values.pop(INSTANCE_TYPE, None)
    options = values.pop(BACKEND_OPTIONS, None)
    try:
        req = parse_requirements(values, job=f"task queue {tq_def}")
        queues = _with_options(_with_shape(catalog.eligible_queues(req, vo=vo), req, hint, ""), options, "")
        return [q.id for q in queues]
    except PilotfishError:
        return []


class Submitter:
    """Validates and stores requests for one community."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        *,
        vo: str = "default",
        default_ete: float = DEFAULTS.default_ete,
        clock: Any = time.time,
        capacity: Callable[[], float] | None = None,
        ete_spread: float = DEFAULTS.ete_spread,
        max_retries: int = DEFAULTS.max_retries,
        notify_url: str = DEFAULTS.notify_url,
    ) -> None:
        """``capacity`` gives the cores that run the work (for the load part of the ETA, :mod:`matcher.request_eta`);
        ``ete_spread`` is the coefficient of variation over which a rule has no say over a job's hint;
        ``max_retries`` is that of a job that gives none; ``notify_url`` the webhook of a request that names none.
        Each defaults to its setting's default."""
        self.ete_spread = ete_spread
        self.max_retries = max_retries
        self.notify_url = notify_url
        self.store = store
        self.catalog = catalog
        self.vo = vo
        self.default_ete = default_ete
        self.clock = clock
        self.capacity = capacity or (lambda: live_cores(store))

    @classmethod
    def of(cls, ctx: Context) -> Submitter:
        """The submitter of a context's store, catalog and settings."""
        return cls(
            ctx.store,
            ctx.catalog,
            vo=ctx.settings.vo,
            default_ete=ctx.settings.default_ete,
            ete_spread=ctx.settings.ete_spread,
            max_retries=ctx.settings.max_retries,
            notify_url=ctx.settings.notify_url,
        )

    def submit(
        self,
        jobs: Sequence[JobSpec],
        *,
        name: str = "",
        priority: float = 0.0,
        source: str = "",
        owner: str = "",
        group: str = "",
        notify: str = "",
    ) -> Submitted:
        """Validate every job, then store the whole request in one atomic step (or nothing).

        Every check runs before the first write (the store's one ``submit`` call), so a refused request
        leaves Redis untouched; the refusal lists every problem, after ``source`` (the workflow file).
        ``owner`` and ``group`` (:mod:`taskqueues.store.fairshare`) default to the local user and "default";
        ``notify``, the webhook called when the request ends (:mod:`matcher.notify`), to ``notify_url``.
        """
        if not jobs:
            raise SubmissionError([located("the request has no job", field="jobs")], source)
        owner, group = owner or default_owner(), group or DEFAULT_GROUP
        notify = notify or self.notify_url
        problems = _request_problems(name, priority) + _problems(
            lambda: check_account_name(owner, "owner"),
            lambda: check_account_name(group, "group"),
            lambda: notify and check_webhook(notify),
        )
        problems += [p for spec in jobs for p in _spec_problems(spec)]
        if problems:
            raise SubmissionError(problems, source)
        try:
            order = dag.check_dag([j.name for j in jobs], {j.name: j.deps for j in jobs})
        except dag.DagError as exc:
            raise SubmissionError(exc.problems, source) from None
        by_name = {j.name: j for j in jobs}
        placements: dict[str, Placement] = {}
        deferred_text: dict[str, str] = {}
        text = 0
        for spec in jobs:
            try:
                if spec.deferred:
                    self._check_static(spec)
                    kept = json.dumps(dict(spec.deferred_spec), sort_keys=True) if spec.deferred else ""
                    deferred_text[spec.name] = kept
                    text += len(kept)
                else:
                    placed = place(self.catalog, spec.requirements, job=spec.name, vo=self.vo)
                    placements[spec.name] = placed
                    text += len(placed.tq_def)
            except PilotfishError as exc:
                problems.append(str(exc))
            text += len(spec.command) + len(spec.key) + len(spec.name) + len(spec.rule)
        if text > MAX_REQUEST_TEXT:
            problems.append(
                located(
                    f"the jobs hold {text} characters of text (commands, names, keys, requirements), "
                    f"over the limit of {MAX_REQUEST_TEXT}: split the request",
                    field="jobs",
                )
            )
        if problems:
            raise SubmissionError(problems, source)

        ete, hints = self._estimates(jobs, placements)
        deps = {j.name: j.deps for j in jobs}
        pressure = dag.pressures(order, deps, ete)
        critical = max(pressure.values(), default=0.0)
        now = self.clock()
        work = {
            j.name: ete[j.name] * (placements[j.name].requirements.cpu if j.name in placements else 1) for j in jobs
        }
        cores = self.capacity()
        load = load_seconds(self.store, cores, sum(work.values()))
        eta = request_eta(now, critical, load, fan_in_bound(order, deps, ete, pressure, work, cores))
        index = {n: i for i, n in enumerate(order)}
        dependents = dag.dependents_of(order, deps)

        new_jobs = []
        for job_name in order:
            spec = by_name[job_name]
            placement = placements.get(job_name)
            new_jobs.append(
                NewJob(
                    command=spec.command,
                    tq_id=account_tq(placement.tq_id, group, owner, spec.rule) if placement else "",
                    tq_def=placement.tq_def if placement else "",
                    queues=placement.queues if placement else (),
                    cpu=placement.requirements.cpu if placement else 0,
                    mem=placement.requirements.mem if placement else 0,
                    tmp=placement.requirements.tmp if placement else 0,
                    ete=ete[job_name],
                    score=eta - pressure[job_name] - priority,
                    requirements=canonical_json(dict(placement.requirements.values) if placement else {}),
                    name=job_name,
                    max_retries=self.max_retries if spec.max_retries is None else spec.max_retries,
                    key=spec.key,
                    rule=spec.rule,
                    dependents=tuple(index[d] for d in dependents[job_name]),
                    deps=tuple(index[d] for d in spec.deps),
                    pending=len(set(spec.deps)),
                    deferred=deferred_text.get(job_name, ""),
                    pressure=pressure[job_name],
                    hint=hints.get(job_name),
                    retry_on=spec.retry_on,
                    retry_max=spec.retry_max,
                )
            )
        request_id = uuid.uuid4().hex[:12]
        record = request_record(
            name=name or request_id,
            priority=priority,
            now=now,
            eta=eta,
            critical=critical,
            load=now + load,
            cores=cores,
            jobs=len(jobs),
            owner=owner,
            group=group,
            notify=notify,
        )
        ids = self.store.submit(new_jobs, request=(request_id, record))
        return Submitted(request_id, dict(zip(order, ids, strict=True)), eta, critical)

    def _check_static(self, spec: JobSpec) -> None:
        """The requirements of a job stored without a placement (deferred, or failed at load) as far as known now.

        Its requirement names must exist and its plain values be valid, and some queue must be eligible with
        the unknown values left out (leaving a requirement out never makes a queue ineligible): what can be
        told at submission is told then, not when the job is released.
        """
        later = set(spec.deferred_spec.get("deferred", spec.deferred))
        place(self.catalog, {k: v for k, v in spec.requirements.items() if k not in later}, job=spec.name, vo=self.vo)
        offered = self.catalog.offered_names(self.vo)
        for requirement in sorted(later):
            check_name(requirement, job=spec.name)
            if requirement not in CONSUMABLES and requirement not in offered:
                raise RequirementError(
                    f"no queue of {self.catalog.source} offers {requirement!r} to VO {self.vo!r}",
                    job=spec.name,
                    field=requirement,
                )

    def _estimates(
        self, jobs: Sequence[JobSpec], placements: Mapping[str, Placement]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Each job's estimate, and the hints the jobs gave (kept on their records)."""
        last, rules = self.store.ete_stats([j.key for j in jobs if j.key], [j.rule for j in jobs if j.rule])
        out: dict[str, float] = {}
        hints: dict[str, float] = {}
        for spec in jobs:
            placement = placements.get(spec.name)
            hint = spec.ete if spec.ete is not None else (placement.requirements.wall if placement else None)
            if hint is not None:
                hints[spec.name] = float(hint)
            out[spec.name], _ = estimate(
                last.get(spec.key) if spec.key else None,
                rules.get(spec.rule) if spec.rule else None,
                hint,
                self.default_ete,
                spread=self.ete_spread,
            )
        return out, hints


def _problems(*checks: Callable[[], object]) -> list[str]:
    """The message of each check that raised a ValidationError."""
    problems = []
    for check in checks:
        try:
            check()
        except ValidationError as exc:
            problems.append(str(exc))
    return problems


def _request_problems(name: object, priority: object) -> list[str]:
    """What is wrong with a request's own fields (its name and priority: :mod:`matcher.limits`)."""
    return _problems(
        lambda: check_text(name, job=None, field="name", limit=MAX_NAME, line=True) if name != "" else name,
        lambda: check_number(
            priority, job=None, field="priority", low=-MAX_PRIORITY, high=MAX_PRIORITY, what="a number of seconds"
        ),
    )


def _spec_problems(spec: JobSpec) -> list[str]:
    """What is wrong with one job's own fields, before its requirements (see :mod:`matcher.limits`)."""
    try:
        job = _check_job_name(spec.name)
    except ValidationError as exc:
        return [located(exc.problem, job=spec.name if isinstance(spec.name, str) else None, field="name")]
    return _problems(
        lambda: check_text(spec.command, job=job, field="command", limit=MAX_COMMAND_BYTES),
        lambda: check_text(spec.key, job=job, field="key", limit=MAX_KEY, line=True) if spec.key else "",
        lambda: _check_rule(spec.rule, job) if spec.rule else "",
        lambda: (
            spec.ete
            if spec.ete is None
            else check_number(spec.ete, job=job, field="ete", low=0, high=MAX_ETE, what="a number of seconds")
        ),
        lambda: spec.max_retries if spec.max_retries is None else _check_retries(spec.max_retries, job),
        lambda: _check_deps(spec.deps, job),
    )


def _check_job_name(name: object) -> str:
    """A job name from a program: one short printable line. (A workflow file's names are stricter,
    :data:`matcher.limits.JOB_NAME_RE`, as they must fit ``deps.<job>.<value>``.)"""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"a job name must be a non-empty string, not {shown(name)}", field="name")
    return check_text(name, job=None, field="name", limit=MAX_NAME, line=True)


def _check_rule(rule: object, job: str) -> str:
    if not isinstance(rule, str) or not RULE_NAME_RE.fullmatch(rule):
        raise ValidationError(f"{RULE_NAME_RULE}, not {shown(rule)}", job=job, field="rule")
    return rule


def _check_retries(retries: object, job: str) -> int:
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise ValidationError(
            f"must be a whole number within 0..{MAX_RETRIES}, not {shown(retries)}", job=job, field="max_retries"
        )
    return retries


def _check_deps(deps: object, job: str) -> object:
    if not isinstance(deps, tuple | list) or not all(isinstance(dep, str) for dep in deps):
        raise ValidationError(f"must be a list of job names, not {shown(deps)}", job=job, field="deps")
    return deps


def specs_from_workflow(workflow: Any) -> list[JobSpec]:
    """The jobs of a :class:`matcher.workflow.Workflow` as submission specs."""
    specs = []
    for job in workflow.jobs:
        deferred_spec: dict[str, Any] = {}
        if job.deferred or job.command_deferred:
            deferred_spec = {
                "deferred": dict(job.deferred),
                "params": dict(job.params),
                "command": job.command,
                "command_deferred": job.command_deferred,
                "requirements": dict(job.requirements),
            }
        specs.append(
            JobSpec(
                name=job.name,
                command=job.command,
                requirements=dict(job.requirements),
                deps=tuple(job.deps),
                key=job.key or "",
                rule=job.rule or "",
                ete=job.ete_hint,
                deferred=dict(job.deferred) or ({"command": job.command} if job.command_deferred else {}),
                deferred_spec=deferred_spec,
                retry_on=job.retry_on,
                retry_max=job.retry_max,
            )
        )
    return specs


def submit_workflow(
    submitter: Submitter, workflow: Any, *, owner: str = "", group: str = "", notify: str = ""
) -> Submitted:
    """Submit a loaded workflow as one request, with its priority; ``owner``/``group``/``notify`` (the CLI's)
    override the file's."""
    return submitter.submit(
        specs_from_workflow(workflow),
        name=workflow.name,
        priority=workflow.priority,
        source=workflow.source,
        owner=owner or workflow.owner,
        group=group or workflow.group,
        notify=notify or workflow.notify,
    )
