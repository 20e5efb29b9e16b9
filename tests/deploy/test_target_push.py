"""The target chart installed by helm on the real API server: the portal's push, with a token of the chart's
ServiceAccount, creates a full tenant (namespace, quotas, limit range, role bindings, network
policy, priority classes, the tenant pools' admission policies, Volcano's queue and configuration,
the alert rule, node configurations and labels, evictions beyond a lowered quota), while that
identity is refused what the portal never needs: Secrets, Pods, binding cluster-admin, and, by the
chart's ValidatingAdmissionPolicy, anything that is not the portal's own."""

from __future__ import annotations

import datetime
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from django.utils import timezone

from allocations.grants import services as allocation_services
from allocations.models import Allocation, Flavor, PlacementPolicy, SharingMode
from clusters.models import Cluster
from delivery.drivers import driver_for
from delivery.services import cluster_sync
from tests.clusters.conftest import operator_namespace, unique_projects, use_kubeconfig
from tests.conftest import H100, World, build_world
from tests.deploy.charts import TARGET, finished, helm_against

if TYPE_CHECKING:
    from kube_testenv.cluster import KubeTestCluster

pytestmark = pytest.mark.django_db(transaction=True)

MANAGED = {"app.kubernetes.io/managed-by": "gpuportal"}


@dataclass(frozen=True)
class Target:
    namespace: str
    username: str
    kubeconfig: str
    api: Any  # a kubernetes.client.ApiClient authenticated by the ServiceAccount's token


