"""What a workflow file becomes: its rules, its jobs ready for submission, and the error that lists
what is wrong with it; and the :class:`Collector` that gathers those problems while the file is read,
with the text budget it spends as it expands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from matcher.limits import MAX_NAME, MAX_REQUEST_TEXT
from taskqueues.errors import ProblemList, located, shown

__all__ = ["Collector", "JobTemplate", "Rule", "Workflow", "WorkflowError", "job_owner"]


class WorkflowError(ProblemList):
    """A workflow is wrong: one line, ``<file>: <problem>; <problem>...``, each problem naming its job
    and field; ``problems`` lists them all."""


@dataclass(frozen=True)
class Rule:
    """What jobs of one kind share: a command template, requirement templates, an ETE hint."""

    name: str
    command: str | None = None
    requirements: Mapping[str, object] = field(default_factory=dict)
    ete: object = None


@dataclass(frozen=True)
class JobTemplate:
    """One job of a workflow, ready for submission.

    ``command`` is rendered, unless ``command_deferred`` (it reads dependency outputs: then it is the
    template, for :func:`render_command`). ``requirements`` holds plain values and the expressions
    already evaluated; ``deferred`` the expressions that wait for dependency outputs, by requirement
    name; ``needs_outputs`` the ``(dependency, value)`` pairs they read. ``ete_hint`` is in seconds.
    ``raw_requirements`` are the values as written (rule and job merged), for display.
    """

    name: str
    command: str
    requirements: dict[str, object]
    deps: tuple[str, ...] = ()
    raw_requirements: dict[str, object] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    command_deferred: bool = False
    needs_outputs: frozenset[tuple[str, str]] = frozenset()
    key: str | None = None
    rule: str | None = None
    ete_hint: float | None = None
    params: dict[str, object] = field(default_factory=dict)
    #: ``retry = {on_exit = [3, 137], max = 2}``: a payload failing with one of these exit codes runs again,
    #: at most ``retry_max`` times.
    retry_on: tuple[int, ...] = ()
    retry_max: int = 0


@dataclass(frozen=True)
class Workflow:
    """A validated workflow; ``order`` lists the job names with every dependency before its dependents."""

    name: str
    source: str
    jobs: list[JobTemplate]
    order: list[str]
    priority: float = 0.0
    params: dict[str, object] = field(default_factory=dict)
    rules: dict[str, Rule] = field(default_factory=dict)
    description: str = ""
    #: who submits and the group charged ("" = the submitter's defaults: the local user, group "default")
    owner: str = ""
    group: str = ""
    #: the webhook called when the request ends ("" = the deployment's notify_url, if any)
    notify: str = ""

    def job(self, name: str) -> JobTemplate:
        """The job called ``name`` (KeyError if none)."""
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    @property
    def deps(self) -> dict[str, tuple[str, ...]]:
        """Dependencies by job name, as :mod:`taskqueues.dag` takes them."""
        return {job.name: job.deps for job in self.jobs}


class Collector:
    """The problems found so far, each located (``job 'x', field 'mem': ...``), and the text spent.

    ``spend`` counts the text the request's jobs hold as the file expands (see
    :data:`matcher.limits.MAX_REQUEST_TEXT`); once over, it records one problem and says to stop.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.text = 0
        self.full = False

    def add(self, message: str, *, owner: str = "", field: object = None) -> None:
        self.problems.append(located(message, owner=owner, field=field))

    def spend(self, size: int, owner: str) -> bool:
        """Count ``size`` characters of stored text; False (and one problem) once the request is over its limit."""
        self.text += size
        if self.text > MAX_REQUEST_TEXT and not self.full:
            self.full = True
            self.add(
                f"the request's jobs hold over {MAX_REQUEST_TEXT // 2**20} MiB of text (commands, names, "
                "keys, parameters) by this job: split it into smaller requests",
                owner=owner,
            )
        return not self.full


def job_owner(name: object) -> str:
    """How problems name a job: ``job 'x'``."""
    return f"job {shown(name, MAX_NAME)}"
