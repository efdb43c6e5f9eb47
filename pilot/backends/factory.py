"""Make a backend from configuration, converting to local when a batch system cannot be reached.

The seed's "backend conversion to local": when Slurm's or Grid Engine's commands are missing or their
daemon does not answer, a warning is logged once per unreachable backend (``where``: the director names
the queues it serves) when the backend is made, which the director does at configuration time, and a
:class:`LocalBackend` takes the pilots. It maps cpu/mem/tmp and the local resources it knows, from the
pilot and from the batch system's own settings (Slurm's ``partition``, ``qos`` and ``options`` string,
Grid Engine's ``options``), which it carries; a pilot asking for anything it cannot map (partition, qos,
gres, licenses, features, an SGE ``-l`` resource, more than the host has...) runs alone on the host. The
warning names the configured settings that make every pilot of the backend run alone.

Settings: ``make_backend(kind, options)`` takes the backend's own settings (see :class:`SlurmSettings`,
:class:`SgeSettings`, :class:`LocalSettings`) plus one extra key, ``local``: the settings of the local
backend used after a conversion (its ``repo_key`` and ``log_dir`` default to the batch system's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from taskqueues.errors import BackendError, BackendUnavailable

from .base import Backend
from .local import LocalBackend, LocalSettings, unmappable
from .options import parse_sge_options, parse_slurm_options
from .sge import SgeBackend, SgeSettings
from .slurm import SlurmBackend, SlurmSettings

log = logging.getLogger(__name__)

KINDS = ("local", "slurm", "sge")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def reset_conversion_warnings() -> None:
    """Forget which backends were already warned about (tests, or a configuration reload)."""
    with _warned_lock:
        _warned.clear()


def _warn_once(kind: str, where: str | None, reason: str, alone: Sequence[str]) -> None:
    label = f"{kind} backend" + (f" of {where}" if where else "")
    with _warned_lock:
        if label in _warned:
            return
        _warned.add(label)
    consequence = (
        f"every pilot runs alone, as {', '.join(alone)} cannot be mapped here"
        if alone
        else "pilots whose resources cannot be mapped here run alone"
    )
    log.warning("%s unavailable (%s): its pilots run on this host with the local backend; %s",
                label, reason, consequence)


def carried_resources(settings: SlurmSettings | SgeSettings) -> dict[str, str]:
    """What a batch system's own settings ask of every pilot, as resources a converted backend maps."""
    if isinstance(settings, SgeSettings):
        return parse_sge_options(settings.options, where="sge backend setting 'options'")
    carried = {key: value for key, value in (("partition", settings.partition), ("qos", settings.qos)) if value}
    carried.update(parse_slurm_options(settings.options, where="slurm backend setting 'options'"))
    return carried


def make_backend(kind: str, options: Mapping[str, object] | None = None, *, where: str | None = None) -> Backend:
    """The backend of ``kind`` configured by ``options``, or a converted local one (see the module text).

    ``where`` names what the backend serves in the conversion warning (the director: its queues); a
    backend is warned about once per process. Raises :class:`BackendError` for an unknown kind or wrong
    settings: a typo must not silently turn into a conversion.
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
        inherited: dict[str, object] = {"repo_key": backend.repo_key}
        if given.get("log_dir"):
            inherited["log_dir"] = given["log_dir"]
        settings = LocalSettings.from_options({**inherited, **local_options})
        carried = carried_resources(backend.settings)
        converted = LocalBackend(settings, converted_from=kind, carried=carried)
        _warn_once(kind, where, str(exc), unmappable(carried, converted.capacity()))
        return converted
    return backend
