"""What a command needs, built once from the settings: Redis, the store, the catalog."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

from taskqueues.catalog import Catalog
from taskqueues.store import Store
from taskqueues.store.connection import Client, connect
from taskqueues.store.guard import shown_url
from taskqueues.store.keys import Keys

from . import embedded
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Context:
    """``start_redis``: start the embedded server when none runs (``pilotfish up`` and ``run`` only);
    otherwise a command without a configured ``redis_url`` and without a running embedded server fails
    with :class:`taskqueues.embedded.NothingRunning`."""

    settings: Settings = field(default_factory=Settings.load)
    start_redis: bool = False

    @cached_property
    def redis_url(self) -> str:
        """The configured Redis, else the embedded one (with the control plane's credentials)."""
        if self.settings.redis_url:
            return self.settings.redis_url
        state = self.settings.state_dir
        server = (
            embedded.ensure(state, self.settings.redis_appendfsync) if self.start_redis else embedded.running(state)
        )
        if server is None:
            raise embedded.NothingRunning(state)
        return embedded.control_url(server)

    @cached_property
    def broker_url(self) -> str:
        """Celery's broker and result backend: ``broker_url``, else the store's Redis."""
        return self.settings.broker_url or self.redis_url

    @cached_property
    def pilot_broker_url(self) -> str:
        """The broker pilots send their events to when it is not their store's Redis (``pilot_broker_url``,
        else ``broker_url``); empty when it is."""
        s = self.settings
        if s.broker_url and not s.pilot_broker_url and shown_url(s.broker_url) != s.broker_url:
            log.warning(
                "pilots send their events with the control plane's broker credentials: set pilot_broker_url to "
                "a URL of a user with the pilots' broker rights (docs/operator/security.md)"
            )
        return s.pilot_broker_url or s.broker_url

    @cached_property
    def where(self) -> str:
        """The Redis URL as messages show it (no password)."""
        return shown_url(self.settings.redis_url) if self.settings.redis_url else shown_url(self.redis_url)

    @cached_property
    def pilot_redis_url(self) -> str:
        """The URL pilots connect with: their community's own ACL user (``taskqueues.store.access``)."""
        s = self.settings
        if not s.redis_url:
            return embedded.pilot_url(s.state_dir, self.client, self.redis_url, prefix=s.prefix, vo=s.vo)
        if s.pilot_redis_url:
            return s.pilot_redis_url
        if shown_url(self.redis_url) != self.redis_url:  # an open server has no credentials to keep from pilots
            log.warning(
                "pilots connect with the control plane's credentials: set pilot_redis_url to a URL of "
                "a user with the pilots' rights (docs/operator/security.md)"
            )
        return self.redis_url

    @cached_property
    def client(self) -> Client:
        return connect(self.redis_url, master=self.settings.redis_sentinel_master, community=self.keys.base)

    @cached_property
    def keys(self) -> Keys:
        return Keys(prefix=self.settings.prefix, vo=self.settings.vo)

    @cached_property
    def store(self) -> Store:
        return Store(
            self.client,
            self.keys,
            lease_seconds=self.settings.lease_seconds,
            backoff=self.settings.backoff_seconds,
            ete_safety_factor=self.settings.ete_safety_factor,
            submit_replicas=self.settings.submit_replicas,
            bounded_reservations=self.settings.bounded_reservations,
        )

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog.load(self.settings.catalog) if self.settings.catalog else Catalog.local_default()