def _crd(kube_cluster: KubeTestCluster, *, group: str, kind: str, plural: str, version: str, scope: str) -> None:
    """A CRD with an open schema, as the operator that owns the kind would register it."""
    from kubernetes import client

    from kube_testenv import wait_for

    body = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": scope,
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                 "versions": [{"name": version, "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }  # fmt: skip
    with kube_cluster.api_client() as api:
        extensions, objects = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
        try:
            extensions.create_custom_resource_definition(body)
        except client.ApiException as error:
            if error.status != 409:
                raise

        def served() -> bool:
            try:
                objects.list_cluster_custom_object(group, version, plural)
            except client.ApiException as error:
                if error.status in (404, 429, 503):
                    return False
                raise
            return True

        wait_for(served, timeout=30, what=f"the {kind} kind to be served")


def _namespace(core: Any, name: str, **metadata: Any) -> None:
    from kubernetes import client

    try:
        core.create_namespace({"metadata": {"name": name, **metadata}})
    except client.ApiException as error:
        if error.status != 409:
            raise


def _notes_kubeconfig(kube_cluster: KubeTestCluster, *, notes: str, release: str, workdir: Path) -> str:
    """The kubeconfig made by running the commands the chart's NOTES.txt prints, as an operator
    would (with the cluster admin's kubeconfig and the pinned kubectl)."""
    lines = notes.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("SERVER="))
    end = next(i for i, line in enumerate(lines) if line == "KUBECONFIG" and i > start)
    script = "\n".join(["set -euo pipefail", *lines[start:end + 1]]) + "\n"
    env = {"PATH": f"{kube_cluster.binaries.kubectl.parent}:{os.environ['PATH']}", "KUBECONFIG": str(kube_cluster.kubeconfig)}
    result = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return (workdir / f"gpuportal-{release}.kubeconfig").read_text()


@pytest.fixture(scope="module")
def target(kube_cluster: KubeTestCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The target chart installed by helm (every feature on), as an operator installs it."""
    from kubernetes import client, config

    suffix = uuid.uuid4().hex[:6]
    namespace, release = f"gpuportal-target-{suffix}", f"tgt-{suffix}"
    home = tmp_path_factory.mktemp("helm")
    output = finished(helm_against(kube_cluster.kubeconfig, home, "install", release, str(TARGET), "--namespace",
                                   namespace, "--create-namespace", "--values", str(TARGET / "ci" / "default-values.yaml"),
                                   "--set", "features.volcano=true", "--set", "features.prometheusRules=true"))
    name = f"{release}-gpu-portal-target"
    kubeconfig = _notes_kubeconfig(kube_cluster, notes=output, release=release, workdir=home)
    configuration = client.Configuration()
    config.load_kube_config_from_dict(yaml.safe_load(kubeconfig), client_configuration=configuration,
                                      persist_config=False)
    with client.ApiClient(configuration) as api:
        yield Target(namespace=namespace, username=f"system:serviceaccount:{namespace}:{name}", kubeconfig=kubeconfig,
                     api=api)
    finished(helm_against(kube_cluster.kubeconfig, home, "uninstall", release, "--namespace", namespace))
    kube_cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


@pytest.fixture
def tenant_world(transactional_db: None, kube_cluster: KubeTestCluster, target: Target, fake_gpu_nodes: Any) -> World:
    """The World's cluster with every feature the push has (the tenant pools, HAMi, Volcano, the
    alert rule, node configurations on real Node objects), reached through the chart's ServiceAccount."""
    from kubernetes import client

    from kube_testenv.gpu_nodes import GPUNodeSpec

    world = build_world()
    unique_projects(world)
    operator_namespace(kube_cluster)
    _crd(kube_cluster, group="scheduling.volcano.sh", kind="Queue", plural="queues", version="v1beta1", scope="Cluster")
    _crd(kube_cluster, group="monitoring.coreos.com", kind="PrometheusRule", plural="prometheusrules", version="v1",
         scope="Namespaced")
    with kube_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        for name in ("volcano-system", "monitoring"):
            _namespace(core, name)
        try:  # as the Volcano chart creates it: the portal then takes its content over
            core.create_namespaced_config_map("volcano-system", {"metadata": {"name": "volcano-scheduler-configmap"},
                                                                 "data": {"volcano-scheduler.conf": "actions: allocate"}})
        except client.ApiException as error:
            if error.status != 409:
                raise
    for node in ("a100-0", "a100-1", "h100-0"):
        fake_gpu_nodes.add(GPUNodeSpec(node, gpus=8))
    Cluster.objects.filter(pk=world.cluster.pk).update(use_volcano=True, prometheus_rule_namespace="monitoring")
    use_kubeconfig(world.cluster, target.kubeconfig)
    world.cluster.refresh_from_db()
    world.mps = Flavor.objects.create(
        name="h100-vgpu", display_name="H100 Volcano vGPU", gpu_model=H100, sharing_mode=SharingMode.VOLCANO_VGPU,
        resource_name="volcano.sh/vgpu-number", memory_mib=20480, compute_percent=25,
        gpu_equivalents=Decimal("0.25"), placement_policy=PlacementPolicy.SPREAD,
    )
    return world


def _grant(world: World, *, quantity: int, flavor: str = "a100") -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=getattr(world, flavor), quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7),
        justification="chart proof",
    )
    allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def _status(call: Any) -> int:
    from kubernetes import client

    with pytest.raises(client.ApiException) as refused:
        call()
    return int(refused.value.status)


