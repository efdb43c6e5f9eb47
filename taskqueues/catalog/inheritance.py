"""Site -> CE -> Queue inheritance: what a queue's parameters and settings are for one community.

Every value is looked up, from most to least specific, in queue/VO, queue, CE/VO, CE, site/VO, site;
the first level that sets it wins. ``batch_options`` and the parameters merge key by key that way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import MappingProxyType

from taskqueues.requirements import Value

from .levels import Level
from .queue import DEFAULT_N_MAX_QUEUED, DEFAULT_WALL_GRANULARITY, Queue

__all__ = ["resolve", "walk"]


def resolve(site: Level, ce: Level, queue: Level, vo: str) -> Queue:
    """``queue`` (of ``ce``, of ``site``) as ``vo`` sees it: the most specific level that sets a value wins."""
    layers = [layer for level in (site, ce, queue) for layer in (level.own, level.per_vo.get(vo)) if layer]
    params: dict[str, Value] = {}
    options: dict[str, object] = {}
    for layer in layers:
        params.update(layer.params)
        options.update(layer.batch_options)
    params.update({"Site": site.name, "CE": ce.name, "Queue": queue.name})

    def nearest(attr: str) -> object:
        for layer in reversed(layers):
            value = getattr(layer, attr)
            if value is not None:
                return value
        return None

    shapes = nearest("shapes")
    assert isinstance(shapes, tuple), "the reader refuses queues without shapes"
    n_max_queued, max_running, granularity = (nearest(a) for a in ("n_max_queued", "max_running", "wall_granularity"))
    lifetime = nearest("pilot_lifetime")
    return Queue(
        id=f"{site.name}/{ce.name}/{queue.name}",
        site=site.name,
        ce=ce.name,
        name=queue.name,
        params=MappingProxyType(dict(sorted(params.items()))),
        batch=str(nearest("batch") or "local"),
        batch_options=MappingProxyType(options),
        shapes=shapes,
        n_max_queued=n_max_queued if isinstance(n_max_queued, int) else DEFAULT_N_MAX_QUEUED,
        max_running=max_running if isinstance(max_running, int) else None,
        wall_granularity=granularity if isinstance(granularity, int) else DEFAULT_WALL_GRANULARITY,
        pilot_lifetime=lifetime if isinstance(lifetime, int) else None,
    )


def walk(sites: Sequence[Level]) -> Iterator[Level]:
    """Every level below ``sites``, in file order (a site, its first CE, its queues, its next CE...)."""
    stack = list(reversed(sites))
    while stack:
        level = stack.pop()
        yield level
        stack.extend(reversed(level.children))
