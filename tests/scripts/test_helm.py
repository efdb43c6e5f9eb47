"""The Helm chart, rendered and linted by the real Helm, and the Dockerfile that builds its image.

Helm runs in-process through helm-python-sdk (Helm v4 as a shared library); scripts/helm_check.sh installs
it and kubernetes-validate from PyPI when they are missing. Only if that install fails are the chart tests
skipped, with pip's message as the reason. The Dockerfile cannot be built here (no Docker engine): its
tests check its structure and build the package wheel from exactly the files the Dockerfile copies.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import importlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
import yaml

from tests.support.paths import ROOT as REPO
from tests.support.polling import wait_until
from tests.support.scripts import script

# The Helm checkers may be installed by the first test (up to 15 minutes), the chart tests render and lint.
pytestmark = pytest.mark.timeout(1800)

CHART = REPO / "helm" / "pilotfish"


# --- the checker module (scripts/helm_check.py), installed on demand ----------------------------------


@pytest.fixture(scope="session")
def hc() -> ModuleType:
    try:
        import helm_python  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "helm_check.sh"), "--install-only"],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PYTHON": sys.executable},
        )
        if done.returncode != 0:
            pytest.skip(f"cannot install helm-python-sdk / kubernetes-validate: {done.stderr.strip()[-800:]}")
        importlib.invalidate_caches()
    return script("helm_check")


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    matches = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    names = [o["metadata"]["name"] for o in matches]
    assert len(matches) == 1, f"expected one {kind} named *{suffix}, got {names}"
    return matches[0]


def container(obj: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def projected(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(Secret, key, path) of each Secret key a pod mounts through its projected volumes."""
    return [
        (source["secret"]["name"], item["key"], item["path"])
        for volume in obj["spec"]["template"]["spec"]["volumes"]
        for source in volume.get("projected", {}).get("sources", [])
        for item in source["secret"]["items"]
    ]


def secret_value(objects: list[dict[str, Any]], name_suffix: str, key: str) -> str:
    return base64.b64decode(named(objects, "Secret", name_suffix)["data"][key]).decode()


# --- Helm lint, the Kubernetes schemas, the chart's policy, for every variant -------------------------


def test_helm_is_the_real_helm_v4(hc: ModuleType) -> None:
    assert hc.helm.helm_sdk_version().startswith("v4.")


def test_the_checks_can_fail(hc: ModuleType) -> None:
    """Each checker finds a planted defect, so the green results above mean something."""
    deployment = named(hc.objects_of({}), "Deployment", "-matcher")
    spec = deployment["spec"]["template"]["spec"]
    spec["containers"][0]["resource"] = spec["containers"][0].pop("resources")
    assert any("'resource' was unexpected" in p for p in hc.schema_problems([deployment], "1.33.0"))
    assert any("no requests.cpu" in p for p in hc.policy_problems([deployment]))
    del spec["containers"][0]["livenessProbe"]
    spec["securityContext"]["runAsUser"] = 0
    problems = hc.policy_problems([deployment])
    assert any("no livenessProbe" in p for p in problems)
    assert any("runAsUser 10001" in p for p in problems)
    assert hc.lint_problems({"pilots": {"kind": "Pod"}})


