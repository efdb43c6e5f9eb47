"""Writing back what re-pressure computed: ``rescore.lua`` and the form of its entries.

Re-pressure (``matcher.repressure``) works out each touched job's new pressure, run-time estimate, member
need and score; :func:`rescore` stores one batch of them, with the requests' re-stored ETAs and load dates
and the run's progress marks, in one atomic step (the script's header says what it does with each).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .part import Scripted


@dataclass(frozen=True)
class Rescored:
    """One job's new values: pressure and estimate (seconds, stored to the millisecond), the need of its
    task-queue member (:func:`taskqueues.store.records.time_needed`) and its score."""

    job: str
    pressure: float
    ete: float
    need: int
    score: float

    def entry(self) -> dict[str, Any]:
        """The job's entry in rescore.lua's payload."""
        return {
            "id": self.job,
            "pr": round(self.pressure, 3),
            "e": round(self.ete, 3),
            "me": self.need,
            "sc": repr(float(self.score)),
        }


def rescore(
    store: Scripted,
    jobs: Sequence[Rescored],
    *,
    waiting_tqs: Iterable[str] = (),
    etas: Mapping[str, float] | None = None,
    loads: Mapping[str, float] | None = None,
    progress: Mapping[str, str] | None = None,
    marks: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """Store one batch; ``waiting_tqs`` are the task queues of the waiting jobs among them (their members
    move); ``loads`` are new load dates of requests (:mod:`matcher.eta`). Returns (jobs rewritten, task-queue
    members moved)."""
    keys = store.keys
    body: dict[str, Any] = {"jobs": [j.entry() for j in jobs]}
    if etas is not None or loads is not None or progress is not None or marks is not None:
        body.update(
            requests=dict(etas or {}), loads=dict(loads or {}), progress=dict(progress or {}), marks=dict(marks or {})
        )
    reply = store.call_script(
        "rescore",
        [keys.jobs, keys.requests, keys.cursor],
        [keys.base + ":", json.dumps(body)],
        [keys.work, *store.floors, *store.pool_keys(sorted(set(waiting_tqs)))],
    )
    return int(reply[1]), int(reply[2])
