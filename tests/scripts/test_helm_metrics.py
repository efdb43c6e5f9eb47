"""The chart's metrics Deployment, Service and ServiceMonitor, its NetworkPolicies and the matcher workers'
PodDisruptionBudget, rendered by the real Helm (the ``hc`` fixture of tests/test_helm.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.matcher.test_metrics import free_port, scrape
from tests.scripts.test_helm import REPO, by_kind, container, hc, named
from tests.support.polling import wait_until

__all__ = ["hc"]  # the fixture, imported for pytest


def test_metrics_are_off_by_default_and_the_policies_and_budget_are_on(hc: ModuleType) -> None:
    objects = hc.objects_of({})
    assert not [o for o in objects if o["metadata"]["name"].endswith("-metrics")]
    assert not by_kind(objects, "ServiceMonitor")
    assert {o["metadata"]["name"] for o in by_kind(objects, "NetworkPolicy")} == {
        "pf-pilotfish-redis",
        "pf-pilotfish-flower",
    }
    budget = named(objects, "PodDisruptionBudget", "-matcher")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "matcher"
    assert not by_kind(
        hc.objects_of(
            {
                "networkPolicy": {"enabled": False},
                "matcher": {"podDisruptionBudget": {"enabled": False, "maxUnavailable": 1}},
            }
        ),
        "NetworkPolicy",
    )


def test_the_metrics_deployment_serves_on_its_service_and_a_service_monitor_scrapes_it(hc: ModuleType) -> None:
    objects = hc.objects_of({"metrics": {"enabled": True}})
    c = container(named(objects, "Deployment", "-metrics"))
    assert c["args"] == ["metrics", "--serve", "9464", "--address", "0.0.0.0"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    service = named(objects, "Service", "-metrics")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]
    assert not by_kind(objects, "ServiceMonitor"), "a ServiceMonitor only when asked for"

    objects = hc.objects_of(
        {"metrics": {"enabled": True, "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    [monitor] = by_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["pilotfish"]}
    assert not hc.selection_problems(objects)


def test_only_the_releases_pods_reach_the_store_and_only_the_ingress_reaches_flower(hc: ModuleType) -> None:
    everything = {"metrics": {"enabled": True}, "pilots": {"enabled": True}, "director": {"enabled": True}}
    objects = hc.objects_of(everything)
    assert not hc.selection_problems(objects)
    store = named(objects, "NetworkPolicy", "-redis")
    assert store["spec"]["ingress"][0]["ports"] == [{"port": "redis", "protocol": "TCP"}]
    flower = named(objects, "NetworkPolicy", "-flower")
    assert flower["spec"]["ingress"] == [], "without an Ingress, Flower is reached by port-forward only"

    with_ingress = hc.objects_of({**everything, "flower": {"ingress": {"enabled": True}}})
    [rule] = named(with_ingress, "NetworkPolicy", "-flower")["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]

    farm = {"ipBlock": {"cidr": "10.1.0.0/16"}}
    store = named(
        hc.objects_of({"networkPolicy": {"enabled": True, "redisFrom": [farm], "flowerFrom": []}}),
        "NetworkPolicy",
        "-redis",
    )
    assert store["spec"]["ingress"][0]["from"][1:] == [farm]

    # The check finds a policy that would shut a component out, and a budget that selects nothing.
    named(objects, "NetworkPolicy", "-redis")["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][
        "app.kubernetes.io/component"
    ] = "matcher"
    named(objects, "PodDisruptionBudget", "-matcher")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "x"
    problems = hc.selection_problems(objects)
    assert any("cannot reach the store" in p and "pf-pilotfish-beat" in p for p in problems), problems
    assert any(p.startswith("PodDisruptionBudget/pf-pilotfish-matcher: selects []") for p in problems), problems


def test_the_rendered_metrics_command_serves_a_real_store(hc: ModuleType, redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    c = container(named(hc.objects_of({"metrics": {"enabled": True, "port": port}}), "Deployment", "-metrics"))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_STATE_DIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "matcher.cli", *c["args"]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        samples = wait_until(
            lambda: scrape(f"http://127.0.0.1:{port}/metrics"), timeout=30, what="the rendered metrics server"
        )
        assert samples["pilotfish_store_up", frozenset()] == 1
    finally:
        proc.terminate()
        proc.wait(10)
