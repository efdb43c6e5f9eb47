"""The problems a workflow has, gathered while it is read, and the text budget it spends as it expands."""

from __future__ import annotations

from matcher.limits import MAX_NAME, MAX_REQUEST_TEXT
from taskqueues.errors import located, shown

__all__ = ["Collector", "job_owner"]


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