def test_the_portal_pushes_a_full_tenant_as_the_target_charts_service_account(
    tenant_world: World, kube_cluster: KubeTestCluster, target: Target
) -> None:
    from kubernetes import client

    world = tenant_world
    # Each approval pushes (delivery.outbox, in-process here) through the ServiceAccount's kubeconfig.
    first, mig, vgpu = _grant(world, quantity=2), _grant(world, quantity=1, flavor="mig"), _grant(world, quantity=2, flavor="mps")
    assert [first.state, mig.state, vgpu.state] == ["active"] * 3
    plan, _ = cluster_sync(cluster_id=world.cluster.pk)
    assert plan.is_empty  # everything landed: a full resync as that identity finds nothing left to do
    world.cluster.refresh_from_db()
    assert world.cluster.last_sync_error == ""

    namespace = world.llm.slug
    with kube_cluster.api_client() as api:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        assert core.read_namespace(namespace).metadata.labels["gpuportal.io/pinned"] == "true"
        quotas = {q.metadata.name for q in core.list_namespaced_resource_quota(namespace).items}
        assert {"gpuportal-gpu-quota", "gpuportal-priority-gpu-standard", "gpuportal-priority-other"} <= quotas
        assert core.read_namespaced_limit_range("gpuportal-defaults", namespace)
        assert {b.role_ref.name for b in rbac.list_namespaced_role_binding(namespace).items} == {"edit", "view", "gpuportal-evictor"}
        evictor = rbac.read_namespaced_role_binding("gpuportal-evictor", namespace)  # the portal's own rights on pods
        assert [(s.kind, s.namespace, s.name) for s in evictor.subjects] == [("ServiceAccount", *target.username.split(":")[2:])]
        assert client.NetworkingV1Api(api).read_namespaced_network_policy("gpuportal-tenant-isolation", namespace)
        assert client.SchedulingV1Api(api).read_priority_class("gpu-standard").value == 1000
        admission = client.AdmissionregistrationV1Api(api)
        assert admission.read_validating_admission_policy("gpuportal-tenant-pools")
        objects = client.CustomObjectsApi(api)
        assert objects.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "gpuportal-nlp")
        assert objects.get_namespaced_custom_object("monitoring.coreos.com", "v1", "monitoring", "prometheusrules",
                                                    "gpuportal-alerts")
        scheduler = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system")
        assert scheduler.metadata.labels["app.kubernetes.io/managed-by"] == "gpuportal"  # taken over
        assert core.read_namespaced_config_map("gpuportal-device-plugin-configs", "gpu-operator")
        labels = core.read_node("a100-0").metadata.labels
        assert labels[f"pool.gpuportal.io/{namespace}"] == "booked" and "nvidia.com/mig.config" in labels

        # Evictions: pods beyond a lowered quota go, through the Eviction API (list pods, create pods/eviction).
        for name, gpus in (("first", 1), ("second", 1)):
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": name}, "spec": {"priorityClassName": "gpu-standard", "containers": [{
                    "name": "main", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})  # fmt: skip
        # What waits there is readable as the same identity (pods and events, never across the cluster).
        waiting = driver_for(world.cluster).read_pending(namespace=namespace, older_than=datetime.timedelta(0))
        assert {workload.name for workload in waiting.workloads} <= {"first", "second"}
        allocation_services.allocation_release(actor=world.users["nlp_member"], allocation_id=first.pk)
        gone = {p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.metadata.deletion_timestamp}
        remaining = {p.metadata.name for p in core.list_namespaced_pod(namespace).items} - gone
        assert remaining == set()  # the quota holds no whole GPU any more: both evicted
    world.cluster.refresh_from_db()
    assert world.cluster.last_sync_error == ""

    # The prune, as the same identity: the last release deletes the project's namespace; a cluster
    # that stops using the features loses their cluster-wide objects (and this test leaves none behind).
    for allocation in (mig, vgpu):
        allocation_services.allocation_release(actor=world.users["nlp_member"], allocation_id=allocation.pk)
    Cluster.objects.filter(pk=world.cluster.pk).update(pin_bookings=False, use_volcano=False, prometheus_rule_namespace="")
    plan, _ = cluster_sync(cluster_id=world.cluster.pk)
    assert any(change.action == "delete" for change in plan.changes)
    world.cluster.refresh_from_db()
    assert world.cluster.last_sync_error == ""
    managed = "app.kubernetes.io/managed-by=gpuportal"
    with kube_cluster.api_client() as api:
        assert client.CoreV1Api(api).read_namespace(namespace).metadata.deletion_timestamp is not None
        admission = client.AdmissionregistrationV1Api(api)
        assert not admission.list_validating_admission_policy(label_selector=managed).items
        assert not admission.list_mutating_admission_policy(label_selector=managed).items
        objects = client.CustomObjectsApi(api)
        assert not objects.list_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues",
                                                      label_selector=managed)["items"]
        assert not objects.list_namespaced_custom_object("monitoring.coreos.com", "v1", "monitoring", "prometheusrules",
                                                         label_selector=managed)["items"]


