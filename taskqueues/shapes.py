"""Pilot shapes: what one pilot of a queue gets (the Seven Bridges seed's instance types)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Shape:
    """One kind of pilot a queue can start.

    ``cpu`` cores, ``mem`` and ``tmp`` in MB (1 GB = 1000 MB, as in Machine/Job Features), ``wall`` the
    longest run time in seconds, ``cost`` per hour in any currency consistent across the catalog.
    """

    name: str
    cpu: int
    mem: int
    tmp: int = 0
    wall: int = 86400
    cost: float = 1.0

    def holds(self, cpu: float, mem: float, tmp: float = 0, wall: float = 0) -> bool:
        """True when one job of these exact resources fits in an empty pilot of this shape."""
        return cpu <= self.cpu and mem <= self.mem and tmp <= self.tmp and wall <= self.wall
