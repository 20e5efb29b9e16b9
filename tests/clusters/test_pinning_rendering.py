"""What pins a project's pods to its bookings, as rendered: node labels, the Namespace's booked
nodes and GPUs, and the admission policies (their behaviour is proved on the real API server in
test_kube_pinning.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from allocations.models import Flavor, Quota, SharingMode
from clusters.models import Gpu, Node, NodeSharing
from delivery import selectors
from delivery.node_configs import NodePlan, render_node_labels
from delivery.pinning import MPS_TENANT_LABEL, POLICY_NAME, pool_label, render_pool_policies
from delivery.rendering import (
    BOOKED_GPUS_ANNOTATION,
    BOOKED_NODES_ANNOTATION,
    PINNED_LABEL,
    ProjectState,
    render_namespace,
)
from delivery.services import cluster_scope
from tests.conftest import H100, World
from tests.foundation.test_sharing_rules import grant


def state(**changes: Any) -> ProjectState:
    return dataclasses.replace(
        ProjectState(cluster="c", namespace="nlp-llm", department="nlp", project="nlp-llm", grants=()), **changes
    )


def test_a_pinned_namespace_lists_its_booked_nodes_and_gpus_and_an_unpinned_one_says_nothing() -> None:
    pinned = render_namespace(state(pinned=True, booked_nodes=("n1", "n2"), booked_gpus=("GPU-a",)))
    assert pinned["metadata"]["labels"][PINNED_LABEL] == "true"
    assert pinned["metadata"]["annotations"] == {BOOKED_NODES_ANNOTATION: "n1,n2", BOOKED_GPUS_ANNOTATION: "GPU-a"}
    nowhere = render_namespace(state(pinned=True))
    assert nowhere["metadata"]["annotations"] == {BOOKED_NODES_ANNOTATION: ""}
    plain = render_namespace(state(booked_nodes=("n1",)))
    assert PINNED_LABEL not in plain["metadata"]["labels"] and plain["metadata"]["annotations"] == {}


def test_node_labels_name_the_pools_booked_there_and_the_mps_tenant() -> None:
    plan = NodePlan(name="n1", gpu_model=H100, gpu_count=8, sharing="mps", replicas=4, pools=("a", "b"), mps_tenant="nlp")
    labels = render_node_labels(plan)["metadata"]["labels"]
    assert labels[pool_label("a")] == labels[pool_label("b")] == "booked"
    assert labels[MPS_TENANT_LABEL] == "nlp"


def test_the_policies_match_only_pinned_portal_namespaces_and_gpu_pinning_only_under_hami() -> None:
    objects = render_pool_policies(hami=False)
    assert [obj["kind"] for obj in objects] == [
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]
    assert all(obj["metadata"]["name"] == POLICY_NAME for obj in objects)
    for binding in (objects[1], objects[3]):
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
            "app.kubernetes.io/managed-by": "gpuportal", PINNED_LABEL: "true",
        }
    assert set(objects[2]["spec"]["matchConstraints"]["resourceRules"][0]["resources"]) == {"pods", "pods/binding", "bindings"}
    assert len(objects[0]["spec"]["mutations"]) == 1
    assert len(render_pool_policies(hami=True)[0]["spec"]["mutations"]) == 2


@pytest.mark.django_db
def test_the_desired_state_follows_the_live_bookings(world: World) -> None:
    Node.objects.filter(name="h100-0").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    Flavor.objects.filter(pk=world.mps.pk).update(cpu_millicores_per_unit=2000, memory_mib_per_unit=16384)
    world.mps.refresh_from_db()
    grant(world, flavor=world.mps, department="nlp")
    (llm,) = selectors.project_states_on_cluster(cluster=world.cluster, project_ids=[world.llm.pk])
    assert llm.pinned and llm.booked_nodes == ("h100-0",) and llm.booked_gpus == ()
    plans = {plan.name: plan for plan in selectors.node_plans(cluster=world.cluster)}
    assert plans["h100-0"].pools == (world.llm.slug,) and plans["h100-0"].mps_tenant == "nlp"
    assert {obj["kind"] for obj in cluster_scope(cluster=world.cluster).objects} >= {"ValidatingAdmissionPolicy"}
    world.cluster.pin_bookings = False
    world.cluster.save()
    (llm,) = selectors.project_states_on_cluster(cluster=world.cluster, project_ids=[world.llm.pk])
    assert not llm.pinned
    assert "ValidatingAdmissionPolicy" not in {obj["kind"] for obj in cluster_scope(cluster=world.cluster).objects}
    assert selectors.node_plans(cluster=world.cluster)[0].pools == ()


@pytest.mark.django_db
def test_hami_gpus_are_pinned_only_when_every_booked_gpu_has_a_uuid(world: World) -> None:
    world.cluster.use_hami = True
    world.cluster.save()
    vgpu = Flavor.objects.create(
        name="h100-vgpu", display_name="vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU, resource_name="nvidia.com/gpu",
        memory_mib=10240, compute_percent=30, gpu_equivalents="0.3", cpu_millicores_per_unit=2000, memory_mib_per_unit=16384,
    )
    Quota.objects.create(department=world.nlp, flavor=vgpu, guaranteed=0, limit=8)
    allocation = grant(world, flavor=vgpu, department="nlp", quantity=4)
    booked = sorted({(row.node_id, index) for row in allocation.reservations.all() for index in row.gpu_indices})
    assert selectors.project_bookings(cluster=world.cluster, project_ids=[world.llm.pk])[world.llm.pk][1] == ()
    for node_id, index in booked:
        Gpu.objects.filter(node_id=node_id, index=index).update(uuid=f"GPU-{index}")
    nodes, gpus = selectors.project_bookings(cluster=world.cluster, project_ids=[world.llm.pk])[world.llm.pk]
    assert gpus == tuple(sorted({f"GPU-{index}" for _, index in booked})) and nodes == ("h100-0",)


@pytest.mark.django_db
def test_the_manifests_api_shows_a_projects_limits_and_pinning_and_the_cluster_wide_policies(world: World) -> None:
    grant(world, flavor=world.h100, department="vision")
    url = f"/api/v1/clusters/{world.cluster.pk}/manifests/"
    project = world.client("vision_member").get(url, {"project": world.seg.pk})
    assert project.status_code == 200, project.content
    objects = {obj["kind"]: obj for obj in project.json()["objects"]}
    assert objects["Namespace"]["metadata"]["annotations"] == {BOOKED_NODES_ANNOTATION: "h100-0"}
    assert set(objects["LimitRange"]["spec"]["limits"][0]) >= {"default", "defaultRequest", "max"}
    assert world.client("nlp_member").get(url, {"project": world.seg.pk}).status_code == 404
    assert world.client("vision_member").get(url).status_code == 403
    cluster_wide = world.client("auditor").get(url)
    assert cluster_wide.status_code == 200
    assert POLICY_NAME in {obj["metadata"]["name"] for obj in cluster_wide.json()["objects"]
                           if obj["kind"] == "ValidatingAdmissionPolicy"}
    bad = world.client("platform").get(url, {"project": "x"})
    assert bad.status_code == 400 and "project" in bad.json()["error"]["fields"]
