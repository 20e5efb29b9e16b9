"""The PrometheusRule on the real API server: pushed where the cluster runs the Prometheus Operator,
repaired when edited, removed when the cluster stops asking for it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from delivery.alert_rules import RULE_NAME
from delivery.services import cluster_sync, cluster_sync_shared
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

GROUP, VERSION, PLURAL = "monitoring.coreos.com", "v1", "prometheusrules"


def _prometheus_rule_crd(kube_cluster: Any) -> None:
    """The Prometheus Operator's PrometheusRule kind (schema left open: no operator runs here)."""
    body = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "prometheusrule", "kind": "PrometheusRule",
                      "listKind": "PrometheusRuleList"},
            "versions": [{"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
    from kube_testenv import wait_for

    with kube_cluster.api_client() as api:
        extensions = client.ApiextensionsV1Api(api)
        try:
            extensions.create_custom_resource_definition(body)
        except client.ApiException as error:
            if error.status != 409:
                raise

        def established() -> bool:
            crd = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(established, timeout=30, what="the PrometheusRule CRD to be established")
        objects = client.CustomObjectsApi(api)

        def served() -> bool:  # the API server answers 429 while the new kind's storage starts
            try:
                objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            except client.ApiException as error:
                if error.status == 429:
                    return False
                raise
            return True

        wait_for(served, timeout=30, what="the PrometheusRule kind to be served")


def _namespace(core: Any, name: str) -> None:
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except client.ApiException as error:
        if error.status != 409:
            raise


def _rule(kube_cluster: Any, namespace: str) -> dict[str, Any] | None:
    with kube_cluster.api_client() as api:
        objects = client.CustomObjectsApi(api)
        try:
            found: dict[str, Any] = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, RULE_NAME)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
    return found


def test_the_alert_rules_reach_a_cluster_that_asks_for_them_and_leave_when_it_stops(
    kube_world: World, core: Any, kube_cluster: Any
) -> None:
    _prometheus_rule_crd(kube_cluster)
    _namespace(core, "monitoring")
    cluster = kube_world.cluster
    cluster_sync_shared(cluster_id=cluster.pk)
    assert _rule(kube_cluster, "monitoring") is None  # not asked for: nothing pushed

    cluster.prometheus_rule_namespace = "monitoring"
    cluster.prometheus_rule_labels = {"release": "kube-prometheus-stack"}
    cluster.save(update_fields=["prometheus_rule_namespace", "prometheus_rule_labels"])
    cluster_sync_shared(cluster_id=cluster.pk)
    rule = _rule(kube_cluster, "monitoring")
    assert rule is not None
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuportal"
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}
    assert {"GPUOverload", "VGPUQuotaExhausted", "AuditCheckpointStale"} <= alerts

    # Edited by hand: the drift check puts it back.
    with kube_cluster.api_client() as api:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, "monitoring", PLURAL, RULE_NAME, {"spec": {"groups": []}}
        )
    cluster_sync(cluster_id=cluster.pk, repair_drift=True)
    repaired = _rule(kube_cluster, "monitoring")
    assert repaired is not None and repaired["spec"]["groups"] == rule["spec"]["groups"]

    cluster.prometheus_rule_namespace = ""
    cluster.save(update_fields=["prometheus_rule_namespace"])
    cluster_sync_shared(cluster_id=cluster.pk)
    assert _rule(kube_cluster, "monitoring") is None
