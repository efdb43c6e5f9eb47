"""The CLI's and :class:`~matcher.client.Client`'s other transport: the same calls through the HTTP API.

``Client.from_settings()`` returns a :class:`RemoteClient` when ``api_url`` is set. Its token comes from
``$PILOTFISH_TOKEN``, else from the file ``api_token_file`` names (default ``<state_dir>/token``), which must be
the user's alone (mode 0600: a file others may read is refused, naming it). Answers are turned back into the
values the local client returns, and refusals into the same errors with the API's message, so every command
prints what it prints locally.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import httpx

from taskqueues.errors import (
    ConfigError,
    PilotfishError,
    Unauthenticated,
    ValidationError,
)
from taskqueues.settings import Settings
from taskqueues.store import JobEvent, Parked

from ..calls import Calls, LogView, Overview, Request
from ..explain import Explanation, PilotFit
from ..history import HistoryListing
from ..joblist import JobRow, Listing
from ..status import RequestStatus, TaskQueueStatus
from ..workflow.load import read_document
from .errors import KINDS

T = TypeVar("T")

TOKEN_VARIABLE = "PILOTFISH_TOKEN"
#: Times a call the API refused for its rate (429) is made again, after the Retry-After it names.
RATE_RETRIES = 5


class ApiUnavailable(PilotfishError):
    """The API could not be reached, or answered something that is not its JSON."""


def token_file(settings: Settings) -> Path:
    return Path(settings.api_token_file or Path(settings.state_dir) / "token")


def read_token(settings: Settings, env: Mapping[str, str] | None = None) -> str:
    """The user's token: ``$PILOTFISH_TOKEN``, else the token file (refused if others may read it)."""
    env = os.environ if env is None else env
    if env.get(TOKEN_VARIABLE, "").strip():
        return env[TOKEN_VARIABLE].strip()
    path = token_file(settings)
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"{path}: the token file may be read by others (mode {stat.S_IMODE(mode):04o}): "
                f"chmod 600 {path}, or it is not used"
            )
        token = path.read_text().strip()
    except FileNotFoundError:
        raise Unauthenticated(
            f"api_url is set but there is no token: set ${TOKEN_VARIABLE} or put it in {path} (mode 0600)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the token file: {exc.strerror or exc}") from None
    if not token:
        raise Unauthenticated(f"{path}: the token file is empty")
    return token


