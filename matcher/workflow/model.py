"""What a workflow file becomes: its rules, its jobs ready for submission, and the error that lists
what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from taskqueues.errors import ProblemList

__all__ = ["JobTemplate", "Rule", "Workflow", "WorkflowError"]


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
