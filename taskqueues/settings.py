"""Settings in one typed place: defaults, then a TOML file, then the deployment's secrets file, then ``PILOTFISH_*``
environment variables (``$PILOTFISH_SECRETS_FILE``, written by ``pilotfish up``: :mod:`taskqueues.credentials`).

The file is ``$PILOTFISH_CONFIG`` if set, else ``./pilotfish.toml`` if it exists, else none. Every field
can be overridden by the environment variable ``PILOTFISH_<FIELD>`` (``PILOTFISH_REDIS_URL``,
``PILOTFISH_CATALOG``, ``PILOTFISH_LEASE_SECONDS``...). A setting that carries a password
(:data:`~taskqueues.credentials.SECRET_SETTINGS`) may instead be read from the file ``PILOTFISH_<FIELD>_FILE``
names (its one line; setting both is an error): how the Helm chart hands Secrets over, never through the
environment. :attr:`Settings.sources` says where each value came from; ``pilotfish config`` prints both.

``ete_safety_factor``: a job that gives no ``wall`` is matched, and its pilots sized, on its run-time
estimate times this factor (at least 1): it must find that much time left in a pilot, which kills it at its
end. A job's ``wall`` is what it needs; the estimate alone only makes urgency (pressure, ETA).

``broker_url`` empty means Celery's broker and result backend are ``redis_url``; a Redis Cluster ``redis_url``
(:mod:`taskqueues.store.cluster`) needs one apart, a standalone or Sentinel-managed Redis.

``redis_url`` empty means the embedded default: a private redis-server whose data lives in
``state_dir`` (see :mod:`taskqueues.embedded`). ``catalog`` empty means the local default catalog: one
queue on this host.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from taskqueues.credentials import FILE_SUFFIX, SECRET_SETTINGS, SECRETS_VARIABLE, file_values, read_secrets
from taskqueues.errors import ConfigError, ValidationError
from taskqueues.ete import DEFAULT_SPREAD
from taskqueues.sandbox import SANDBOXES
from taskqueues.store.records import DEFAULT_ETE_SAFETY_FACTOR, DEFAULT_MAX_RETRIES
from taskqueues.store.sentinel import DEFAULT_MASTER

ENV_PREFIX = "PILOTFISH_"

#: The store a pilot (or a test) connects to when none is named: a pilot has no embedded server to find.
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class Settings:
    redis_url: str = ""
    # What pilots connect with (their community's ACL user); empty: made by the embedded server, or
    # redis_url (with a warning) for an external Redis.
    pilot_redis_url: str = ""
    # The embedded server's append-only file: fsync "everysec" (a machine crash loses up to ~1 s of
    # acknowledged writes, a process kill nothing) or "always" (nothing, slower writes).
    redis_appendfsync: str = "everysec"
    vo: str = "default"
    # The prefix of every Redis key; the pilots' user may touch only <prefix>:{<vo>}:*.
    prefix: str = "pf"
    catalog: str = ""
    # The embedded server's data, its users' generated passwords and the local deployment's files (mode 0700).
    state_dir: str = str(Path.home() / ".pilotfish")
    lease_seconds: float = 60.0
    # The back-off (seconds) before the reaper requeues a job whose lease expired again (a first expiry has none).
    backoff_seconds: float = 10.0
    # How many times a job whose lease expired is requeued before it fails (a job submitted through the API
    # may give its own, 0..100).
    max_retries: int = DEFAULT_MAX_RETRIES
    # The run-time estimate (seconds) of a job with no hint, no earlier run and no statistics of its rule.
    default_ete: float = 60.0
    ete_safety_factor: float = DEFAULT_ETE_SAFETY_FACTOR
    # a rule whose run times' coefficient of variation is over this has no say over a job's own hint
    ete_spread: float = DEFAULT_SPREAD
    # a reservation of the match holds back no job past the date it should start by, less its own run
    # (issue 29; docs/user/scheduling.md); false: EASY backfill's reservations (scores that are not dates)
    bounded_reservations: bool = True
    # periodic work (seconds)
    reap_interval: float = 5.0
    pool_refresh_interval: float = 900.0
    clean_interval: float = 600.0
    # How long (seconds) an empty task queue or SubmitPool stays before the clean task forgets it.
    clean_grace: float = 600.0
    # Requests whose jobs all ended are forgotten this long (seconds) after their last end, with their jobs'
    # records and payload output, by the clean task; 0 keeps them for ever (taskqueues.store.retention).
    job_retention: float = 2592000.0
    # Seconds between two cycles of the site director.
    director_interval: float = 10.0
    # Beat runs the director's cycle; false: the director runs as its own process (the chart's workers and beat).
    beat_director: bool = True
    # Seconds between two re-pressure runs (learnt run times re-score the waiting jobs).
    repressure_interval: float = 30.0
    # pilots
    # A pilot with nothing running and nothing matched for this long (seconds) exits.
    pilot_idle_timeout: float = 60.0
    # Seconds a provisioned pilot keeps free before its end to stop its payloads and report.
    pilot_stop_margin: float = 60.0
    # Pilots send Celery events, so Flower shows them as workers and their payloads as tasks.
    pilot_events: bool = True
    # A provisioned pilot no backend answers for (its director died with the only knowledge of it) and that
    # has not beaten for this long is retired from the director's records.
    pilot_retire_after: float = 180.0
    # Flower
    # The port of the Flower that pilotfish up starts.
    flower_port: int = 5555
    # Metrics (pilotfish metrics): at most this many task queues get series of their own, the others add up
    # under task_queue="other".
    metrics_task_queues: int = 20
    # Logs of the long-running components (pilot, director, worker, beat): "text", or "json" (one object a line).
    log_format: str = "text"
    # Housekeeping tasks (reap, release sweep, the other periodic ones) send Celery task events (Flower).
    housekeeping_events: bool = False
    # The primary's name when redis_url is a Sentinel URL (sentinel://h1:26379;sentinel://h2:26379): the
    # store's, Celery's (master_name transport option) and the pilots' ($PILOTFISH_REDIS_SENTINEL_MASTER).
    redis_sentinel_master: str = DEFAULT_MASTER
    # A submission is acknowledged once this many replicas hold it (WAIT; at most the primary's connected
    # replicas, so a primary without one acknowledges at once): 0 = as soon as the primary does.
    submit_replicas: int = 1
    # Celery's broker and result backend; empty: redis_url. Needed apart when redis_url names a Redis Cluster
    # (redis+cluster://h1:6379,h2:6379): Celery's Redis transport cannot use one, so the broker stays on a
    # standalone or Sentinel-managed Redis (sentinel://...; its primary is redis_sentinel_master).
    broker_url: str = ""
    # What pilots send their Celery events to when broker_url is set (their own ACL user on the broker);
    # empty: broker_url.
    pilot_broker_url: str = ""
    # How pilots start payloads (taskqueues.sandbox): "bwrap" (each in its own namespaces, the default) or
    # "none" (unconfined: `up` and the director warn what a payload can then reach).
    payload_sandbox: str = "bwrap"
    # Where a job may ask its sandbox for a path (requirements sandbox_ro, sandbox_rw), ":"-separated absolute
    # paths: the site's shared scratch places (the examples share files through /tmp/pilotfish-examples).
    payload_shared_paths: str = "/tmp/pilotfish-examples"
    # The HTTP API (pilotfish serve; docs/operator/api.md). api_url set: the CLI and Client speak to that API
    # with a token ($PILOTFISH_TOKEN, else api_token_file) instead of to the store.
    api_url: str = ""
    # The file holding this user's API token (one line, mode 0600); empty: <state_dir>/token.
    api_token_file: str = ""
    # Where `pilotfish serve` (and `up`) listens.
    api_host: str = "127.0.0.1"
    api_port: int = 8470
    # Users (role user) may list and look at other users' requests and jobs (Slurm's PrivateData unset); false:
    # each sees only their own (a group admin its groups').
    api_users_see_all: bool = False
    # Calls per second each identity may make (a bucket of api_rate_burst calls): past it, 429 with Retry-After.
    api_rate: float = 50.0
    api_rate_burst: int = 200
    # The largest request body (bytes) the API reads: past it, 413.
    api_max_body: int = 16777216
    # Seconds a call may take before the API answers 504.
    api_timeout: float = 60.0
    # The JSON-lines audit file; empty: <state_dir>/logs/audit.jsonl.
    api_audit_file: str = ""
    # JWTs from an OIDC issuer (WLCG Common JWT profile defaults): empty issuer = none accepted.
    api_oidc_issuer: str = ""
    # The audience a token must carry; empty: the API's own URL (api_url), else "https://wlcg.cern.ch/jwt/v1/any".
    api_oidc_audience: str = ""
    # The issuer's JWKS URL; empty: the jwks_uri of its discovery document (<issuer>/.well-known/openid-configuration).
    api_oidc_jwks_url: str = ""
    api_oidc_user_claim: str = "sub"
    api_oidc_groups_claim: str = "wlcg.groups"
    # Groups (after mapping, without the leading "/") whose members are operators, ","-separated.
    api_oidc_operator_groups: str = ""
    # Request-end notifications (issue 28): the webhook a request without its own ``notify`` calls when it ends
    # (POST, its summary as JSON; empty: none), how long a call may take (seconds), how many attempts before
    # it fails for good, and the first back-off between attempts (seconds, doubling, at most an hour).
    notify_url: str = ""
    notify_timeout: float = 10.0
    notify_attempts: int = 8
    notify_backoff: float = 30.0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def load(cls, path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        sources = {f.name: "default" for f in fields(cls) if f.name != "sources"}
        path = path or env.get(f"{ENV_PREFIX}CONFIG") or ("pilotfish.toml" if Path("pilotfish.toml").exists() else None)
        if path:
            try:
                data = tomllib.loads(Path(path).read_text())
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read settings: {exc.strerror}") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            for key, value in data.items():
                if key not in sources:
                    raise ConfigError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(sources))})")
                values[key] = cls._convert(key, value, f"{path}: {key}")
                sources[key] = str(path)
        for key, value in read_secrets(env).items():  # what `pilotfish up` keeps out of its processes' environment
            values[key] = cls._convert(key, value, f"{env[SECRETS_VARIABLE]}: {key}")
            sources[key] = env[SECRETS_VARIABLE]
        for key in sources:
            name = f"{ENV_PREFIX}{key.upper()}"
            if name in env:
                values[key] = cls._convert(key, env[name], name)
                sources[key] = f"${name}"
        secret_variables = {f"{ENV_PREFIX}{key.upper()}": key for key in SECRET_SETTINGS}
        for name, value in file_values(env, secret_variables).items():  # a mounted Secret (the Helm chart)
            key, variable = secret_variables[name], f"{name}{FILE_SUFFIX}"
            values[key] = cls._convert(key, value, f"${variable}")
            sources[key] = f"${variable} ({env[variable]})"
        settings = cls(**values, sources=sources)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse values no component could use, naming the setting and where it came from."""
        from taskqueues.store.keys import Keys

        def where(name: str) -> str:
            source = self.sources.get(name, "default")
            return source if source.startswith("$") else f"{name} ({source})"

        for name in ("prefix", "vo"):
            try:
                Keys(**{name: getattr(self, name)})
            except ConfigError as exc:
                raise ConfigError(f"{where(name)}: {exc}") from None
        for name in (
            "lease_seconds",
            "reap_interval",
            "pool_refresh_interval",
            "clean_interval",
            "director_interval",
            "repressure_interval",
            "pilot_idle_timeout",
            "default_ete",
            "notify_timeout",
            "notify_backoff",
            "notify_attempts",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{where(name)}: {name} must be positive, got {getattr(self, name)!r}")
        if self.redis_appendfsync not in ("always", "everysec", "no"):
            raise ConfigError(
                f"{where('redis_appendfsync')}: must be always, everysec or no, got {self.redis_appendfsync!r}"
            )
        if self.max_retries < 0:
            raise ConfigError(f"{where('max_retries')}: must be >= 0, got {self.max_retries}")
        if self.payload_sandbox not in SANDBOXES:
            raise ConfigError(
                f"{where('payload_sandbox')}: must be {' or '.join(SANDBOXES)}, got {self.payload_sandbox!r}"
            )
        if any(not p.startswith("/") for p in self.payload_shared_paths.split(":") if p):
            raise ConfigError(
                f"{where('payload_shared_paths')}: ':'-separated absolute paths, got {self.payload_shared_paths!r}"
            )
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"{where('log_format')}: must be text or json, got {self.log_format!r}")
        if self.metrics_task_queues < 0:
            raise ConfigError(f"{where('metrics_task_queues')}: must be >= 0, got {self.metrics_task_queues}")
        for name in ("flower_port", "api_port"):
            if not 0 < getattr(self, name) < 65536:
                raise ConfigError(f"{where(name)}: not a TCP port: {getattr(self, name)}")
        for name in ("api_rate", "api_rate_burst", "api_max_body", "api_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{where(name)}: {name} must be positive, got {getattr(self, name)!r}")
        if self.api_url and not self.api_url.startswith(("http://", "https://")):
            raise ConfigError(f"{where('api_url')}: must be an http:// or https:// URL, got {self.api_url!r}")
        if self.notify_url:
            from .webhook import check_webhook

            try:
                check_webhook(self.notify_url, "notify_url")
            except ValidationError as exc:
                raise ConfigError(f"{where('notify_url')}: {exc}") from None
        self._check_broker(where)

    def _check_broker(self, where: Any) -> None:
        """A Cluster ``redis_url`` needs a ``broker_url`` apart, and that one cannot be a Cluster."""
        from taskqueues.store.cluster import ClusterURL, is_cluster

        if is_cluster(self.redis_url):
            ClusterURL.parse(self.redis_url)  # a bad form is refused here, naming what is wrong
            if not self.broker_url:
                raise ConfigError(
                    f"{where('redis_url')}: names a Redis Cluster, which Celery's Redis transport cannot use as its "
                    "broker: set broker_url to a standalone (redis://) or Sentinel-managed (sentinel://) Redis"
                )
        for name in ("broker_url", "pilot_broker_url"):
            if is_cluster(getattr(self, name)):
                raise ConfigError(
                    f"{where(name)}: Celery's Redis transport cannot use a Redis Cluster: name a standalone "
                    "(redis://) or Sentinel-managed (sentinel://) Redis"
                )

    @classmethod
    def _convert(cls, key: str, value: object, where: str) -> Any:
        kind = {f.name: f.type for f in fields(cls)}[key]
        try:
            if kind == "bool":
                if isinstance(value, bool):
                    return value
                text = str(value).strip().lower()
                if text in ("1", "true", "yes", "on"):
                    return True
                if text in ("0", "false", "no", "off"):
                    return False
                raise ValueError(f"not a boolean: {value!r}")
            if kind == "int":
                return int(str(value))
            if kind == "float":
                number = float(str(value))
                if not number >= 0:  # NaN too
                    raise ValueError("must be >= 0")
                return number
            if not isinstance(value, str):
                raise ValueError(f"expected text, got {type(value).__name__}")
            return value
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def with_(self, **changes: Any) -> Settings:
        sources = dict(self.sources)
        sources.update({k: "command line" for k in changes})
        return dataclasses.replace(self, **changes, sources=sources)

    def items(self) -> list[tuple[str, Any, str]]:
        """(name, value, source) for every setting, for ``pilotfish config``."""
        return [
            (f.name, getattr(self, f.name), self.sources.get(f.name, "default"))
            for f in fields(self)
            if f.name != "sources"
        ]


#: The defaults: what the pilot's options and the matcher's objects that a setting configures start from, so
#: each setting has its one default here (tests/taskqueues/test_settings.py holds them to it).
DEFAULTS = Settings()
