"""PATCH /api/v1/clusters/{id}/: a platform admin sets a cluster's monitoring; bad input is a 400
naming the field; the change is audited and the alert rules' move is pushed."""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from clusters.models import Cluster, ClusterPush
from tests.conftest import World


def patch(world: World, persona: str, body: dict[str, Any]) -> Any:
    return world.client(persona).patch(f"/api/v1/clusters/{world.cluster.pk}/", body, format="json")


def test_a_platform_admin_sets_the_monitoring_and_the_rule_push_is_queued(world: World) -> None:
    response = patch(world, "platform", {
        "prometheus_url": "http://prometheus.monitoring:9090", "prometheus_rule_namespace": "monitoring",
        "prometheus_rule_labels": {"release": "kube-prometheus-stack"},
    })  # fmt: skip
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["prometheus_url"] == "http://prometheus.monitoring:9090"
    assert body["prometheus_rule_namespace"] == "monitoring"
    assert body["prometheus_rule_labels"] == {"release": "kube-prometheus-stack"}
    event = AuditEvent.objects.filter(action="cluster.updated").order_by("-seq").first()
    assert event is not None and event.actor_username == "platform"
    assert '"prometheus_rule_namespace":"monitoring"' in event.record.replace(" ", "")
    # The push of the cluster-wide objects was queued in the same transaction (delivered at once
    # on the embedded default, so it may be done already).
    assert ClusterPush.objects.filter(cluster=world.cluster, project=None).count() == 1


def test_a_display_name_change_pushes_nothing_and_an_unchanged_body_audits_nothing(world: World) -> None:
    assert patch(world, "platform", {"display_name": "GPU cluster A"}).status_code == 200
    assert not ClusterPush.objects.filter(cluster=world.cluster).exists()
    head = AuditEvent.objects.count()
    assert patch(world, "platform", {"display_name": "GPU cluster A"}).status_code == 200
    assert AuditEvent.objects.count() == head


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prometheus_url": "ftp://prometheus:9090"}, "prometheus_url"),
        ({"prometheus_url": "not a url"}, "prometheus_url"),
        ({"prometheus_rule_namespace": "Not_A_Namespace"}, "prometheus_rule_namespace"),
        ({"prometheus_rule_labels": {"bad key!": "x"}}, "prometheus_rule_labels"),
        ({"prometheus_rule_labels": {"release": "has spaces"}}, "prometheus_rule_labels"),
        ({"prometheus_rule_labels": {"app.kubernetes.io/managed-by": "me"}}, "prometheus_rule_labels"),
        ({"prometheus_rule_labels": {f"k{i}": "v" for i in range(17)}}, "prometheus_rule_labels"),
        ({"use_hami": "maybe"}, "use_hami"),
        ({"use_volcano": [True]}, "use_volcano"),
        ({"sharing_reserve_percent": 91}, "sharing_reserve_percent"),
        ({"sharing_reserve_percent": -1}, "sharing_reserve_percent"),
        ({"sharing_reserve_per_unit_mib": 65537}, "sharing_reserve_per_unit_mib"),
        ({"driver": "kubernetes"}, "driver"),
    ],
)
def test_bad_settings_are_refused_naming_the_field_and_nothing_changes(world: World, body: dict[str, Any], field: str) -> None:
    response = patch(world, "platform", body)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    cluster = Cluster.objects.get(pk=world.cluster.pk)
    assert (cluster.prometheus_url, cluster.prometheus_rule_namespace, cluster.use_hami) == ("", "", False)


def test_only_platform_admins_change_a_cluster_and_outsiders_do_not_see_it(world: World) -> None:
    assert patch(world, "nlp_admin", {"display_name": "x"}).status_code == 403
    assert patch(world, "nobody", {"display_name": "x"}).status_code == 404
    assert Cluster.objects.get(pk=world.cluster.pk).display_name == ""
