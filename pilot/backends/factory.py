"""Make a backend from configuration, converting to local when a batch system cannot be reached.

The seed's "backend conversion to local": when Slurm's or Grid Engine's commands are missing or their
daemon does not answer, a warning is logged once per kind (at configuration time, not at every
submission) and a :class:`LocalBackend` takes the pilots. It maps cpu/mem/tmp and the local resources it
knows; a pilot asking for anything it cannot map (partition, gres, licenses, features, an SGE ``-l``
resource, more than the host has...) runs alone on the host.

Settings: ``make_backend(kind, options)`` takes the backend's own settings (see :class:`SlurmSettings`,
:class:`SgeSettings`, :class:`LocalSettings`) plus one extra key, ``local``: the settings of the local
backend used after a conversion (its ``repo_key`` and ``log_dir`` default to the batch system's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from taskqueues.errors import BackendError, BackendUnavailable

from .base import Backend
from .local import LocalBackend, LocalSettings
from .sge import SgeBackend, SgeSettings
from .slurm import SlurmBackend, SlurmSettings

log = logging.getLogger(__name__)

KINDS = ("local", "slurm", "sge")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def reset_conversion_warnings() -> None:
    """Forget which kinds were already warned about (tests, or a configuration reload)."""
    with _warned_lock:
        _warned.clear()


def _warn_once(kind: str, reason: str) -> None:
    with _warned_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    log.warning(
        "%s backend unavailable (%s): its pilots run on this host with the local backend; "
        "pilots whose resources cannot be mapped here run alone",
        kind,
        reason,
    )


def make_backend(kind: str, options: Mapping[str, object] | None = None) -> Backend:
    """The backend of ``kind`` configured by ``options``, or a converted local one (see the module text).

    Raises :class:`BackendError` for an unknown kind or wrong settings: a typo must not silently turn
    into a conversion.
    """
    given = dict(options or {})
    local_options = given.pop("local", {})
    if not isinstance(local_options, Mapping):
        raise BackendError(f"{kind} backend: setting 'local' must be a mapping, got {local_options!r}")
    if kind == "local":
        return LocalBackend(LocalSettings.from_options({**given, **local_options}))
    backend: SlurmBackend | SgeBackend
    if kind == "slurm":
        backend = SlurmBackend(SlurmSettings.from_options(given))
    elif kind == "sge":
        backend = SgeBackend(SgeSettings.from_options(given))
    else:
        raise BackendError(f"unknown backend kind {kind!r}; known: {', '.join(KINDS)}")
    try:
        backend.check()
    except BackendUnavailable as exc:
        _warn_once(kind, str(exc))
        inherited = {key: given[key] for key in ("repo_key", "log_dir") if given.get(key)}
        settings = LocalSettings.from_options({**inherited, **local_options})
        return LocalBackend(settings, converted_from=kind)
    return backend
