"""What a user or operator can ask of Pilotfish, as one interface with two transports.

:class:`Calls` is that interface: :class:`matcher.client.Client` answers from the store itself (the deployment's
owner, with the control plane's credentials), :class:`matcher.api.remote.RemoteClient` through the HTTP API with a
token (``api_url`` set). Both return the same typed values, so the CLI's commands print the same lines either way
and :meth:`wait` is written once.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from taskqueues.errors import PilotfishError
from taskqueues.store import JobEvent, Parked

from .explain import Explanation
from .history import HistoryListing
from .joblist import JobRow, Listing
from .status import RequestStatus, TaskQueueStatus

__all__ = ["Calls", "LogView", "Overview", "Request", "Texts", "WaitTimeout"]


class Texts(Protocol):
    """What :meth:`Calls.logs` returns: the kept tail of a stream ("out", "err") as text."""

    def text(self, stream: str) -> str: ...


class WaitTimeout(PilotfishError):
    """:meth:`Calls.wait` gave up: the request had not ended within its timeout."""


@dataclass(frozen=True)
class Request:
    """A submitted request: its id, its jobs' ids by name, and its ETA (UNIX seconds) when submitted."""

    id: str
    name: str
    ids: dict[str, str]
    eta: float


@dataclass(frozen=True)
class Overview:
    """Every request, every task queue and the parked jobs (``pilotfish status`` without a request)."""

    requests: list[RequestStatus]
    task_queues: list[TaskQueueStatus]
    parked: list[Parked] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "requests": [s.to_json() for s in self.requests],
            "task_queues": [q.to_json() for q in self.task_queues],
        }
        if self.parked:
            doc["parked"] = len(self.parked)
        return doc


@dataclass(frozen=True)
class LogView:
    """One attempt's output as ``pilotfish logs`` shows it: the lines about where it is (``where``) and the
    kept tail of each stream asked for, as text (non-UTF-8 bytes and control characters escaped)."""

    job: str
    attempt: int
    streams: tuple[str, ...]
    where: list[str]
    texts: dict[str, str]

    def text(self, stream: str) -> str:
        return self.texts.get(stream, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "attempt": self.attempt,
            "streams": list(self.streams),
            "where": self.where,
            "texts": self.texts,
        }


class Calls(ABC):
    """The operations of the ``pilotfish`` commands, whichever way they reach the deployment."""

    @abstractmethod
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
        as one request; a WorkflowError names every problem and nothing is stored; ``notify``: the webhook
        called once when it ends."""

    @abstractmethod
    def status(self, request: Request | str, examples: int = 0) -> RequestStatus:
        """The request's jobs by state, ETA and critical path (``pilotfish status REQUEST``; ``examples``: name
        that many jobs per state)."""

    @abstractmethod
    def overview(self) -> Overview:
        """Every request and task queue (``pilotfish status``)."""

    @abstractmethod
    def cancel(self, target: Request | str, reason: str = "cancelled by user") -> str:
        """Cancel a request or one job (``pilotfish cancel``); a line saying what happened."""

    @abstractmethod
    def kill(self, job: str, reason: str = "killed by operator") -> str:
        """Kill a running job (``pilotfish kill``); a line saying what happened."""

    @abstractmethod
    def drain(self, pilot: str, *, shutdown: bool = False, reason: str | None = None) -> str:
        """Drain (or shut down) a live pilot (``pilotfish drain``); a line saying what happened."""

    @abstractmethod
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
        """Jobs as ``pilotfish jobs`` lists them, with whether more jobs matched than ``limit``."""

    @abstractmethod
    def explain(self, job: str) -> Explanation:
        """Why a job still waits (``pilotfish explain``)."""

    @abstractmethod
    def log_view(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> LogView:
        """A job's payload output as ``pilotfish logs`` prints it."""

    def logs(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Texts:
        """A job's payload output: ``.text("out")`` / ``.text("err")``."""
        return self.log_view(job, stream=stream, attempt=attempt)

    @abstractmethod
    def follow(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Iterator[tuple[str, str]]:
        """(stream, text) as a running payload prints it, until that attempt ends (``logs --follow``)."""

    @abstractmethod
    def shares(self) -> dict[str, Any] | None:
        """The stored shares policy with each group's usage and the limits (``pilotfish shares --json``), None
        without a policy."""

    @abstractmethod
    def set_shares(self, policy: str | None, source: str = "<policy>") -> str:
        """Store ``policy`` (the TOML text of a shares file; ``source`` names it in errors) or, None, remove the
        stored one; a line saying what was done."""

    @abstractmethod
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

    @abstractmethod
    def audit(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last ``limit`` entries of the audit log, oldest first (operators; ``pilotfish audit``)."""

    @abstractmethod
    def hold(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        """Keep jobs (ids) or a request's waiting jobs from being matched (``pilotfish hold``); a line saying
        what happened. :class:`taskqueues.errors.JobRefused` for a running job, nothing changed. ``by``: who acts,
        as the job's events say it (locally default the local user; through the API the caller, and only an
        operator may name another)."""

    @abstractmethod
    def release(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        """Give held jobs (ids, or a request's) back to their task queues with their urgency (``pilotfish
        release``)."""

    @abstractmethod
    def resubmit(
        self, *targets: Request | str, states: Iterable[str] | None = None, reason: str = "", by: str | None = None
    ) -> str:
        """Run ended jobs again as a new attempt, with their dep-failed dependents (``pilotfish resubmit``);
        ``states`` picks a request's jobs (default: its failed ones)."""

    @abstractmethod
    def update(
        self,
        *jobs: str,
        priority: float | None = None,
        requirements: Mapping[str, object] | None = None,
        wall: str | None = None,
        by: str | None = None,
    ) -> str:
        """Change waiting or held jobs' priority, requirements (a value None removes one) or wall, validated
        as at submission (``pilotfish update``); all or none (every job is checked before any changes, and all
        change in one atomic step), a line per job."""

    @abstractmethod
    def events(self, job: str) -> list[JobEvent]:
        """Every change of a job's state, oldest first (``pilotfish events``)."""

    @staticmethod
    def target_names(targets: Iterable[Request | str]) -> list[str]:
        """Targets as names: a request by its id."""
        return [t.id if isinstance(t, Request) else t for t in targets]

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
            limit=limit,
            owner=owner,
            group=group,
        ).rows

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
        deadline = None if timeout is None else clock() + timeout
        while True:
            status = self.status(request)
            request = status.id
            if progress is not None:
                progress(status)
            if status.final:
                return status
            if deadline is not None and clock() >= deadline:
                raise WaitTimeout(
                    f"request {status.id} has not ended after {timeout:g} s: "
                    + ", ".join(f"{n} {s}" for s, n in status.states.items())
                )
            sleep(poll if deadline is None else max(0.0, min(poll, deadline - clock())))
