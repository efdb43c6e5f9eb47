"""Make a backend from configuration, converting to local when a batch system cannot be reached.

The seed's "backend conversion to local": when Slurm's or Grid Engine's commands are missing or their
daemon does not answer, one warning line names every unreachable backend and the queues it serves (the
director collects them at configuration time and announces them together, once per run), and a
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
from dataclasses import dataclass

from taskqueues.backend_options import parse_sge_options, parse_slurm_options
from taskqueues.errors import BackendError, BackendUnavailable

from .base import Backend
from .local import LocalBackend, LocalSettings, unmappable
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


@dataclass(frozen=True)
class Conversion:
    """A batch system that could not be reached and the local backend that stands in for it."""

    kind: str
    where: str | None
    reason: str
    alone: tuple[str, ...]

    def text(self) -> str:
        consequence = (
            f"every pilot runs alone, as {', '.join(self.alone)} cannot be mapped here"
            if self.alone
            else "pilots whose resources cannot be mapped here run alone"
        )
        return f"{self.kind}" + (f" for {self.where}" if self.where else "") + f" ({self.reason}; {consequence})"


def announce(conversions: Sequence[Conversion]) -> None:
    """One warning line for every conversion not announced yet in this process (the director's: once per
    run, naming every queue that now runs on this host)."""
    with _warned_lock:
        fresh = [c for c in conversions if c.text() not in _warned]
        _warned.update(c.text() for c in fresh)
    merged: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}  # the same system and reason: one entry
    for c in fresh:
        merged.setdefault((c.kind, c.reason, c.alone), []).extend([c.where] if c.where else [])
    if merged:
        log.warning(
            "batch system not reachable, its queues run on this host with the local backend: %s",
            "; ".join(
                Conversion(kind, ", ".join(where) or None, reason, alone).text()
                for (kind, reason, alone), where in merged.items()
            ),
        )


def carried_resources(settings: SlurmSettings | SgeSettings) -> dict[str, str]:
    """What a batch system's own settings ask of every pilot, as resources a converted backend maps."""
    if isinstance(settings, SgeSettings):
        return parse_sge_options(settings.options, where="sge backend setting 'options'")
    carried = {key: value for key, value in (("partition", settings.partition), ("qos", settings.qos)) if value}
    carried.update(parse_slurm_options(settings.options, where="slurm backend setting 'options'"))
    return carried


def make_backend(
    kind: str,
    options: Mapping[str, object] | None = None,
    *,
    where: str | None = None,
    conversions: list[Conversion] | None = None,
) -> Backend:
    """The backend of ``kind`` configured by ``options``, or a converted local one (see the module text).

    ``where`` names what the backend serves in the conversion warning (the director: its queues); a
    conversion is warned about once per process, at once, or, when ``conversions`` is given, appended there
    for the caller to :func:`announce` with others in one line. Raises :class:`BackendError` for an unknown
    kind or wrong settings: a typo must not silently turn into a conversion.
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
        conversion = Conversion(kind, where, str(exc), tuple(unmappable(carried, converted.capacity())))
        if conversions is None:
            announce([conversion])
        else:
            conversions.append(conversion)
        return converted
    return backend
