"""A Python client for users who submit from code: the CLI's operations, as typed methods.

``Client.from_settings()`` reads the settings the ``pilotfish`` command reads (defaults, ``pilotfish.toml``,
``PILOTFISH_*``); ``Client(redis_url, vo=...)`` names the store itself. Every method goes through the code its
command uses (:mod:`matcher.submission`, :mod:`matcher.status`, :mod:`matcher.cli.control`, :mod:`matcher.joblist`,
:mod:`matcher.history`, :mod:`matcher.logview`), so what a program sees is what ``pilotfish status``, ``jobs``,
``history`` and ``logs`` print.
Errors are the CLI's: :class:`taskqueues.errors.PilotfishError` and its subclasses, each naming what is wrong.

A submitted workflow is run by the control plane and pilots already running (``pilotfish up``, a director,
a batch system): the client only talks to the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskqueues.context import Context
from taskqueues.errors import PilotfishError
from taskqueues.settings import Settings
from taskqueues.store import Store

from .cli.control import stop_target
from .history import HistoryFilter, HistoryListing, list_history
from .joblist import JobFilter, JobRow, Listing, list_jobs, parse_states
from .logview import Output, follow, output, parse_streams
from .status import RequestStatus, find_request, request_status, requests_status
from .submission import Submitter, submit_workflow
from .workflow import load_workflow
from .workflow.parse import parse_workflow

__all__ = ["Client", "Request", "WaitTimeout"]


class WaitTimeout(PilotfishError):
    """:meth:`Client.wait` gave up: the request had not ended within its timeout."""


@dataclass(frozen=True)
class Request:
    """A submitted request: its id, its jobs' ids by name, and its ETA (UNIX seconds) when submitted."""

    id: str
    name: str
    ids: dict[str, str]
    eta: float


class Client:
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
    def from_settings(cls, settings: Settings | None = None) -> Client:
        """A client of the store the ``pilotfish`` command would use (``Settings.load()``: defaults,
        ``pilotfish.toml``, ``PILOTFISH_*``), the running embedded server included."""
        return cls(settings=settings if settings is not None else Settings.load())

    @property
    def store(self) -> Store:
        return self.context.store

    def _request_id(self, request: Request | str) -> str:
        return request.id if isinstance(request, Request) else find_request(self.store, request)

    def submit(
        self,
        workflow: Mapping[str, Any] | str | Path,
        *,
        owner: str | None = None,
        group: str | None = None,
        notify: str | None = None,
    ) -> Request:
        """Submit a workflow (a mapping as a workflow file holds it, or the path of a ``.toml``/``.json`` file)
        as one request; a WorkflowError names every problem and nothing is stored. ``owner``/``group`` override
        the workflow's (default: the local user, group ``default``; shares and limits count by them);
        ``notify``, the webhook called when it ends, the workflow's (default: the ``notify_url`` setting)."""
        loaded = load_workflow(workflow) if isinstance(workflow, str | Path) else parse_workflow(workflow, "<dict>")
        done = submit_workflow(
            Submitter.of(self.context), loaded, owner=owner or "", group=group or "", notify=notify or ""
        )
        return Request(done.request, loaded.name, dict(done.ids), done.eta)

    def status(self, request: Request | str) -> RequestStatus:
        """The request's jobs by state, ETA and critical path, and its webhook's notification
        (``pilotfish status REQUEST``)."""
        return request_status(self.store, self._request_id(request))

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
        """A page of the jobs that ended in a time window, oldest end first (``pilotfish history``): times as
        the command takes them (``2d``, a date, ``@<unix seconds>``); ``.next`` is the cursor of the next page
        (pass it as ``after``), None after the last."""
        flt = HistoryFilter.of(since, until, states=states, owner=owner, group=group, after=after, limit=limit)
        return list_history(self.store, flt)

    def wait(
        self,
        request: Request | str,
        timeout: float | None = None,
        *,
        progress: Callable[[RequestStatus], object] | None = None,
        poll: float = 1.0,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> RequestStatus:
        """Wait until every job of the request has ended and return its final status; ``progress`` is called
        with each status read (every ``poll`` seconds). Raises :class:`WaitTimeout` after ``timeout`` seconds."""
        rid = self._request_id(request)
        deadline = None if timeout is None else clock() + timeout
        while True:
            status = request_status(self.store, rid)
            if progress is not None:
                progress(status)
            if status.final:
                return status
            if deadline is not None and clock() >= deadline:
                raise WaitTimeout(
                    f"request {rid} has not ended after {timeout:g} s: "
                    + ", ".join(f"{n} {s}" for s, n in status.states.items())
                )
            sleep(poll if deadline is None else max(0.0, min(poll, deadline - clock())))

    def cancel(self, target: Request | str, reason: str = "cancelled by user") -> str:
        """Cancel a request or one job (``pilotfish cancel``); a line saying what happened."""
        return stop_target(self.store, target.id if isinstance(target, Request) else target, reason)

    def jobs(
        self,
        *,
        request: Request | str | None = None,
        states: Iterable[str] = (),
        queue: str | None = None,
        task_queue: str | None = None,
        pilot: str | None = None,
        owner: str | None = None,
        group: str | None = None,
        limit: int = 100,
    ) -> list[JobRow]:
        """Jobs, as ``pilotfish jobs`` lists them (``states`` as ``--state`` takes them; default unfinished)."""
        return self.listing(
            request=request,
            states=states,
            queue=queue,
            task_queue=task_queue,
            pilot=pilot,
            owner=owner,
            group=group,
            limit=limit,
        ).rows

    def listing(
        self,
        *,
        request: Request | str | None = None,
        states: Iterable[str] = (),
        queue: str | None = None,
        task_queue: str | None = None,
        pilot: str | None = None,
        owner: str | None = None,
        group: str | None = None,
        limit: int = 100,
    ) -> Listing:
        """:meth:`jobs` with whether more jobs matched than ``limit``."""
        rid = self._request_id(request) if request is not None else None
        flt = JobFilter(parse_states(states), rid, queue, task_queue, pilot, limit, owner, group)
        return list_jobs(self.store, flt)

    def logs(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Output:
        """A job's payload output (``pilotfish logs``): ``.text("out")`` / ``.text("err")``, and where its
        pilot keeps the files (``.log``)."""
        return output(self.store, job, attempt, parse_streams(stream))

    def follow(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Iterator[tuple[str, str]]:
        """(stream, text) as a running payload prints it, until that attempt ends (``logs --follow``)."""
        return follow(self.store, job, attempt, parse_streams(stream))
