"""The catalog: its queues as each community sees them, and which of them can run a job."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from taskqueues.errors import ConfigError, NoEligibleQueue, RequirementError
from taskqueues.requirements import BANNED_SITE, Requirements

from .inheritance import resolve, walk
from .levels import Level
from .local import LOCAL_SOURCE, local_default_text
from .queue import Queue
from .reader import read_levels

__all__ = ["DEFAULT_VO", "Catalog", "UnknownQueue"]

DEFAULT_VO = "default"


class UnknownQueue(ConfigError):
    """A queue id names no queue of the catalog."""


class Catalog:
    """Sites, CEs and queues read from TOML; answers "which queues can run this requirement class"."""

    def __init__(self, sites: Sequence[Level], source: str) -> None:
        self._sites = tuple(sites)
        self.source = source
        self._by_vo: dict[str, list[Queue]] = {}
        self.queues(DEFAULT_VO)  # resolve once now so a broken catalog fails at load

    @classmethod
    def load(cls, path: str | Path) -> Catalog:
        """Read a catalog file; ConfigError names the file and line of any problem."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the catalog: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: the catalog is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        return cls.loads(text, source=str(path))

    @classmethod
    def loads(cls, text: str, source: str = "<catalog>") -> Catalog:
        """Read a catalog from TOML text; ``source`` names it in error messages."""
        return cls(read_levels(text, source), source)

    @classmethod
    def local_default(cls) -> Catalog:
        """One queue, ``local/localhost/local``, whose one shape is this whole host (``pilotfish run``);
        see :func:`~taskqueues.catalog.local.local_default_text`."""
        return cls.loads(local_default_text(), source=LOCAL_SOURCE)

    def vos(self) -> frozenset[str]:
        """The communities with a VO section somewhere in the catalog."""
        return frozenset(vo for level in walk(self._sites) for vo in level.per_vo)

    def queues(self, vo: str = DEFAULT_VO) -> list[Queue]:
        """Every queue as ``vo`` sees it, in file order (:mod:`~taskqueues.catalog.inheritance`)."""
        if vo not in self._by_vo:
            self._by_vo[vo] = [
                resolve(site, ce, queue, vo) for site in self._sites for ce in site.children for queue in ce.children
            ]
        return list(self._by_vo[vo])

    def queue(self, queue_id: str, vo: str = DEFAULT_VO) -> Queue:
        """The queue ``Site/CE/Queue``; UnknownQueue (a ConfigError) if the catalog has none such."""
        for queue in self.queues(vo):
            if queue.id == queue_id:
                return queue
        ids = [queue.id for queue in self.queues(vo)]
        close = difflib.get_close_matches(queue_id, ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(ids[:10])}"
        raise UnknownQueue(f"{self.source}: no queue {queue_id!r}{hint}")

    def offered_names(self, vo: str = DEFAULT_VO) -> frozenset[str]:
        """Every parameter name some queue offers to ``vo`` (Site, CE and Queue included)."""
        return frozenset(name for queue in self.queues(vo) for name in queue.params)

    def check_names(self, req: Requirements, *, job: str, vo: str = DEFAULT_VO) -> None:
        """RequirementError when the job requires a name no queue offers (RFC #7: most likely a typo).

        Consumables and BannedSite are always allowed.
        """
        offered = self.offered_names(vo)
        unknown = sorted(n for n in req.free_form() if n != BANNED_SITE and n not in offered)
        if not unknown:
            return
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(offered), n=1)
            parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise RequirementError(
            f"no queue of {self.source} offers {', '.join(parts)} to VO {vo!r}", job=job, field=unknown[0]
        )

    def eligible_queues(self, req: Requirements, vo: str = DEFAULT_VO) -> list[Queue]:
        """Queues whose parameters satisfy the free-form requirements and one of whose shapes fits the job."""
        return [queue for queue in self.queues(vo) if queue.reason(req) is None]

    def explain(self, req: Requirements, vo: str = DEFAULT_VO) -> dict[str, str | None]:
        """Queue id -> None if eligible, else the one-line reason it is not."""
        return {queue.id: queue.reason(req) for queue in self.queues(vo)}

    def require_eligible(self, req: Requirements, *, job: str, vo: str = DEFAULT_VO) -> list[Queue]:
        """The eligible queues; NoEligibleQueue naming, per queue, what excluded it, when there is none.

        The error's field is the first requirement that alone stands in the way (without it some queue
        could run the job), when there is one: ``job 'x', field 'cpu': no queue ... can run it``.
        """
        eligible = self.eligible_queues(req, vo)
        if eligible:
            return eligible
        reasons = [f"{queue_id}: {why}" for queue_id, why in self.explain(req, vo).items()]
        shown = reasons[:20] + ([f"... and {len(reasons) - 20} more"] if len(reasons) > 20 else [])
        culprit = next((name for name in sorted(req.values) if self.eligible_queues(req.without(name), vo)), None)
        raise NoEligibleQueue(
            f"no queue of {self.source} can run it for VO {vo!r} -- " + " | ".join(shown), job=job, field=culprit
        )