def test_the_checks_find_a_url_or_its_password_in_an_environment_or_a_command_line(hc: ModuleType) -> None:
    """The policy that keeps every URL in files: each planted way of putting one back is found."""
    plants: list[tuple[dict[str, Any], str]] = [
        ({"name": "PILOTFISH_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "redis-url"}}}, "takes"),
        ({"name": "BROKER", "valueFrom": {"secretKeyRef": {"name": "s", "key": "broker-url"}}}, "takes"),
        ({"name": "PILOTFISH_REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}}, "takes"),
        ({"name": "PILOTFISH_REDIS_URL", "value": "redis://pf-control:$(PW)@r:6379/0"}, "with a password"),
    ]
    for variable, reason in plants:
        deployment = named(hc.objects_of({}), "Deployment", "-matcher")
        container(deployment)["env"].append(variable)
        problems = hc.policy_problems([deployment])
        assert any(variable["name"] in p and reason in p for p in problems), (variable, problems)
    flower = named(hc.objects_of({}), "Deployment", "-flower")
    container(flower)["env"].append(
        {"name": "FLOWER_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "f", "key": "p"}}}
    )
    assert any("FLOWER_PASSWORD takes" in p for p in hc.policy_problems([flower]))
    for arg in ("$(PILOTFISH_REDIS_URL)", "redis://pf-control:pw@r:6379/0"):
        deployment = named(hc.objects_of({}), "Deployment", "-flower")
        container(deployment)["args"][:0] = ["--broker", arg]
        assert any("on the command line" in p for p in hc.policy_problems([deployment])), arg
    assert not any("URL" in p for p in hc.policy_problems(hc.objects_of({}))), "the chart as it is passes"


def test_the_shell_entry_point_runs_every_check(hc: ModuleType) -> None:
    """Every variant lints clean, matches the Kubernetes schemas of each of ``KUBE_VERSIONS`` and follows the
    chart policy, and every bad value is refused by Helm naming it: one line of the checker per variant
    (each check in-process too would render and validate everything twice)."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "helm_check.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    versions = "/".join(hc.KUBE_VERSIONS)
    lines = done.stdout.splitlines()
    for variant in hc.VARIANTS:
        ok = [line for line in lines if line.startswith(f"{variant}: ")]
        assert ok and ok[0].endswith(f"lint + schemas {versions} + policy: ok"), done.stdout
    assert done.stdout.count(": ok") == len(hc.VARIANTS), done.stdout
    assert f"{len(hc.BAD_VALUES)} refused as expected" in done.stdout, done.stdout


# --- what each component runs -------------------------------------------------------------------------


def test_components_run_the_cli_contract_commands_and_probes(hc: ModuleType) -> None:
    objects = hc.objects_of({"director": {"enabled": True}, "pilots": {"enabled": True}})
    expected = {
        "-matcher": (["matcher", "--no-beat"], "worker"),
        "-beat": (["matcher", "--beat-only"], "beat"),
        "-director": (["director"], "director"),
        "-pilot": (["pilot", "--queue", "k8s/cluster/pods"], "pilot"),
    }
    for suffix, (args, component) in expected.items():
        c = container(named(objects, "Deployment", suffix))
        assert "command" not in c, "the image's ENTRYPOINT is `pilotfish`: only args are given"
        assert c["args"] == args
        health = ["pilotfish", "health", "--component", component]
        assert c["livenessProbe"]["exec"]["command"] == health
        assert c["startupProbe"]["exec"]["command"] == health
        assert c["readinessProbe"]["exec"]["command"] == ["pilotfish", "health", "--redis"]
        env = env_of(c)
        assert env["PILOTFISH_CATALOG"]["value"] == "/etc/pilotfish/catalog.toml"
        assert env["PILOTFISH_VO"]["value"] == "default"
        assert c["workingDir"] == env["PILOTFISH_STATE_DIR"]["value"] == "/var/lib/pilotfish"


def test_worker_and_beat_pods_run_no_director_of_their_own(hc: ModuleType) -> None:
    """The director is its own Deployment: the env of the worker and beat pods turns beat's director
    schedule off, and a worker so configured refuses the task even if some other beat sends it."""
    from matcher.app import celery_app
    from taskqueues.context import Context
    from taskqueues.settings import Settings

    for director in (True, False):
        objects = hc.objects_of({"director": {"enabled": director}})
        for suffix in ("-matcher", "-beat"):
            entry = env_of(container(named(objects, "Deployment", suffix)))["PILOTFISH_BEAT_DIRECTOR"]
            assert entry == {"name": "PILOTFISH_BEAT_DIRECTOR", "value": "false"}
            settings = Settings.load(
                path="/dev/null", env={"PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0", entry["name"]: entry["value"]}
            )
            assert settings.beat_director is False
            app = celery_app.configure(Context(settings))
            assert "director" not in app.conf.beat_schedule and "reap" in app.conf.beat_schedule
            assert "skipped" in celery_app.director()
            assert celery_app._director is None
    default = Settings.load(path="/dev/null", env={"PILOTFISH_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert "director" in celery_app.configure(Context(default)).conf.beat_schedule, "the local default keeps it"


def test_pilot_pods_name_the_pilot_after_the_pod_so_its_probe_finds_its_own_heartbeat(hc: ModuleType) -> None:
    """A pilot pod's processes get the pod's name and node from the downward API; the pilot's identity
    (and so the name its liveness probe looks up) is derived from them."""
    from pilot.agent.config import identity_from_environment

    downward = {"PILOTFISH_POD_NAME": "metadata.name", "PILOTFISH_NODE_NAME": "spec.nodeName"}
    for kind in ("Deployment", "Job"):
        objects = hc.objects_of({"pilots": {"enabled": True, "kind": kind}})
        env = env_of(container(named(objects, kind, "-pilot" if kind == "Deployment" else "-pilot-r1")))
        assert {name: env[name]["valueFrom"]["fieldRef"]["fieldPath"] for name in downward} == downward
    pod = {"PILOTFISH_POD_NAME": "pf-pilotfish-pilot-5d8f-abcde", "PILOTFISH_NODE_NAME": "worker-3"}
    assert identity_from_environment(pod).name == "k8s-pf-pilotfish-pilot-5d8f-abcde@worker-3"
    for suffix in ("-matcher", "-beat"):
        assert "PILOTFISH_POD_NAME" not in env_of(container(named(hc.objects_of({}), "Deployment", suffix)))


def test_beat_is_exactly_one_pod_replaced_not_rolled(hc: ModuleType) -> None:
    objects = hc.objects_of({"matcher": {"replicas": 5}})
    beat = named(objects, "Deployment", "-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert named(objects, "Deployment", "-matcher")["spec"]["replicas"] == 5
    with pytest.raises(hc.helm.HelmValuesError, match="replicas"):
        hc.render({"beat": {"replicas": 2}})


def test_flower_runs_celery_flower_with_basic_auth_from_a_secret(hc: ModuleType, tmp_path: Path) -> None:
    objects = hc.objects_of({"flower": {"auth": {"username": "ops", "password": "Fl0wer-pass"}}})
    c = container(named(objects, "Deployment", "-flower"))
    assert c["command"] == ["celery"]
    assert c["args"] == [
        "--config",
        "matcher.app.flower_config",  # the broker's URL from its file, a Sentinel broker's master_name
        "flower",
        "--conf=/etc/pilotfish-flower/flowerconfig.py",  # its login, from the Secret's files
        "--port=5555",
        "--address=0.0.0.0",
    ]
    env = env_of(c)
    assert not [name for name in env if name.startswith("FLOWER_")], "no login in Flower's environment"
    assert env["PILOTFISH_REDIS_URL_FILE"]["value"] == "/run/pilotfish/credentials/redis_url"
    volumes = {v["name"]: v for v in named(objects, "Deployment", "-flower")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["flower-login"]["secret"]["secretName"] == "pf-pilotfish-flower"
    assert volumes["flower-login"]["secret"]["defaultMode"] == 0o400
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["flower-login"] == {"name": "flower-login", "mountPath": "/run/pilotfish/flower", "readOnly": True}
    assert mounts["flower-config"]["mountPath"] == "/etc/pilotfish-flower"
    # Flower's own option parser, given the rendered options file and the Secret's two files, gets the login.
    login = tmp_path / "login"
    login.mkdir()
    (login / "username").write_text(secret_value(objects, "-flower", "username"))
    (login / "password").write_text(secret_value(objects, "-flower", "password") + "\n")
    conf = named(objects, "ConfigMap", "-flower")["data"]["flowerconfig.py"]
    (tmp_path / "flowerconfig.py").write_text(conf.replace("/run/pilotfish/flower", str(login)))
    parse = (
        "import sys, flower.options; from tornado.options import options, parse_config_file; "
        "parse_config_file(sys.argv[1], final=False); print(options.basic_auth)"
    )
    done = subprocess.run(
        [sys.executable, "-c", parse, str(tmp_path / "flowerconfig.py")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['ops:Fl0wer-pass']"
    assert secret_value(objects, "-flower", "username") == "ops"
    assert secret_value(objects, "-flower", "password") == "Fl0wer-pass"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthcheck", "port": "http"}
    service = named(objects, "Service", "-flower")
    assert service["spec"]["ports"][0]["port"] == 5555
    assert not by_kind(objects, "Ingress")


def test_flower_ingress_and_notes_tell_how_to_reach_it(hc: ModuleType) -> None:
    rendered = hc.render(
        {"flower": {"ingress": {"enabled": True, "host": "flower.site.test", "tls": {"enabled": True}}}}
    )
    ingress = named([m["object"] for m in hc.manifests(rendered)], "Ingress", "-flower")
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "flower.site.test"
    assert rule["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "http"}
    assert ingress["spec"]["tls"][0]["hosts"] == ["flower.site.test"]
    notes = rendered["pilotfish/templates/NOTES.txt"]
    assert "https://flower.site.test/" in notes
    assert "get secret pf-pilotfish-flower -o jsonpath='{.data.password}'" in notes
    plain = hc.render({})["pilotfish/templates/NOTES.txt"]
    assert "port-forward svc/pf-pilotfish-flower 5555:5555" in plain
    assert "no pilot will start" in plain


def test_the_api_is_deployed_probed_served_and_optionally_behind_a_tls_ingress(hc: ModuleType) -> None:
    objects = [m["object"] for m in hc.manifests(hc.render({}))]
    api = named(objects, "Deployment", "-api")
    c = container(api)
    assert c["args"] == ["serve", "--host", "0.0.0.0", "--port", "8470"]
    assert c["ports"] == [{"name": "http", "containerPort": 8470, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    service = named(objects, "Service", "-api")
    assert service["spec"]["ports"][0]["port"] == 8470 and service["spec"]["ports"][0]["targetPort"] == "http"
    assert not by_kind(objects, "Ingress")
    values = {
        "api": {
            "settings": {"api_oidc_issuer": "https://iam.site.test", "api_users_see_all": True},
            "ingress": {"enabled": True, "host": "api.site.test", "tls": {"enabled": True}},
        }
    }
    rendered = hc.render(values)
    objects = [m["object"] for m in hc.manifests(rendered)]
    env = {e["name"]: e.get("value") for e in container(named(objects, "Deployment", "-api"))["env"]}
    assert env["PILOTFISH_API_OIDC_ISSUER"] == "https://iam.site.test" and env["PILOTFISH_API_USERS_SEE_ALL"] == "true"
    ingress = named(objects, "Ingress", "-api")
    assert ingress["spec"]["rules"][0]["host"] == "api.site.test"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"].endswith("-api")
    assert ingress["spec"]["tls"] == [{"hosts": ["api.site.test"], "secretName": "pf-pilotfish-api-tls"}]
    assert "https://api.site.test/" in rendered["pilotfish/templates/NOTES.txt"]
    assert not hc.lint_problems(values)
    assert hc.lint_problems({"api": {"settings": {"redis_url": "redis://elsewhere"}}})  # api_* settings only
    off = [m["object"]["metadata"]["name"] for m in hc.manifests(hc.render({"api": {"enabled": False}}))]
    assert off and not [name for name in off if name.endswith("-api")]


# --- the store: bundled (Valkey, two ACL users) or external, and where its passwords may appear --------

STORE_VALUES: dict[str, Any] = {
    "vo": "lhcb",
    "prefix": "site1",
    "redis": {"database": 3, "auth": {"password": "Control-pw-1", "pilot": {"password": "Pilot-pw-2"}}},
    "pilots": {"enabled": True},
    "director": {"enabled": True},
}


def broker_selector(db: int = 0) -> str:
    """The selectors taskqueues.store.access.apply(..., broker=True) adds on Redis >= 7 / Valkey."""
    from taskqueues.store import access

    return " ".join(access.pilot_selectors(db))


CREDENTIALS = "/run/pilotfish/credentials"


def credentials_dir(
    pod: dict[str, Any], objects: list[dict[str, Any]], directory: Path, secrets: dict[str, str] | None = None
) -> Path:
    """The files a pod's Pilotfish container finds in /run/pilotfish/credentials, made under ``directory`` as
    the kubelet and the pod's init container make them: each projected Secret key written to its path (the
    rendering's value, or ``secrets[name/key]`` for a Secret the chart does not create), then the init
    container's script (if any) run by a real shell, with /run/pilotfish mapped to ``directory``."""
    spec = pod["spec"]["template"]["spec"]
    for volume in spec["volumes"]:
        projected = volume.get("projected")
        if not projected:
            continue
        assert projected["defaultMode"] == 0o400, volume
        target = directory / ("secrets" if volume["name"] == "credential-secrets" else "credentials")
        target.mkdir(parents=True, exist_ok=True)
        for source in projected["sources"]:
            name = source["secret"]["name"]
            for item in source["secret"]["items"]:
                key = f"{name}/{item['key']}"
                value = (secrets or {})[key] if secrets and key in secrets else secret_value(objects, name, item["key"])
                (target / item["path"]).write_text(value)
    (directory / "credentials").mkdir(exist_ok=True)
    for init in spec.get("initContainers", []):
        assert init["command"][:2] == ["sh", "-c"]
        script = init["command"][2].replace("/run/pilotfish", str(directory))
        subprocess.run(["sh", "-c", script], check=True, timeout=30)
    return directory / "credentials"


def resolved_env(
    c: dict[str, Any],
    objects: list[dict[str, Any]],
    fields: dict[str, str] | None = None,
    credentials: Path | None = None,
) -> dict[str, str]:
    """A container's environment as the kubelet builds it: Secrets from the rendering, downward-API fields
    from ``fields``, $(VAR) expanded from the variables defined before; a file of /run/pilotfish/credentials
    named by a variable points into ``credentials`` (:func:`credentials_dir`)."""
    from helm_check import kubelet_expand

    env: dict[str, str] = {}
    for variable in c.get("env", []):
        source = variable.get("valueFrom", {})
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[variable["name"]] = secret_value(objects, ref["name"], ref["key"])
        elif "fieldRef" in source:
            env[variable["name"]] = (fields or {})[source["fieldRef"]["fieldPath"]]
        else:
            env[variable["name"]] = kubelet_expand(variable["value"], env)
        if credentials is not None and env[variable["name"]].startswith(CREDENTIALS + "/"):
            env[variable["name"]] = str(credentials / env[variable["name"]].removeprefix(CREDENTIALS + "/"))
    return env


def urls_of(
    pod: dict[str, Any], objects: list[dict[str, Any]], directory: Path, secrets: dict[str, str] | None = None
) -> dict[str, str]:
    """The URL settings a pod's Pilotfish container reads (PILOTFISH_REDIS_URL...), from the files its
    PILOTFISH_*_FILE variables name, as taskqueues.settings reads them."""
    from taskqueues.credentials import file_values

    files = credentials_dir(pod, objects, directory, secrets)
    env = resolved_env(container(pod), objects, {"metadata.name": "p", "spec.nodeName": "n"}, files)
    names = [name.removesuffix("_FILE") for name in env if name.endswith("_URL_FILE")]
    return file_values(env, names)


def test_the_store_is_valkey_by_default_append_only_on_a_claim(hc: ModuleType, tmp_path: Path) -> None:
    objects = hc.objects_of(
        {"redis": {"appendfsync": "always", "persistence": {"size": "20Gi", "storageClass": "fast"}}}
    )
    redis = named(objects, "StatefulSet", "-redis")
    c = container(redis)
    repository, tag = c["image"].rsplit(":", 1)
    assert repository == "docker.io/valkey/valkey"
    assert re.fullmatch(r"(8|9)\.\d+\.\d+-alpine", tag), "a pinned Valkey 8.x/9.x patch release"
    assert c["command"][:2] == ["sh", "-c"] and "command -v valkey-server || command -v redis-server" in c["command"][2]
    args = c["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "always"
    assert args[args.index("--dir") + 1] == "/data"
    assert "--requirepass" not in args, "no default user: two ACL users"
    assert "secretKeyRef" in env_of(c)["CONTROL_PASSWORD"]["valueFrom"]
    assert "secretKeyRef" in env_of(c)["PILOT_PASSWORD"]["valueFrom"]
    claim = redis["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in c["volumeMounts"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = " ".join(c[probe]["exec"]["command"])
        assert "command -v valkey-cli || command -v redis-cli" in command
        assert 'REDISCLI_AUTH="$CONTROL_PASSWORD"' in command and " -a " not in command
    assert redis["spec"]["serviceName"] == named(objects, "Service", "-redis-headless")["metadata"]["name"]
    password = secret_value(objects, "-redis", "redis-password")
    urls = urls_of(named(objects, "Deployment", "-matcher"), objects, tmp_path)
    assert urls == {"PILOTFISH_REDIS_URL": f"redis://pf-control:{password}@pf-pilotfish-redis:6379/0"}


@pytest.mark.parametrize("vo, prefix, db", [("default", "pf", 0), ("lhcb", "site1", 3), ("cms.t2_x-y", "p-1.x", 15)])
def test_the_stores_users_have_the_rules_of_taskqueues_access(hc: ModuleType, vo: str, prefix: str, db: int) -> None:
    """The rules the chart renders are, word for word, those taskqueues.store.access gives the two users."""
    from taskqueues.store import access

    objects = hc.objects_of({"vo": vo, "prefix": prefix, "redis": {"database": db}})
    env = env_of(container(named(objects, "StatefulSet", "-redis")))
    assert env["CONTROL_USER"]["value"] == access.CONTROL_USER
    assert env["CONTROL_RULES"]["value"] == " ".join(access.control_rules())
    assert env["PILOT_USER"]["value"] == access.pilot_user(vo)
    assert env["PILOT_RULES"]["value"] == " ".join(access.pilot_rules(prefix, vo, db)) + " " + broker_selector(db)


def test_the_stores_start_script_reaches_the_shell_as_written(hc: ModuleType) -> None:
    """The kubelet expands $(VAR) and $$ in a container's command: the script must contain neither."""
    for values in ({}, STORE_VALUES):
        c = container(named(hc.objects_of(values), "StatefulSet", "-redis"))
        names = {e["name"]: "X" for e in c["env"]}
        assert [hc.kubelet_expand(part, names) for part in c["command"] + c["args"]] == c["command"] + c["args"]
    assert hc.kubelet_expand("a $(B) $$(C) $(D", {"B": "b"}) == "a b $(C) $(D", "the kubelet's rules"


def test_pilot_pods_cannot_read_the_control_planes_credentials(hc: ModuleType) -> None:
    """A pilot pod (Deployment or Job) gets only the pilots' user: no control-plane variable, no Secret that
    holds the control password or URL, nothing mounted from one; the director gets both URLs."""
    control_password, pilot_password = "Control-marker-4a1b", "Pilot-marker-8d2c"
    cases = [
        {"redis": {"auth": {"password": control_password, "pilot": {"password": pilot_password}}}},
        {"redis": {"auth": {"existingSecret": "ctl", "pilot": {"existingSecret": "plt"}}}},
        {
            "redis": {"enabled": False},
            "externalRedis": {
                "url": f"redis://pf-control:{control_password}@r:6379/0",
                "pilot": {"url": f"redis://pf-pilot-default:{pilot_password}@r:6379/0"},
            },
        },
        {
            "redis": {"enabled": False},
            "externalRedis": {"existingSecret": "ctl-url", "pilot": {"existingSecret": "plt-url"}},
        },
    ]
    for values in cases:
        for kind in ("Deployment", "Job"):
            pods = {"pilots": {"enabled": True, "kind": kind}, "director": {"enabled": True}}
            objects = hc.objects_of({**values, **pods})
            assert hc.pilot_credential_problems(objects) == []
            pilot = named(objects, kind, "-pilot" if kind == "Deployment" else "-pilot-r1")
            env = env_of(container(pilot))
            assert [name for name in env if "REDIS" in name or "URL" in name] == ["PILOTFISH_REDIS_URL_FILE"]
            assert not [e for e in env.values() if "secretKeyRef" in e.get("valueFrom", {})]
            pod = pilot["spec"]["template"]["spec"]
            (volume,) = [v for v in pod["volumes"] if "secret" in v or "projected" in v]
            (source,) = volume["projected"]["sources"]  # the pilots' Secret only
            assert source["secret"]["name"] in (
                "pf-pilotfish-redis-pilot",
                "plt",
                "pf-pilotfish-external-redis-pilot",
                "plt-url",
            )
            assert not [c for c in pod["containers"] if c.get("envFrom")]
            text = yaml.safe_dump(pilot)
            assert control_password not in text and "pf-control" not in text and "ctl" not in text
            director = env_of(container(named(objects, "Deployment", "-director")))
            assert {"PILOTFISH_REDIS_URL_FILE", "PILOTFISH_PILOT_REDIS_URL_FILE"} <= set(director)
    # The check itself finds a pilot pod reading the control plane's Secret, whatever the path it mounts it as.
    for path in ("pilot_redis_password", None):
        objects = hc.objects_of({"pilots": {"enabled": True}})
        pod = named(objects, "Deployment", "-pilot")["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if "projected" in v]
        secret = volume["projected"]["sources"][0]["secret"]
        secret["name"] = "pf-pilotfish-redis"
        if path is None:
            del secret["items"]  # every key of it
        assert hc.pilot_credential_problems(objects)


def test_the_rendered_urls_name_each_processs_own_user(hc: ModuleType, tmp_path: Path) -> None:
    """Resolved as the kubelet and the init container would make them, and read as Settings reads them: the
    control plane is pf-control, a pilot pod pf-pilot-<vo>, and the director hands the pilots it starts the
    pilots' URL (Settings.pilot_redis_url)."""
    from taskqueues.context import Context
    from taskqueues.settings import Settings

    objects = hc.objects_of({**STORE_VALUES, "metrics": {"enabled": True}})
    fields = {"metadata.name": "pf-pilotfish-pilot-abc", "spec.nodeName": "node-1"}
    control = "redis://pf-control:Control-pw-1@pf-pilotfish-redis:6379/3"
    pilots = "redis://pf-pilot-lhcb:Pilot-pw-2@pf-pilotfish-redis:6379/3"
    for suffix in ("-matcher", "-beat", "-flower", "-metrics", "-director"):
        urls = urls_of(named(objects, "Deployment", suffix), objects, tmp_path / suffix)
        assert urls["PILOTFISH_REDIS_URL"] == control, suffix
    pod = named(objects, "Deployment", "-pilot")
    assert urls_of(pod, objects, tmp_path / "pilot") == {"PILOTFISH_REDIS_URL": pilots}
    pilot = resolved_env(container(pod), objects, fields, tmp_path / "pilot" / "credentials")
    assert (pilot["PILOTFISH_VO"], pilot["PILOTFISH_PREFIX"]) == ("lhcb", "site1")
    files = credentials_dir(named(objects, "Deployment", "-director"), objects, tmp_path / "director-files")
    director = resolved_env(container(named(objects, "Deployment", "-director")), objects, None, files)
    settings = Settings.load(path="/dev/null", env=director)
    assert settings.sources["pilot_redis_url"].startswith("$PILOTFISH_PILOT_REDIS_URL_FILE")
    assert (settings.redis_url, Context(settings).pilot_redis_url) == (control, pilots)
    assert {stat.S_IMODE(path.stat().st_mode) for path in files.iterdir()} == {0o600}, "written under umask 077"


def test_an_external_redis_without_pilot_url_gives_pilots_the_control_url_and_says_so(hc: ModuleType) -> None:
    values = {
        "redis": {"enabled": False},
        "externalRedis": {"url": "redis://pf-control:c@r:6379/0"},
        "pilots": {"enabled": True},
        "director": {"enabled": True},
    }
    rendered = hc.render(values)
    objects = [m["object"] for m in hc.manifests(rendered)]
    assert projected(named(objects, "Deployment", "-pilot")) == [
        ("pf-pilotfish-external-redis", "redis-url", "redis_url")
    ]
    assert hc.pilot_credential_problems(objects), "the check sees it"
    assert "PILOTFISH_PILOT_REDIS_URL_FILE" not in env_of(container(named(objects, "Deployment", "-director")))
    notes = rendered["pilotfish/templates/NOTES.txt"]
    assert "PILOTS HOLD THE CONTROL PLANE'S REDIS CREDENTIALS" in notes
    assert "pilotfish acl --vo default --prefix pf" in notes
    values["externalRedis"]["pilot"] = {"url": "redis://pf-pilot-default:p@r:6379/0"}
    rendered = hc.render(values)
    assert "PILOTS HOLD" not in rendered["pilotfish/templates/NOTES.txt"]
    assert "PILOTS HOLD" not in hc.render({})["pilotfish/templates/NOTES.txt"]


def test_external_redis_renders_no_store_and_reads_the_urls_from_secrets(hc: ModuleType, tmp_path: Path) -> None:
    url = "rediss://pf-control:ext-secret@redis.example.org:6380/3"
    pilot_url = "rediss://pf-pilot-default:ext-p1lot-secret@redis.example.org:6380/3"
    objects = hc.objects_of(
        {
            "redis": {"enabled": False},
            "externalRedis": {"url": url, "pilot": {"url": pilot_url}},
            "director": {"enabled": True},
        }
    )
    assert not by_kind(objects, "StatefulSet")
    assert not [o for o in by_kind(objects, "Service") if "redis" in o["metadata"]["name"]]
    assert secret_value(objects, "-external-redis", "redis-url") == url
    assert secret_value(objects, "-external-redis-pilot", "redis-url") == pilot_url
    for deployment in by_kind(objects, "Deployment"):  # the URLs mounted as they are: no init container
        assert ("pf-pilotfish-external-redis", "redis-url", "redis_url") in projected(deployment)
        assert "initContainers" not in deployment["spec"]["template"]["spec"]
        assert env_of(container(deployment))["PILOTFISH_REDIS_URL_FILE"]["value"] == f"{CREDENTIALS}/redis_url"
    director = named(objects, "Deployment", "-director")
    assert projected(director)[1] == ("pf-pilotfish-external-redis-pilot", "redis-url", "pilot_redis_url")
    assert urls_of(director, objects, tmp_path) == {"PILOTFISH_REDIS_URL": url, "PILOTFISH_PILOT_REDIS_URL": pilot_url}
    assert hc.secret_leaks(objects, "ext-secret") == [] and hc.secret_leaks(objects, "ext-p1lot-secret") == []

    objects = hc.objects_of(
        {"redis": {"enabled": False}, "externalRedis": {"existingSecret": "site-redis", "existingSecretKey": "url"}}
    )
    assert not [o for o in by_kind(objects, "Secret") if "redis" in o["metadata"]["name"]]
    matcher = named(objects, "Deployment", "-matcher")
    assert projected(matcher) == [("site-redis", "url", "redis_url")]
    # `kubectl create secret --from-file` keeps the file's trailing newline: it is dropped
    secrets = {"site-redis/url": "redis://pf-control:site@r:6379/0\n"}
    assert urls_of(matcher, objects, tmp_path / "site", secrets) == {
        "PILOTFISH_REDIS_URL": "redis://pf-control:site@r:6379/0"
    }


def test_without_any_redis_helm_refuses_and_says_what_to_set(hc: ModuleType) -> None:
    with pytest.raises(hc.helm.HelmValuesError, match="/externalRedis"):
        hc.render({"redis": {"enabled": False}})
    # The schema cannot see a template's logic; the template's own check names the values to set.
    with pytest.raises(hc.helm.HelmError, match=r"externalRedis is set while redis\.enabled is true"):
        hc.render({"externalRedis": {"existingSecret": "x"}})
    with pytest.raises(hc.helm.HelmError, match="needs a Secret of its own"):
        hc.render({"redis": {"auth": {"existingSecret": "x", "pilot": {"existingSecret": "x"}}}})


def test_passwords_appear_only_in_secrets(hc: ModuleType) -> None:
    control, pilot, flower = "Redis-marker-7e1f", "Pilot-marker-3b5a", "Flower-marker-9c2d"
    objects = hc.objects_of(
        {
            "redis": {"auth": {"password": control, "pilot": {"password": pilot}}},
            "flower": {"auth": {"password": flower}},
            "pilots": {"enabled": True},
            "director": {"enabled": True},
        }
    )
    assert secret_value(objects, "-redis", "redis-password") == control
    assert secret_value(objects, "-redis-pilot", "redis-password") == pilot
    for password in (control, pilot, flower):
        assert hc.secret_leaks(objects, password) == []


def test_existing_secrets_are_used_and_none_is_created(hc: ModuleType, tmp_path: Path) -> None:
    objects = hc.objects_of(
        {
            "redis": {
                "auth": {
                    "existingSecret": "r-auth",
                    "existingSecretKey": "pw",
                    "pilot": {"existingSecret": "p-auth", "existingSecretKey": "ppw"},
                }
            },
            "flower": {"auth": {"existingSecret": "f-auth"}},
            "pilots": {"enabled": True},
        }
    )
    assert by_kind(objects, "Secret") == []
    store = env_of(container(named(objects, "StatefulSet", "-redis")))
    assert store["CONTROL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "r-auth", "key": "pw"}
    assert store["PILOT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "p-auth", "key": "ppw"}
    pilot = named(objects, "Deployment", "-pilot")
    assert projected(pilot) == [("p-auth", "ppw", "pilot_redis_password")]
    urls = urls_of(pilot, objects, tmp_path, {"p-auth/ppw": "Existing-pw-5\n"})
    assert urls == {"PILOTFISH_REDIS_URL": "redis://pf-pilot-default:Existing-pw-5@pf-pilotfish-redis:6379/0"}
    flower = named(objects, "Deployment", "-flower")["spec"]["template"]["spec"]
    assert {
        "name": "flower-login",
        "secret": {
            "secretName": "f-auth",
            "defaultMode": 0o400,
            "items": [{"key": "username", "path": "username"}, {"key": "password", "path": "password"}],
        },
    } in flower["volumes"]


def test_generated_passwords_are_random_and_do_not_roll_the_pods(hc: ModuleType) -> None:
    """Offline there is no cluster to look the kept passwords up in, so each rendering generates new ones;
    with a cluster, pilotfish.storedOrRandom reuses the Secret's (not verifiable here)."""
    first, second = hc.objects_of({"pilots": {"enabled": True}}), hc.objects_of({"pilots": {"enabled": True}})
    passwords = {
        secret_value(o, suffix, "redis-password") for o in (first, second) for suffix in ("-redis", "-redis-pilot")
    }
    assert len(passwords) == 4 and all(len(p) == 32 and p.isalnum() for p in passwords)
    assert len(secret_value(first, "-flower", "password")) == 24

    def checksums(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        return {
            o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]
            for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")
        }

    assert checksums(first) == checksums(second)


def test_pods_roll_when_the_catalog_or_the_credentials_they_read_change(hc: ModuleType) -> None:
    def annotations(values: dict[str, Any], suffix: str = "-matcher") -> dict[str, str]:
        objects = hc.objects_of({**values, "pilots": {"enabled": True}})
        result: dict[str, str] = named(objects, "Deployment", suffix)["spec"]["template"]["metadata"]["annotations"]
        return result

    base = annotations({})
    catalog = hc.render({})  # the default catalog text, to change one line of it
    default_catalog = next(m["object"] for m in hc.manifests(catalog) if m["object"]["kind"] == "ConfigMap")
    text = default_catalog["data"]["catalog.toml"]
    assert "cpu = 1\n" in text
    changed = annotations({"catalog": text.replace("cpu = 1\n", "cpu = 2\n")})
    assert changed["checksum/catalog"] != base["checksum/catalog"]
    assert changed["checksum/redis-auth"] == base["checksum/redis-auth"]
    new_password = annotations({"redis": {"auth": {"password": "another-one"}}})
    assert new_password["checksum/redis-auth"] != base["checksum/redis-auth"]
    # A pilot drains its payloads when its pod is replaced: only the pilots' own credentials roll it.
    pilot = annotations({}, "-pilot")
    assert annotations({"redis": {"auth": {"password": "another-one"}}}, "-pilot") == pilot
    assert annotations({"redis": {"auth": {"pilot": {"password": "another-one"}}}}, "-pilot") != pilot


# --- the rendered store, started on this machine as its container would be ------------------------------


@dataclasses.dataclass
class RenderedStore:
    """The chart's store process (its start script, arguments and environment) on a local port."""

    objects: list[dict[str, Any]]
    env: dict[str, str]
    port: int
    directory: Path

    def client(self, url: str) -> redis.Redis:
        return redis.Redis.from_url(url.replace("pf-pilotfish-redis:6379", f"127.0.0.1:{self.port}"))

    def credentials(self, suffix: str, kind: str = "Deployment") -> Path:
        """The pod's credential files (:func:`credentials_dir`), their URLs pointed at the local port."""
        files = credentials_dir(named(self.objects, kind, suffix), self.objects, self.directory / f"pod{suffix}")
        for path in files.iterdir():
            path.write_text(path.read_text().replace("pf-pilotfish-redis:6379", f"127.0.0.1:{self.port}"))
        return files

    def url_of(self, suffix: str, variable: str = "PILOTFISH_REDIS_URL", kind: str = "Deployment") -> str:
        return urls_of(named(self.objects, kind, suffix), self.objects, self.directory / f"urls{suffix}")[
            variable
        ].replace("pf-pilotfish-redis:6379", f"127.0.0.1:{self.port}")


def server_release(binary: str) -> tuple[int, int]:
    """(major, minor) of a valkey-server or redis-server binary."""
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r" v=(\d+)\.(\d+)\.", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def start_store(
    hc: ModuleType, directory: Path, server: str, name: str, values: dict[str, Any]
) -> tuple[subprocess.Popen[str], RenderedStore]:
    """Run the rendered store's command with ``server`` on PATH as ``name`` (its data under ``directory``)."""
    from taskqueues.store.redis_server import free_port

    objects = hc.objects_of(values)
    c = container(named(objects, "StatefulSet", "-redis"))
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / name).symlink_to(server)
    (directory / "data").mkdir()
    env = {**resolved_env(c, objects), "TMPDIR": str(directory), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    port = free_port()
    args = list(c["args"])
    args[args.index("--port") + 1] = str(port)
    args[args.index("--dir") + 1] = str(directory / "data")
    process = subprocess.Popen(
        [*c["command"], *args, "--bind", "127.0.0.1"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return process, RenderedStore(objects, env, port, directory)


def wait_answering(process: subprocess.Popen[str], control: redis.Redis) -> None:
    """Until the rendered store answers ``control``'s ping; fail with its output if it exits first."""

    def answers() -> bool:
        assert process.poll() is None, process.communicate()[0]
        try:
            return bool(control.ping())
        except redis.ConnectionError:
            return False

    wait_until(answers, timeout=30, what="the rendered store to answer")


@pytest.fixture
def store(hc: ModuleType, tmp_path: Path) -> Iterator[RenderedStore]:
    from taskqueues.store.redis_server import find_redis_server

    server = find_redis_server()
    if server_release(server) < (7, 2):
        pytest.skip(f"{server} is older than Redis / Valkey 7.2")
    process, rendered = start_store(hc, tmp_path, server, "valkey-server", STORE_VALUES)
    wait_answering(process, rendered.client(rendered.url_of("-matcher")))
    yield rendered
    process.terminate()
    process.wait(timeout=30)


def test_the_rendered_store_has_exactly_the_users_taskqueues_access_makes(store: RenderedStore) -> None:
    """The server reads the chart's users file as the same users access.apply creates (compared as the
    server describes them), with the default user off and no password in the file."""
    from taskqueues.store import access

    control = store.client(store.url_of("-matcher"))
    for user, password, rules, broker in (
        (access.CONTROL_USER, "Control-pw-1", access.control_rules(), False),
        (access.pilot_user("lhcb"), "Pilot-pw-2", access.pilot_rules("site1", "lhcb", 3), True),
    ):
        access.apply(control, "made-by-access", password, rules, broker=broker, db=3)
        described = {
            line.split(" ", 2)[1]: line.split(" ", 2)[2]
            for line in (raw.decode() for raw in control.execute_command("ACL", "LIST"))
        }
        assert described[user] == described["made-by-access"]
    assert described["default"].startswith("off ")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=store.port).ping()
    users = store.directory / "users.acl"
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    assert "Control-pw-1" not in users.read_text() and "Pilot-pw-2" not in users.read_text()


def test_the_stores_probes_authenticate_without_the_password_on_the_command_line(store: RenderedStore) -> None:
    c = container(named(store.objects, "StatefulSet", "-redis"))
    if shutil.which("valkey-cli", path=store.env["PATH"]) is None and shutil.which("redis-cli") is None:
        pytest.skip("no valkey-cli or redis-cli here")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = [part.replace("-p 6379", f"-p {store.port}") for part in c[probe]["exec"]["command"]]
        assert "Control-pw-1" not in " ".join(command)
        assert subprocess.run(command, env=store.env, timeout=30).returncode == 0, probe
        wrong = {**store.env, "CONTROL_PASSWORD": "wrong"}
        assert subprocess.run(command, env=wrong, timeout=30, capture_output=True).returncode != 0, probe


def test_pilots_connect_as_their_own_user_and_pilotfish_health_works_with_it(store: RenderedStore) -> None:
    """With the pilot pod's environment as rendered: `pilotfish health --redis` and `--component pilot`
    (PING, ZSCORE and ZCOUNT on pilotseen) pass as pf-pilot-lhcb, which is refused everything else."""
    control = store.client(store.url_of("-matcher"))
    pilot_url = store.url_of("-pilot")
    assert pilot_url == store.url_of("-director", "PILOTFISH_PILOT_REDIS_URL")
    fields = {"metadata.name": "pf-pilotfish-pilot-abc", "spec.nodeName": "node-1"}
    pod_env = resolved_env(
        container(named(store.objects, "Deployment", "-pilot")), store.objects, fields, store.credentials("-pilot")
    )
    assert "PILOTFISH_REDIS_URL" not in pod_env, "the URL comes from its file (PILOTFISH_REDIS_URL_FILE)"
    env = {**os.environ, **pod_env, "PILOTFISH_STATE_DIR": str(store.directory / "state")}
    for name in ("PILOTFISH_CONFIG", "PILOTFISH_REDIS_URL", "PILOTFISH_SECRETS_FILE"):
        env.pop(name, None)

    def health(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "matcher.cli", "health", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert health("--redis").returncode == 0
    never = health("--component", "pilot")
    assert never.returncode == 1 and "never beat" in never.stderr, never.stderr
    control.zadd("site1:{lhcb}:pilotseen", {"k8s-pf-pilotfish-pilot-abc@node-1": time.time()})
    done = health("--component", "pilot")
    assert done.returncode == 0, done.stderr
    pilot = redis.Redis.from_url(pilot_url)
    control.hset("site1:{atlas}:jobs", "1", "theirs")
    for command in (
        ("FLUSHALL",),
        ("CONFIG", "GET", "*"),
        ("KEYS", "*"),
        ("HGET", "site1:{atlas}:jobs", "1"),
        ("HGET", "pf:{lhcb}:jobs", "1"),
        ("ACL", "LIST"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.execute_command(*command)
    assert control.hget("site1:{atlas}:jobs", "1") == b"theirs"


def test_the_store_runs_redis_server_when_the_image_has_no_valkey_and_refuses_one_older_than_7_2(
    hc: ModuleType, tmp_path: Path
) -> None:
    from taskqueues.store.redis_server import find_redis_server

    server = find_redis_server()
    if server_release(server) < (7, 2):
        pytest.skip(f"{server} is older than Redis / Valkey 7.2")
    process, rendered = start_store(hc, tmp_path / "new", server, "redis-server", STORE_VALUES)
    try:
        wait_answering(process, rendered.client(rendered.url_of("-matcher")))
    finally:
        process.terminate()
        process.wait(timeout=30)
    old = [path for path in (shutil.which("redis-server"),) if path and server_release(path) < (7, 2)]
    if not old:
        pytest.skip("no server older than 7.2 here to be refused")
    process, _ = start_store(hc, tmp_path / "old", old[0], "redis-server", STORE_VALUES)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "the store needs Redis >= 7.2 or Valkey >= 7.2" in output


def test_catalog_is_a_configmap_mounted_where_pilotfish_catalog_points(hc: ModuleType) -> None:
    text = '[sites.s.ces.c.queues.q]\n[[sites.s.ces.c.queues.q.shapes]]\nname = "x"\ncpu = 1\nmem = "1G"\n'
    objects = hc.objects_of({"catalog": text})
    configmap = named(objects, "ConfigMap", "-catalog")
    assert configmap["data"]["catalog.toml"] == text
    pod = named(objects, "Deployment", "-matcher")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "catalog")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "catalog")
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/pilotfish", True)
    assert volume["configMap"]["items"] == [{"key": "catalog.toml", "path": "catalog.toml"}]


# --- pilots as pods of this cluster -------------------------------------------------------------------


def pilot_resources(c: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = c["resources"]
    assert resources["requests"] == resources["limits"], "a pilot holds exactly its shape (Guaranteed QoS)"
    limits: dict[str, Any] = resources["limits"]
    return limits


def test_pilots_as_a_deployment_hold_exactly_their_shape(hc: ModuleType) -> None:
    shape = {"cpu": "8", "memory": "32G", "ephemeralStorage": "100G"}
    pilots = {"enabled": True, "kind": "Deployment", "replicas": 7, "queue": "A/B/C", "resources": shape}
    objects = hc.objects_of({"pilots": pilots})
    assert not by_kind(objects, "Job")
    deployment = named(objects, "Deployment", "-pilot")
    assert deployment["spec"]["replicas"] == 7
    c = container(deployment)
    assert c["args"] == ["pilot", "--queue", "A/B/C"]
    assert pilot_resources(c) == {"cpu": "8", "memory": "32G", "ephemeral-storage": "100G"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    assert pod["terminationGracePeriodSeconds"] == 600
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["emptyDir"]["sizeLimit"] == "100G"


def test_pilots_as_a_job_run_in_parallel_and_never_restart_in_place(hc: ModuleType) -> None:
    job_values = {"parallelism": 3, "completions": 9, "activeDeadlineSeconds": 7200}
    objects = hc.objects_of({"pilots": {"enabled": True, "kind": "Job", "job": job_values}})
    assert not [d for d in by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-pilot")]
    (job,) = by_kind(objects, "Job")
    assert job["metadata"]["name"] == "pf-pilotfish-pilot-r1"
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 9)
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "selector" not in job["spec"], "Kubernetes generates a Job's selector"
    assert pilot_resources(container(job)) == {"cpu": "1", "memory": "2G", "ephemeral-storage": "10G"}
    upgraded = hc.load_chart().render(
        {"pilots": {"enabled": True, "kind": "Job"}}, name="pf", namespace="pilotfish", revision=4, is_upgrade=True
    )
    assert "name: pf-pilotfish-pilot-r4" in upgraded["pilotfish/templates/pilots-job.yaml"]


def test_the_default_catalog_loads_and_holds_the_default_pilot_shape(hc: ModuleType) -> None:
    """The chart's default catalog is read by taskqueues.catalog, and its queue's shape is what the
    default pilot pods request (1000-based units in both: "2G" is 2000 MB and 2*10^9 bytes)."""
    import yaml

    from taskqueues.catalog import Catalog

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    catalog = Catalog.loads(values["catalog"], source="helm/pilotfish/values.yaml: catalog")
    queue = catalog.queue(values["pilots"]["queue"])
    (shape,) = queue.shapes
    wanted = values["pilots"]["resources"]
    assert (shape.cpu, shape.mem, shape.tmp) == (
        int(wanted["cpu"]),
        _mega(wanted["memory"]),
        _mega(wanted["ephemeralStorage"]),
    )


def _mega(quantity: str) -> int:
    units = {"M": 1, "G": 1000, "T": 1000_000}
    return int(quantity[:-1]) * units[quantity[-1]]


def test_schema_is_strict_at_every_level(hc: ModuleType) -> None:
    """Every object of values.schema.json with properties refuses unknown keys, except free-form maps."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    free_form = {
        "global",
        "commonLabels",
        "podSecurityContext",
        "containerSecurityContext",
        "podAnnotations",
        "nodeSelector",
        "affinity",
        "annotations",
    }

    def walk(node: Any, path: str) -> Iterator[str]:
        if isinstance(node, dict):
            open_object = "properties" in node and node.get("additionalProperties") is not False
            if open_object and path.rsplit("/", 1)[-1] not in free_form and "/items" not in path:
                yield path
            for key, child in node.items():
                yield from walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                yield from walk(child, f"{path}/{index}")

    assert [p for p in walk(schema, "") if "/allOf" not in p] == []


# --- the Dockerfile (not built here: no Docker engine) ------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    start = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[start:]


def test_dockerfile_is_python_311_slim_and_runs_the_cli_as_user_10001() -> None:
    instructions = dockerfile_instructions()
    bases = [rest.split()[0] for word, rest in instructions if word == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)
    final = final_stage(instructions)
    users = [rest for word, rest in final if word == "USER"]
    assert users == ["10001:10001"]
    user_at = next(i for i, (word, _) in enumerate(final) if word == "USER")
    assert all(word != "RUN" for word, _ in final[user_at:]), "nothing may run as root after USER"
    assert "--uid 10001" in " ".join(rest for word, rest in final if word == "RUN")
    (entrypoint,) = [json.loads(rest) for word, rest in final if word == "ENTRYPOINT"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["pilotfish"] and "pilotfish" in scripts
    assert any(word == "RUN" and "flower" in rest for word, rest in final), "the chart runs Flower from it"


def copied_sources() -> list[str]:
    """The build-context paths the Dockerfile's COPY lines take (not those copied between stages)."""
    sources: list[str] = []
    for word, rest in dockerfile_instructions():
        if word == "COPY" and "--from=" not in rest:
            *paths, _destination = shlex.split(rest)
            sources += [p.rstrip("/") for p in paths]
    return sources


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides; `!` re-includes."""
    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        regex_pattern = pattern.replace("**/", "*")
        if any(fnmatch.fnmatchcase(prefix, regex_pattern) for prefix in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        ):
            ignored = not negate
    return ignored


def test_dockerfile_copies_everything_pyproject_needs_and_dockerignore_keeps_it() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    sources = copied_sources()
    needed = {"pyproject.toml", pyproject["project"]["readme"]}
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in REPO.iterdir()
        if (p / "__init__.py").exists() and any(fnmatch.fnmatchcase(p.name, pattern) for pattern in includes)
    }
    assert packages == {"taskqueues", "matcher", "pilot"}
    assert needed | packages <= set(sources), f"COPY takes {sources}"
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for source in sources:
        assert not dockerignored(source, patterns), f".dockerignore drops {source}, which COPY takes"
    for package in packages:
        for file in (REPO / package).rglob("*"):
            relative = file.relative_to(REPO).as_posix()
            if file.is_file() and "__pycache__" not in relative:
                assert not dockerignored(relative, patterns), f".dockerignore drops {relative}"
    assert dockerignored("tests/test_helm.py", patterns)
    assert dockerignored("helm/pilotfish/Chart.yaml", patterns)
    assert dockerignored("taskqueues/__pycache__/x.cpython-311.pyc", patterns)


def test_every_file_the_dockerfile_copies_exists() -> None:
    missing = [source for source in copied_sources() if not (REPO / source).exists()]
    assert missing == [], f"`docker build` would stop at COPY: {missing} not in the repository"


def test_the_files_the_dockerfile_copies_build_a_complete_wheel(tmp_path: Path) -> None:
    """Build the wheel from a copy of exactly the Dockerfile's COPY sources, as its build stage does
    (setuptools comes from PyPI into pip's isolated build environment, as in the image build)."""
    import shutil

    context = tmp_path / "context"
    context.mkdir()
    for source in copied_sources():
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
        elif origin.exists():
            shutil.copy2(origin, context / source)
        else:
            # README.md is written by the lead; an empty one stands in so the build reads what exists.
            (context / source).write_text("")
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--wheel-dir",
        str(tmp_path / "wheels"),
        str(context),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheels").glob("pilotfish-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("taskqueues", "matcher", "pilot"):
        sources = {p.relative_to(REPO).as_posix() for p in (REPO / package).rglob("*.py")}
        assert sources <= names, f"missing from the wheel: {sorted(sources - names)[:5]}"
    lua = {p.relative_to(REPO).as_posix() for p in (REPO / "taskqueues" / "lua").glob("*.lua")}
    assert lua <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pilotfish = matcher.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def flower_broker(pod: dict[str, Any], objects: list[dict[str, Any]], directory: Path) -> str:
    """The broker URL Flower's Celery settings (``celery --config matcher.app.flower_config``) hold in the pod's
    environment and credential files, in a process of its own as Flower's."""
    env = resolved_env(container(pod), objects, None, credentials_dir(pod, objects, directory))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PILOTFISH_", "CELERY_"))}
    done = subprocess.run(
        [sys.executable, "-c", "from matcher.app import flower_config as f; print(f.broker_url)"],
        env={**clean, **env},
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cluster_store_keeps_celerys_broker_apart(hc: ModuleType, tmp_path: Path) -> None:
    """A Redis Cluster store: every control-plane process reads the broker's URL from a Secret of its own,
    Flower watches that broker, pilots send their events with the pilots' broker URL, and no object holds a
    password outside a Secret."""
    values = hc.VARIANTS["external-redis-cluster"]
    objects = hc.objects_of(values)
    ext = values["externalRedis"]
    assert secret_value(objects, "-broker", "broker-url") == ext["broker"]["url"]
    assert secret_value(objects, "-broker-pilot", "broker-url") == ext["broker"]["pilot"]["url"]
    assert secret_value(objects, "-external-redis", "redis-url") == ext["url"]
    for suffix in ("-matcher", "-beat", "-flower", "-director"):
        pod = named(objects, "Deployment", suffix)
        assert ("pf-pilotfish-broker", "broker-url", "broker_url") in projected(pod), suffix
        assert urls_of(pod, objects, tmp_path / suffix)["PILOTFISH_BROKER_URL"] == ext["broker"]["url"], suffix
        assert env_of(container(pod))["PILOTFISH_REDIS_SENTINEL_MASTER"]["value"] == "broker"
    assert flower_broker(named(objects, "Deployment", "-flower"), objects, tmp_path / "f") == ext["broker"]["url"]
    director = named(objects, "Deployment", "-director")
    pilot = named(objects, "Deployment", "-pilot")
    for pod, path in ((director, "pilot_broker_url"), (pilot, "broker_url")):
        assert ("pf-pilotfish-broker-pilot", "broker-url", path) in projected(pod)
    assert "pf-pilotfish-broker" not in {secret for secret, _, _ in projected(pilot)}
    assert urls_of(pilot, objects, tmp_path / "p")["PILOTFISH_BROKER_URL"] == ext["broker"]["pilot"]["url"]
    for password in ("s3cret", "p1lot", "b40ker", "b1lot"):
        assert hc.secret_leaks(objects, password) == []
    notes = hc.render(values)["pilotfish/templates/NOTES.txt"]
    assert "A Redis Cluster: one community per slot" in notes and "Secret pf-pilotfish-broker (key broker-url)" in notes
    assert "BROKER CREDENTIALS" not in notes
    # Without the pilots' broker URL, the director hands pilots the control plane's: the notes say so.
    alone = {**values, "externalRedis": {**ext, "broker": {"url": ext["broker"]["url"]}}}
    assert "THE\nCONTROL PLANE'S BROKER CREDENTIALS" in hc.render(alone)["pilotfish/templates/NOTES.txt"]
    # Without a broker apart, Flower watches the store's Redis as before.
    plain = hc.objects_of({})
    store = urls_of(named(plain, "Deployment", "-flower"), plain, tmp_path / "plain")["PILOTFISH_REDIS_URL"]
    assert flower_broker(named(plain, "Deployment", "-flower"), plain, tmp_path / "plain-f") == store
    assert "PILOTFISH_BROKER_URL_FILE" not in env_of(container(named(plain, "Deployment", "-matcher")))


def test_pilot_pods_get_the_payload_sandbox_setting(hc: ModuleType) -> None:
    """pilots.payloadSandbox reaches the pilot pods as PILOTFISH_PAYLOAD_SANDBOX (bwrap unless set)."""
    for value, expected in ((None, "bwrap"), ("none", "none")):
        pilots: dict[str, object] = {"enabled": True, "kind": "Deployment"}
        if value is not None:
            pilots["payloadSandbox"] = value
        env = env_of(container(named(hc.objects_of({"pilots": pilots}), "Deployment", "-pilot")))
        assert env["PILOTFISH_PAYLOAD_SANDBOX"]["value"] == expected
