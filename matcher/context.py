"""What a command needs, built once from the settings: Redis, the store, the catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import redis

from taskqueues.catalog import Catalog
from taskqueues.keys import Keys
from taskqueues.store import Store

from . import embedded
from .settings import Settings
from .submission import Submitter


@dataclass
class Context:
    settings: Settings = field(default_factory=Settings.load)

    @cached_property
    def redis_url(self) -> str:
        """The configured Redis, else the embedded one (started if needed)."""
        return self.settings.redis_url or embedded.ensure(self.settings.state_dir).url

    @cached_property
    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    @cached_property
    def keys(self) -> Keys:
        return Keys(prefix=self.settings.prefix, vo=self.settings.vo)

    @cached_property
    def store(self) -> Store:
        return Store(self.client, self.keys, lease_seconds=self.settings.lease_seconds,
                     backoff=self.settings.backoff_seconds, ete_safety_factor=self.settings.ete_safety_factor)

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog.load(self.settings.catalog) if self.settings.catalog else Catalog.local_default()

    @cached_property
    def submitter(self) -> Submitter:
        return Submitter(self.store, self.catalog, vo=self.settings.vo, default_ete=self.settings.default_ete)
