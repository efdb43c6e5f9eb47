"""Reading $MACHINEFEATURES and $JOBFEATURES from a directory or an HTTP(S) URL, and merging the result.

The spec: the file name is the key, its content the value; a leading slash means a local directory,
``http://`` or ``https://`` a section of URL space. Anything else is refused (with a warning, the pilot
goes on as if the site gave nothing). A missing file means the key is absent.

Over HTTP the spec lets the user honour the server's cache information. :class:`HttpSource` keeps one
entry per key and follows RFC 9111 as far as a private client needs: a response is fresh for
``Cache-Control: max-age`` seconds (less its ``Age``), else until ``Expires`` (measured against the
server's ``Date`` to stay immune to clock skew); ``no-cache``/``no-store`` or no freshness information
means "ask every time". A stale entry with an ``ETag`` or ``Last-Modified`` is revalidated with a
conditional GET, and a ``304 Not Modified`` keeps the cached value. If the server cannot be reached, the
last value read is kept (with a warning) rather than dropped: for ``shutdowntime`` "absent" would mean
"no shutdown foreseen", the less safe reading.

Only the dynamic keys (``shutdowntime``, ``jobslots``, ``shutdowntime_job``) are re-read by
:meth:`FeatureReader.refresh`; the others are read once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Protocol

from pilot.mjf import derive
from pilot.mjf.features import (
    DYNAMIC_JOB_KEYS,
    DYNAMIC_MACHINE_KEYS,
    JOB_KEYS,
    MACHINE_KEYS,
    Features,
    MalformedValue,
    Value,
    build_features,
    parse_value,
)
from taskqueues.errors import ConfigError

log = logging.getLogger("pilot.mjf")


class FeatureSourceError(ConfigError):
    """A $MACHINEFEATURES/$JOBFEATURES location is neither an absolute directory nor an http(s) URL."""


class FeatureSource(Protocol):
    """One MJF directory, local or remote: ``read(key)`` is the raw file content, None when absent."""

    location: str

    def read(self, key: str) -> str | None: ...


class DirectorySource:
    """A local MJF directory. Files are read afresh on every call (the site may rewrite them)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.location = os.fspath(path)
        self.problems: list[str] = []

    def read(self, key: str) -> str | None:
        try:
            return (self.path / key).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.problems.append(f"{self.location}/{key}: cannot be read: {exc.strerror or exc}")
            return None


@dataclass
class _CacheEntry:
    body: str | None  # None: the server said 404
    fresh_until: float  # on the source's monotonic clock
    etag: str | None
    last_modified: str | None


