"""The Celery settings Flower loads (``celery --config matcher.app.flower_config flower``, in ``pilotfish up``
and in the chart).

Flower runs Celery's default app, which knows nothing of Pilotfish's settings: with a Sentinel broker URL
(``sentinel://...``) kombu and Flower's broker view need the primary's name as the ``master_name`` transport
option, and without it every broker poll ended in a traceback (``'master_name' transport option must be
specified``). The name is ``$PILOTFISH_REDIS_SENTINEL_MASTER`` (``pilotfish up`` and the chart set it from
``redis_sentinel_master`` / ``externalRedis.sentinelMaster``), else ``mymaster``, as every other component
reads it (:func:`taskqueues.store.sentinel_master_name`). A plain ``redis://`` broker ignores the option.

The broker's URL is the settings' (``broker_url``, else ``redis_url``), so that the chart gives it as a file
(``$PILOTFISH_BROKER_URL_FILE``, ``$PILOTFISH_REDIS_URL_FILE``: :mod:`taskqueues.settings`) and never on Flower's
command line (``--broker``) or in its environment, where the password could be read. Settings without a URL
(the embedded store) leave Celery's own default, as before; ``--broker`` still wins when given.
"""

from __future__ import annotations

from typing import Any

from taskqueues.settings import Settings
from taskqueues.store import sentinel_master_name

_settings = Settings.load()
if _settings.broker_url or _settings.redis_url:
    broker_url = result_backend = _settings.broker_url or _settings.redis_url
del _settings

broker_transport_options: dict[str, Any] = {"master_name": sentinel_master_name()}
result_backend_transport_options: dict[str, Any] = dict(broker_transport_options)
