"""The Celery settings Flower loads (``celery --config matcher.app.flower_config flower``, in ``pilotfish up``
and in the chart).

Flower runs Celery's default app, which knows nothing of Pilotfish's settings: with a Sentinel broker URL
(``sentinel://...``) kombu and Flower's broker view need the primary's name as the ``master_name`` transport
option, and without it every broker poll ended in a traceback (``'master_name' transport option must be
specified``). The name is ``$PILOTFISH_REDIS_SENTINEL_MASTER`` (``pilotfish up`` and the chart set it from
``redis_sentinel_master`` / ``externalRedis.sentinelMaster``), else ``mymaster``, as every other component
reads it (:func:`taskqueues.store.sentinel.master_name`). A plain ``redis://`` broker ignores the option.
"""

from __future__ import annotations

from typing import Any

from taskqueues.store import sentinel

broker_transport_options: dict[str, Any] = {"master_name": sentinel.master_name()}
result_backend_transport_options: dict[str, Any] = dict(broker_transport_options)