def _freshness(headers: Mapping[str, str], now_wall: float) -> float:
    """Seconds a response stays fresh per its headers (0 = revalidate on next use)."""
    directives = {}
    for part in headers.get("Cache-Control", "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            directives[name.lower()] = value.strip().strip('"')
    if "no-cache" in directives or "no-store" in directives:
        return 0.0
    age = 0.0
    with contextlib.suppress(ValueError):
        age = max(0.0, float(headers.get("Age", "0")))
    if "max-age" in directives:
        try:
            return max(0.0, float(directives["max-age"]) - age)
        except ValueError:
            return 0.0
    if "Expires" in headers:
        try:
            expires = parsedate_to_datetime(headers["Expires"]).timestamp()
        except (TypeError, ValueError):
            return 0.0  # an invalid Expires means "already expired" (RFC 9111 5.3)
        try:
            date = parsedate_to_datetime(headers["Date"]).timestamp() if "Date" in headers else now_wall
        except (TypeError, ValueError):
            date = now_wall
        return max(0.0, expires - date - age)
    return 0.0


class HttpSource:
    """An MJF directory served over HTTP(S), read with urllib and cached per key as the server allows.

    ``requests`` counts the HTTP requests actually sent (cache hits send none), for the operator and tests.
    """

    def __init__(self, base_url: str, *, timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url = base_url.rstrip("/")
        self.location = self.base_url
        self.timeout = timeout
        self.clock = clock
        self.requests = 0
        self.problems: list[str] = []
        self._cache: dict[str, _CacheEntry] = {}

    def read(self, key: str) -> str | None:
        entry = self._cache.get(key)
        if entry is not None and self.clock() < entry.fresh_until:
            return entry.body
        request = urllib.request.Request(f"{self.base_url}/{key}")
        if entry is not None and entry.etag:
            request.add_header("If-None-Match", entry.etag)
        if entry is not None and entry.last_modified:
            request.add_header("If-Modified-Since", entry.last_modified)
        self.requests += 1
        not_modified = False
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: str | None = response.read().decode("utf-8", errors="replace")
                headers = dict(response.headers.items())
        except urllib.error.HTTPError as exc:
            headers = dict(exc.headers.items()) if exc.headers else {}
            if exc.code == 304 and entry is not None:
                body, not_modified = entry.body, True
            elif exc.code in (404, 410):
                body = None
            else:
                return self._unreachable(key, entry, f"HTTP {exc.code} {exc.reason}")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return self._unreachable(key, entry, str(reason))
        kept = entry if entry is not None and not_modified else None  # a 304 need not repeat validators
        self._cache[key] = _CacheEntry(
            body=body,
            fresh_until=self.clock() + _freshness(headers, time.time()),
            etag=headers.get("ETag") or (kept.etag if kept else None),
            last_modified=headers.get("Last-Modified") or (kept.last_modified if kept else None),
        )
        return body

    def _unreachable(self, key: str, entry: _CacheEntry | None, reason: str) -> str | None:
        if entry is not None and entry.body is not None:
            self.problems.append(f"{self.base_url}/{key}: {reason}; keeping the last value read")
            return entry.body
        self.problems.append(f"{self.base_url}/{key}: {reason}; treated as absent")
        return None


def open_source(location: str, *, timeout: float = 5.0) -> DirectorySource | HttpSource:
    """The source named by an MJF environment value: leading slash = directory, http(s):// = URL."""
    if location.startswith("/"):
        return DirectorySource(location.rstrip("/") or "/")
    if location.startswith(("http://", "https://")):
        return HttpSource(location, timeout=timeout)
    raise FeatureSourceError(
        f"MJF location {location!r} is neither an absolute directory (leading '/') nor an http(s):// URL"
    )


# --------------------------------------------------------------------------------------------- merging

_CONVERSIONS: tuple[tuple[str, str], ...] = (
    ("wall_limit_secs", "wall_limit_secs_lrms"),
    ("cpu_limit_secs", "cpu_limit_secs_lrms"),
)


class FeatureReader:
    """Reads the site's MJF, fills the gaps from the batch system and the host, and keeps them current.

    Per key, the first of these that knows it wins: the site's MJF file; the same limit converted from
    its other (normalised/real) MJF form with ``cpufactor_lrms``; Slurm; Grid Engine; the host; the
    ``defaults`` given by the pilot's configuration; finally ``cpufactor_lrms`` = 1.0 (the reference).
    The normalised forms missing at the end are computed from the real ones (``real x cpufactor``).
    """

    def __init__(
        self,
        machinefeatures: str | None,
        jobfeatures: str | None,
        *,
        env: Mapping[str, str] | None = None,
        workdir: str | os.PathLike[str] = ".",
        pilot_start: float | None = None,
        defaults: Mapping[str, Value] | None = None,
        run: derive.Runner = derive.run_command,
        timeout: float = 5.0,
    ) -> None:
        self.env = dict(os.environ if env is None else env)
        self.workdir = workdir
        self.pilot_start = pilot_start
        self.defaults = dict(defaults or {})
        unknown = sorted(set(self.defaults) - set(MACHINE_KEYS) - set(JOB_KEYS))
        if unknown:
            raise ConfigError(f"MJF defaults: {unknown} are not Machine/Job Features keys")
        self.run = run
        self._warnings: list[str] = []
        self._location_warnings: list[str] = []
        self.machine = self._open(machinefeatures, "MACHINEFEATURES", timeout)
        self.job = self._open(jobfeatures, "JOBFEATURES", timeout)
        self._mjf: dict[str, tuple[Value, str]] = {}
        self._derived: list[derive.Derived] = []
        self._features: Features | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, **kwargs: object) -> FeatureReader:
        """A reader of ``$MACHINEFEATURES`` and ``$JOBFEATURES`` from ``env`` (default: this process's)."""
        env = dict(os.environ if env is None else env)
        return cls(env.get("MACHINEFEATURES") or None, env.get("JOBFEATURES") or None, env=env, **kwargs)  # type: ignore[arg-type]

    def _open(self, location: str | None, variable: str, timeout: float) -> DirectorySource | HttpSource | None:
        if location is None:
            return None
        try:
            source = open_source(location, timeout=timeout)
        except FeatureSourceError as exc:
            self._location_warnings.append(f"${variable}: {exc}; ignored")
            return None
        if isinstance(source, DirectorySource) and not source.path.is_dir():
            self._location_warnings.append(
                f"${variable}: directory {location!r} does not exist; no values read from it"
            )
        return source

    def _warn(self, message: str) -> None:
        log.warning("MJF: %s", message)
        self._warnings.append(message)

    def _read_keys(self, source: DirectorySource | HttpSource | None, prefix: str, keys: Iterable[str]) -> None:
        if source is None:
            return
        label = f"{prefix}:{source.location}"
        for key in keys:
            text = source.read(key)
            for problem in source.problems:
                self._warn(problem)
            source.problems.clear()
            if text is None:
                self._mjf.pop(key, None)
                continue
            try:
                self._mjf[key] = (parse_value(key, text), label)
            except MalformedValue as exc:
                self._mjf.pop(key, None)
                self._warn(f"{label}/{key}: malformed value ({exc}); treated as absent")

    def load(self) -> Features:
        """Read every key of both sources, derive from the batch system and the host, and merge."""
        self._warnings = []
        for message in self._location_warnings:
            self._warn(message)
        self._mjf.clear()
        self._read_keys(self.machine, "machinefeatures", MACHINE_KEYS)
        self._read_keys(self.job, "jobfeatures", JOB_KEYS)
        self._derived = [
            derive.from_slurm(self.env, self.run),
            derive.from_sge(self.env, self.run),
            derive.from_host(self.workdir, self.pilot_start),
        ]
        for derived in self._derived:
            for message in derived.warnings:
                self._warn(message)
        self._features = self._merge()
        return self._features

    def refresh(self) -> Features:
        """Re-read only the dynamic keys (shutdowntime, jobslots, shutdowntime_job) and merge again."""
        if self._features is None:
            return self.load()
        self._warnings = list(self._location_warnings)
        self._read_keys(self.machine, "machinefeatures", sorted(DYNAMIC_MACHINE_KEYS))
        self._read_keys(self.job, "jobfeatures", sorted(DYNAMIC_JOB_KEYS))
        self._features = self._merge()
        return self._features

    def _merge(self) -> Features:
        values: dict[str, Value] = {}
        sources: dict[str, str] = {}
        for key, (value, label) in self._mjf.items():
            values[key], sources[key] = value, label
        factor = values.get("cpufactor_lrms")
        if isinstance(factor, float):
            for real, lrms in _CONVERSIONS:
                if real not in values and lrms in values:
                    values[real] = math.floor(float(values[lrms]) / factor)
                    sources[real] = f"derived:{lrms}/cpufactor_lrms"
        for derived in self._derived:
            for key, value in derived.values.items():
                if key not in values:
                    values[key], sources[key] = value, derived.sources[key]
        for key, value in self.defaults.items():
            if key not in values:
                values[key], sources[key] = value, "default"
        if "cpufactor_lrms" not in values:
            values["cpufactor_lrms"], sources["cpufactor_lrms"] = 1.0, "default"
        factor = float(values["cpufactor_lrms"])
        for real, lrms in _CONVERSIONS:
            if lrms not in values and real in values:
                values[lrms] = math.floor(float(values[real]) * factor)
                sources[lrms] = f"derived:{real}*cpufactor_lrms"
        return build_features(
            values,
            sources,
            machinefeatures=self.machine.location if self.machine else None,
            jobfeatures=self.job.location if self.job else None,
            warnings=tuple(self._warnings),
        )


def read_features(env: Mapping[str, str] | None = None, **kwargs: object) -> Features:
    """One-shot: read and merge MJF from ``$MACHINEFEATURES``/``$JOBFEATURES`` of ``env``."""
    return FeatureReader.from_environment(env, **kwargs).load()
