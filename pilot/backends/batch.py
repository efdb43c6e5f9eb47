"""What the Slurm and Grid Engine backends share: a batch system driven by its commands.

A pilot is submitted as a shell script on the submit command's stdin (``pilot_script``), its state comes
from one rate-limited poll for all pilots (:class:`StatusCache`), and cancelling ignores the batch
system's complaints about jobs that already ended. Subclasses give the commands, how to read a job id
from the submit command's answer, the poll, and which cancel complaints are harmless.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from taskqueues.errors import BackendError, BackendUnavailable

from .base import (
    BackendCommandError,
    PilotRequest,
    PilotState,
    PilotStatus,
    StatusCache,
    find_binary,
    pilot_script,
    run_command,
)

SettingsT = TypeVar("SettingsT")


def default_repo_key() -> str:
    """The seed's default ``repo_key``: "the base name of the repo followed by ``:``". open-lmake's repository
    is the directory ``lmake`` runs in; Pilotfish's is the one the director (or ``pilotfish run``) runs in."""
    return f"{Path.cwd().name}:"


def settings_from_options(cls: type[SettingsT], options: Mapping[str, object], kind: str) -> SettingsT:
    """A backend's settings dataclass from a catalog ``batch_options`` mapping: unknown keys are an
    error (a typo must not silently become a default), values are converted to the field's type."""
    fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise BackendError(
            f"{kind} backend: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}"
        )
    values: dict[str, object] = {}
    for key, value in options.items():
        type_name = fields[key].type.removesuffix(" | None")
        try:
            if value is None:
                values[key] = None
            elif type_name == "bool":
                values[key] = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
            elif type_name == "float":
                values[key] = float(value)  # type: ignore[arg-type]
            elif type_name == "int":
                values[key] = int(value)  # type: ignore[call-overload]
            else:
                values[key] = str(value)
        except (TypeError, ValueError):
            raise BackendError(f"{kind} backend: setting {key!r} has a wrong value {value!r}") from None
    return cls(**values)


class ScriptBackend(ABC):
    """A batch system driven by its submit / poll / cancel commands."""

    kind: str
    submit_command: ClassVar[str]
    cancel_command: ClassVar[str]
    job_id_var: ClassVar[str]

    def __init__(self, settings: Any, env: dict[str, str]) -> None:
        self.settings = settings
        self.repo_key: str = default_repo_key() if settings.repo_key is None else settings.repo_key
        """What job names start with: the ``repo_key`` setting, else :func:`default_repo_key`."""
        self._env = env
        self._cache = StatusCache(self._poll, settings.poll_interval)
        self._cancelled: set[str] = set()
        self._status_dirs: dict[str, str] = {}

    def _bin(self, name: str) -> str:
        path = find_binary(name, self.settings.bin_dir)
        if path is None:
            raise BackendUnavailable(f"{self.kind} backend: {name} not found in {self.settings.bin_dir or '$PATH'}")
        return path

    @abstractmethod
    def submit_args(self, request: PilotRequest) -> list[str]:
        """The submit command line for one pilot (its script comes on stdin)."""

    @abstractmethod
    def _batch_id(self, answer: str) -> str:
        """The job id in the submit command's answer ("" when there is none)."""

    @abstractmethod
    def _poll(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        """One query of the batch system for all these pilots."""

    @abstractmethod
    def _harmless(self, line: str) -> bool:
        """True for a cancel complaint about a job that already ended."""

    # --- the Backend interface ---------------------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None

    def submit(self, request: PilotRequest) -> str:
        status_dir = request.log_dir or self.settings.log_dir
        if status_dir:
            Path(status_dir).mkdir(parents=True, exist_ok=True)
        args = self.submit_args(request)
        script = pilot_script(request, job_id_var=self.job_id_var, status_dir=status_dir)
        try:
            done = run_command(args, env=self._env, stdin=script, timeout=self.settings.command_timeout)
        except BackendCommandError as exc:
            raise BackendError(f"{self.kind} backend: pilot {request.name!r} not submitted: {exc}") from None
        batch_id = self._batch_id(done.stdout.strip())
        if not batch_id.isdigit():
            raise BackendError(
                f"{self.kind} backend: {self.submit_command} answered {done.stdout.strip()!r}, not a job id"
            )
        if status_dir:
            self._status_dirs[batch_id] = status_dir
        self._cache.submitted(batch_id)
        return batch_id

    def states(self, ids: Sequence[str]) -> dict[str, PilotStatus]:
        return self._cache.states(ids)

    def identify(self, batch_id: str) -> dict[str, Any]:
        status_dir = self._status_dirs.get(batch_id)
        return {"status_dir": status_dir} if status_dir else {}

    def adopt(self, batch_id: str, facts: Mapping[str, Any]) -> PilotStatus:
        """The batch system answers for any job id: poll it like our own from now on (and find the exit
        status its batch script leaves where the earlier director told it to)."""
        if facts.get("status_dir"):
            self._status_dirs[batch_id] = str(facts["status_dir"])
        self._cache.submitted(batch_id)
        return PilotStatus(PilotState.QUEUED, "adopted from an earlier director; not polled yet")

    @property
    def polls(self) -> int:
        """How many times the batch system was queried for states (for rate-limit checks)."""
        return self._cache.polls

    def cancel(self, ids: Sequence[str]) -> None:
        wanted = [i for i in ids if i.isdigit()]
        if not wanted:
            return
        self._cancelled.update(wanted)
        done = run_command(
            [self._bin(self.cancel_command), *wanted], env=self._env, timeout=self.settings.command_timeout, check=False
        )
        if done.returncode != 0:
            real = [
                line for line in (done.stderr + done.stdout).splitlines() if line.strip() and not self._harmless(line)
            ]
            if real:
                raise BackendError(
                    f"{self.kind} backend: {self.cancel_command} {' '.join(wanted)} failed: {' '.join(real)}"
                )
