"""Writing back what re-pressure computed: ``rescore.lua`` and the form of its entries.

Re-pressure (``matcher.repressure``) works out each touched job's new pressure, run-time estimate, member
need and score; ``Store.rescore`` (:mod:`taskqueues.store.rooms`) stores one batch of them, with the
requests' re-stored ETAs and load dates and the run's progress marks, in one atomic step (the script's
header says what it does with each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