def test_the_service_account_is_refused_secrets_pods_anywhere_and_cluster_admin(target: Target, kube_cluster: KubeTestCluster) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(target.api), client.RbacAuthorizationV1Api(target.api)
    assert _status(lambda: core.list_secret_for_all_namespaces()) == 403
    assert _status(lambda: core.read_namespaced_secret("anything", "kube-system")) == 403
    tenant = f"proof-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": tenant, "labels": MANAGED}})  # the portal's own namespace
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    assert _status(lambda: core.create_namespaced_pod(tenant, pod)) == 403
    assert _status(lambda: core.delete_collection_namespaced_pod(tenant)) == 403
    # No pod read anywhere but where it bound its evictor role (the push does; not here): pod specs can carry secrets.
    assert _status(lambda: core.list_pod_for_all_namespaces()) == 403
    assert _status(lambda: core.list_namespaced_pod("kube-system")) == 403
    assert _status(lambda: core.list_namespaced_pod(tenant)) == 403
    lend = {"metadata": {"name": "gpuportal-evictor", "labels": MANAGED},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuportal-evictor"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]}
    assert _status(lambda: rbac.create_namespaced_role_binding(tenant, lend)) == 403  # its rights on pods are its own
    binding = {"metadata": {"name": "escalate", "labels": MANAGED},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]}
    assert _status(lambda: rbac.create_namespaced_role_binding(tenant, binding)) == 403
    cluster_binding = {**binding, "metadata": {"name": "escalate"}}
    assert _status(lambda: rbac.create_cluster_role_binding(cluster_binding)) == 403
    # Nor can it loosen its own limits: the chart's admission policy and role are not its.
    admission = client.AdmissionregistrationV1Api(target.api)
    name = target.username.rsplit(":", 1)[1]
    assert _status(lambda: admission.delete_validating_admission_policy(name)) == 403
    assert _status(lambda: rbac.patch_cluster_role(name, {"rules": []})) == 403
    kube_cluster.kubectl("delete", "namespace", tenant, "--wait=false")


def test_the_admission_policy_keeps_the_service_account_to_the_portals_own_objects(
    target: Target, kube_cluster: KubeTestCluster, fake_gpu_nodes: Any
) -> None:
    from kubernetes import client

    from kube_testenv.gpu_nodes import GPUNodeSpec

    node = f"gpu-{uuid.uuid4().hex[:6]}"
    fake_gpu_nodes.add(GPUNodeSpec(node, gpus=1))

    core = client.CoreV1Api(target.api)
    tenant, foreign = f"owned-{uuid.uuid4().hex[:6]}", f"foreign-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": tenant, "labels": MANAGED}})
    kube_cluster.create_namespace(foreign)

    def refused(call: Any, words: str) -> None:
        with pytest.raises(client.ApiException) as error:
            call()
        assert error.value.status == 403 and words in error.value.body, error.value.body

    config_map = {"metadata": {"name": "x"}, "data": {}}
    refused(lambda: core.create_namespace({"metadata": {"name": f"unlabelled-{tenant}"}}), "managed-by=gpuportal")
    refused(lambda: core.create_namespaced_config_map(tenant, config_map), "managed-by=gpuportal")
    labelled = {"metadata": {"name": "x", "labels": MANAGED}, "data": {}}
    refused(lambda: core.create_namespaced_config_map(foreign, labelled), "namespaces it manages")
    refused(lambda: core.delete_namespace(foreign), "managed-by=gpuportal")
    refused(lambda: core.patch_namespace("kube-system", {"metadata": {"labels": MANAGED}}), "managed-by=gpuportal")
    priority = {"metadata": {"name": f"top-{tenant}", "labels": MANAGED}, "value": 10, "globalDefault": True}
    refused(lambda: client.SchedulingV1Api(target.api).create_priority_class(priority), "default")
    view = {"metadata": {"name": "admins", "labels": MANAGED},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ann"}]}
    client.RbacAuthorizationV1Api(target.api).create_namespaced_role_binding(tenant, view)  # a tenant role: allowed
    core.create_namespaced_config_map(tenant, labelled)  # its own object in its own namespace: allowed

    refused(lambda: core.patch_node(node, {"metadata": {"labels": {"kubernetes.io/hostname": "elsewhere"}}}),
            "node labels")
    refused(lambda: core.patch_node(node, {"spec": {"unschedulable": True}}), "node labels")
    core.patch_node(node, {"metadata": {"labels": {"pool.gpuportal.io/x": "booked"}}})  # the portal's key: allowed
    for name in (tenant, foreign):
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false")