def _of(cls: type[T], data: Mapping[str, Any]) -> T:
    """A dataclass from its ``asdict`` (extra keys, such as ``final``, left out)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


class RemoteClient(Calls):
    """The deployment behind ``url``, as the holder of ``token`` may see it."""

    def __init__(self, url: str, token: str, *, timeout: float = 65.0, transport: httpx.BaseTransport | None = None):
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "pilotfish"},
            timeout=timeout,
            transport=transport,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteClient:
        return cls(settings.api_url, read_token(settings), timeout=settings.api_timeout + 5)

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """One call; its JSON answer, or the error the API named."""
        content = None if body is None else json.dumps(body, default=str)
        headers = {"Content-Type": "application/json"} if content is not None else {}
        for _ in range(RATE_RETRIES + 1):
            try:
                answer = self.http.request(method, path, content=content, params=params, headers=headers)
            except httpx.HTTPError as exc:
                raise ApiUnavailable(f"cannot reach the API at {self.url}: {exc}") from None
            if answer.status_code != 429:
                break
            time.sleep(float(answer.headers.get("Retry-After", "1")))
        if answer.is_success:
            try:
                return answer.json()
            except ValueError:
                raise ApiUnavailable(f"the API at {self.url} answered without JSON ({path})") from None
        self._refusal(answer, path)

    def _refusal(self, answer: httpx.Response, path: str) -> NoReturn:
        """Raise the error an answer that is not a success names (its class, when the API names one of
        :data:`matcher.api.errors.KINDS`)."""
        try:
            data = answer.json()
        except ValueError:
            raise ApiUnavailable(f"the API at {self.url} answered {answer.status_code} without JSON ({path})") from None
        message = str(data.get("error", data)) if isinstance(data, dict) else str(data)
        kind = KINDS.get(str(data.get("kind", ""))) if isinstance(data, dict) else None
        if kind is not None:
            raise kind(message)
        raise ValidationError(message) if answer.status_code < 500 else PilotfishError(message)

    def submit(
        self,
        workflow: Mapping[str, Any] | str | Path,
        *,
        owner: str | None = None,
        group: str | None = None,
        source: str = "<dict>",
        notify: str | None = None,
    ) -> Request:
        data, source = read_document(workflow) if isinstance(workflow, str | Path) else (dict(workflow), source)
        body = {"workflow": data, "owner": owner or "", "group": group or "", "source": source, "notify": notify or ""}
        done = self.call("POST", "/v1/requests", body)
        return Request(done["request"], done["name"], dict(done["ids"]), float(done["eta"]))

    def status(self, request: Request | str, examples: int = 0) -> RequestStatus:
        rid = request.id if isinstance(request, Request) else request
        return _of(
            RequestStatus, self.call("GET", f"/v1/requests/{quote(rid, safe='')}", params={"examples": examples})
        )

    def overview(self) -> Overview:
        doc = self.call("GET", "/v1/requests")
        return Overview(
            [_of(RequestStatus, r) for r in doc["requests"]],
            [_of(TaskQueueStatus, q) for q in doc["task_queues"]],
            [_of(Parked, p) for p in doc.get("parked_jobs", [])],
        )

    def cancel(self, target: Request | str, reason: str = "cancelled by user") -> str:
        name = target.id if isinstance(target, Request) else target
        return str(self.call("POST", f"/v1/cancel/{quote(name, safe='')}", {"reason": reason})["result"])

    def kill(self, job: str, reason: str = "killed by operator") -> str:
        return str(self.call("POST", f"/v1/jobs/{quote(job, safe='')}/kill", {"reason": reason})["result"])

    def drain(self, pilot: str, *, shutdown: bool = False, reason: str | None = None) -> str:
        body = {"shutdown": shutdown, "reason": reason}
        return str(self.call("POST", f"/v1/pilots/{quote(pilot, safe='')}/drain", body)["result"])

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
        params: dict[str, Any] = {"state": list(states), "limit": limit}
        wanted = {"request": request.id if isinstance(request, Request) else request}
        wanted.update(queue=queue, task_queue=task_queue, pilot=pilot, owner=owner, group=group)
        params.update({k: v for k, v in wanted.items() if v is not None})
        doc = self.call("GET", "/v1/jobs", params=params)
        return Listing([_of(JobRow, r) for r in doc["jobs"]], bool(doc["more"]))

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
        params: dict[str, Any] = {"since": since, "until": until, "state": list(states), "limit": limit}
        params.update({k: v for k, v in (("owner", owner), ("group", group), ("after", after)) if v is not None})
        doc = self.call("GET", "/v1/history", params=params)
        return HistoryListing([_of(JobRow, r) for r in doc["jobs"]], doc["next"])

    def explain(self, job: str) -> Explanation:
        doc = self.call("GET", f"/v1/jobs/{quote(job, safe='')}/explain")
        return _of(Explanation, {**doc, "pilots": [_of(PilotFit, p) for p in doc.get("pilots", [])]})

    def log_view(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> LogView:
        params = {k: v for k, v in (("stream", stream), ("attempt", attempt)) if v is not None}
        doc = self.call("GET", f"/v1/jobs/{quote(job, safe='')}/logs", params=params)
        return LogView(doc["job"], int(doc["attempt"]), tuple(doc["streams"]), list(doc["where"]), dict(doc["texts"]))

    def follow(self, job: str, *, stream: str | None = None, attempt: int | None = None) -> Iterator[tuple[str, str]]:
        params = {k: v for k, v in (("stream", stream), ("attempt", attempt)) if v is not None}
        path = f"/v1/jobs/{quote(job, safe='')}/follow"
        try:
            with self.http.stream("GET", path, params=params, timeout=httpx.Timeout(30.0, read=None)) as answer:
                if not answer.is_success:
                    answer.read()
                    self._refusal(answer, path)
                for line in answer.iter_lines():
                    if line:
                        piece = json.loads(line)
                        yield str(piece["stream"]), str(piece["text"])
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"cannot reach the API at {self.url}: {exc}") from None

    def shares(self) -> dict[str, Any] | None:
        policy: dict[str, Any] | None = self.call("GET", "/v1/shares")["policy"]
        return policy

    def set_shares(self, policy: str | None, source: str = "<policy>") -> str:
        return str(self.call("POST", "/v1/shares", {"policy": policy, "source": source})["result"])

    def audit(self, limit: int = 50) -> list[dict[str, Any]]:
        return list(self.call("GET", "/v1/audit", params={"limit": limit})["entries"])

    def _change(self, path: str, body: Mapping[str, Any]) -> str:
        return str(self.call("POST", path, {k: v for k, v in body.items() if v is not None})["result"])

    def hold(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        return self._change("/v1/hold", {"targets": self.target_names(targets), "reason": reason, "by": by})

    def release(self, *targets: Request | str, reason: str = "", by: str | None = None) -> str:
        return self._change("/v1/release", {"targets": self.target_names(targets), "reason": reason, "by": by})

    def resubmit(
        self, *targets: Request | str, states: Iterable[str] | None = None, reason: str = "", by: str | None = None
    ) -> str:
        body = {"targets": self.target_names(targets), "reason": reason, "by": by}
        return self._change("/v1/resubmit", {**body, "states": None if states is None else list(states)})

    def update(
        self,
        *jobs: str,
        priority: float | None = None,
        requirements: Mapping[str, object] | None = None,
        wall: str | None = None,
        by: str | None = None,
    ) -> str:
        body = {"jobs": list(jobs), "priority": priority, "wall": wall, "by": by}
        return self._change(
            "/v1/update", {**body, "requirements": None if requirements is None else dict(requirements)}
        )

    def events(self, job: str) -> list[JobEvent]:
        doc = self.call("GET", f"/v1/jobs/{quote(job, safe='')}/events")
        return [_of(JobEvent, e) for e in doc["events"]]
