"""A Python client for users who submit from code: the CLI's operations, as typed methods.

``Client.from_settings()`` reads the settings the ``pilotfish`` command reads (defaults, ``pilotfish.toml``,
``PILOTFISH_*``): with ``api_url`` set it returns a :class:`matcher.api.remote.RemoteClient`, which makes the same
calls through the HTTP API with the user's token, otherwise a :class:`Client` of the store. ``Client(redis_url,
vo=...)`` names the store itself. Every method goes through the code its command uses (:mod:`matcher.submission`,
:mod:`matcher.status`, :mod:`matcher.cli.control`, :mod:`matcher.joblist`, :mod:`matcher.history`,
:mod:`matcher.logview`, :mod:`matcher.lifecycle`), so what a program sees is what ``pilotfish status``, ``jobs``,
``history``, ``logs`` and ``events`` print. Errors are the CLI's: :class:`taskqueues.errors.PilotfishError` and its
subclasses, each naming what is wrong.

A submitted workflow is run by the control plane and pilots already running (``pilotfish up``, a director,
a batch system): the client only talks to the store (or to the API, which does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from taskqueues.context import Context
from taskqueues.errors import PilotfishError
from taskqueues.settings import Settings
from taskqueues.store import JobEvent, Store

from . import lifecycle
from .calls import Calls, LogView, Overview, Request, WaitTimeout
from .cli.control import drain_pilot, stop_job, stop_target
from .explain import Explanation
from .explain import explain as explain_job
from .history import HistoryFilter, HistoryListing, list_history
from .joblist import JobFilter, Listing, list_jobs, parse_states
from .logview import Output, follow, output, parse_streams, where_lines
from .shares import set_policy, shares_view
from .status import RequestStatus, find_request, request_status, requests_status, task_queues
from .submission import Submitter, submit_workflow
from .workflow import load_workflow, parse_workflow

__all__ = ["Calls", "Client", "Request", "WaitTimeout"]


class Client(Calls):
    """The store of one community, for submitting and following work from a program."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        vo: str = "default",
        prefix: str = "pf",
        catalog: str = "",
        settings: Settings | None = None,
    ) -> None:
        """``Client(redis_url, vo=...)``: that store (with the control plane's credentials) and ``catalog``, the
        resource catalog file submissions are placed with (empty: the local default, as the CLI's);
        ``Client(settings=...)``: everything from those settings (see :meth:`from_settings`)."""
        if (redis_url is None) == (settings is None):
            raise PilotfishError("Client needs a redis_url or settings (one of them)")
        if redis_url is not None:
            settings = Settings(redis_url=redis_url, vo=vo, prefix=prefix, catalog=catalog)
        assert settings is not None
        self.context = Context(settings)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> Calls:
        """A client of the deployment the ``pilotfish`` command would use (``Settings.load()``: defaults,
        ``pilotfish.toml``, ``PILOTFISH_*``): through its API when ``api_url`` is set (a
        :class:`~matcher.api.remote.RemoteClient`), else of its store, the running embedded server included."""
        settings = settings if settings is not None else Settings.load()
        if settings.api_url:
            from .api.remote import RemoteClient

            return RemoteClient.from_settings(settings)
        return cls(settings=settings)

    @property
    def store(self) -> Store:
        return self.context.store

    def request_id(self, request: Request | str) -> str:
        """The id of a request given by id or unique name."""
        return request.id if isinstance(request, Request) else find_request(self.store, request)

    def submit(
        self,
        workflow: Mapping[str, Any] | str | Path,
        *,
        owner: str | None = None,
        group: str | None = None,
        source: str = "<dict>",
        notify: str | None = None,
    ) -> Request:
        """Submit a workflow (a mapping as a workflow file holds it, or the path of a ``.toml``/``.json`` file)
        as one request; a WorkflowError names every problem and nothing is stored. ``owner``/``group`` override
        the workflow's (default: the local user, group ``default``; shares and limits count by them); ``source``
        names a mapping in messages; ``notify``, the webhook called when it ends, the workflow's (default: the
        ``notify_url`` setting)."""
        loaded = load_workflow(workflow) if isinstance(workflow, str | Path) else parse_workflow(workflow, source)
        done = submit_workflow(
            Submitter.of(self.context), loaded, owner=owner or "", group=group or "", notify=notify or ""
        )
        return Request(done.request, loaded.name, dict(done.ids), done.eta)

    def status(self, request: Request | str, examples: int = 0) -> RequestStatus:
        return request_status(self.store, self.request_id(request), examples=examples)

    def overview(self) -> Overview:
        return Overview(requests_status(self.store), task_queues(self.store), list(self.store.parked().values()))

    def requests(
        self, *, owner: str | None = None, group: str | None = None, ended: bool = False
    ) -> list[RequestStatus]:
        """The requests with unfinished jobs, oldest first (``pilotfish status``); with ``ended`` the ended
        ones too (``status --all``); of one owner or group when given."""
        found = requests_status(self.store, owner, group)
        return found if ended else [s for s in found if not s.final]

    def history(
        self,
        since: str = "1d",
        until: str = "now",
        *,
        owner: str | None = None,
        group: str | None = None,
        states: Iterable[str] = (),
        after: str | None = None,
        limit: int = 100,
    ) -> HistoryListing:
        flt = HistoryFilter.of(since, until, states=states, owner=owner, group=group, after=after, limit=limit)
        return list_history(self.store, flt)

    def cancel(self, target: Request | str, reason: str = "cancelled by user", *, by: str | None = None) -> str:
        """Cancel a request or one job (``pilotfish cancel``); a line saying what happened. ``by``: who asks,
        as the jobs' events say it (the API's caller; default "cancel")."""
        return stop_target(self.store, target.id if isinstance(target, Request) else target, reason, by)

    def kill(self, job: str, reason: str = "killed by operator", *, by: str | None = None) -> str:
        return stop_job(self.store, job, reason, kill=True, by=by)

    def drain(self, pilot: str, *, shutdown: bool = False, reason: str | None = None) -> str:
        return drain_pilot(self.store, pilot, shutdown=shutdown, reason=reason)

    def listing(
        self,
        *,
        request: Request | str | None = None,
        states: Iterable[str] = (),
        queue: str | None = None,
        task_queue: str | None = None,
        pilot: str | None = None,
        limit: int = 100,
        owner: str | None = None,
        group: str | None = None,
    ) -> Listing:
        """:meth:`jobs` with whether more jobs matched than ``limit``."""
        rid = self.request_id(request) if request is not None else None
        flt = JobFilter(parse_states(states), rid, queue, task_queue, pilot, limit, owner, group)
        return list_jobs(self.store, flt)

    def explain(self, job: str) -> Explanation:
        return explain_job(self.store, self.context.catalog, job)

    def logs(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Output:
        """A job's payload output (``pilotfish logs``): ``.text("out")`` / ``.text("err")``, and where its
        pilot keeps the files (``.log``)."""
        return output(self.store, job, attempt, parse_streams(stream))

    def log_view(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> LogView:
        out = self.logs(job, stream=stream, attempt=attempt)
        return LogView(out.job.id, out.attempt, out.streams, where_lines(out), {s: out.text(s) for s in out.streams})

    def follow(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Iterator[tuple[str, str]]:
        """(stream, text) as a running payload prints it, until that attempt ends (``logs --follow``)."""
        return follow(self.store, job, attempt, parse_streams(stream))

    def shares(self) -> dict[str, Any] | None:
        return shares_view(self.store)

    def set_shares(self, policy: str | None, source: str = "<policy>") -> str:
        return set_policy(self.store, policy, source)

    def audit(self, limit: int = 50) -> list[dict[str, Any]]:
        return self.store.audit.read(limit)

    def hold(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        return lifecycle.hold(self.store, self.target_names(targets), by or lifecycle.local_user(), reason)

    def release(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        return lifecycle.release(self.store, self.target_names(targets), by or lifecycle.local_user(), reason)

    def resubmit(
        self, *targets: Request | str, states: Iterable[str] | None = None, reason: str = "", by: str | None = None
    ) -> str:
        picked = parse_states(states) if states is not None else None
        return lifecycle.resubmit(self.store, self.target_names(targets), by or lifecycle.local_user(), reason, picked)

    def update(
        self,
        *jobs: str,
        priority: float | None = None,
        requirements: Mapping[str, object] | None = None,
        wall: str | None = None,
        by: str | None = None,
    ) -> str:
        ctx = self.context
        return lifecycle.update(
            ctx.store,
            ctx.catalog,
            jobs,
            by or lifecycle.local_user(),
            vo=ctx.settings.vo,
            priority=priority,
            requirements=requirements,
            wall=wall,
        )

    def events(self, job: str) -> list[JobEvent]:
        return lifecycle.job_events(self.store, job)
