"""Delivery against the real API server: approval, release and prune, drift, outages, bad kubeconfig."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from allocations.grants import services as allocation_services
from allocations.models import Allocation, AllocationState, Quota
from clusters.models import ClusterDrift, ClusterPush, PushState
from delivery.drivers import PermanentDriverError, Scope, driver_for
from delivery.outbox import push_deliver
from delivery.services import cluster_sync, cluster_sync_project
from delivery.tasks import clusters_drift_check_task
from tests.clusters.conftest import audit_head, audit_since, use_kubeconfig
from tests.clusters.tcp_proxy import TcpProxy
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def grant(world: World, *, quantity: int = 2, flavor: str = "a100", priority: str = "standard") -> Allocation:
    start = timezone.now()
    allocation = allocation_services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=getattr(world, flavor), quantity=quantity,
        priority_class=getattr(world, priority), starts_at=start, ends_at=start + datetime.timedelta(days=7),
        justification="training",
    )
    allocation_services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    return allocation


def quota(core: Any, namespace: str, name: str = "gpuportal-gpu-quota") -> Any:
    return core.read_namespaced_resource_quota(name, namespace)


def test_approval_creates_the_projects_objects_with_their_exact_specs(kube_world: World, core: Any, kube_cluster: Any) -> None:
    allocation = grant(kube_world, quantity=2)
    assert allocation.state == AllocationState.ACTIVE

    namespace = core.read_namespace(kube_world.llm.slug)
    assert namespace.metadata.labels["app.kubernetes.io/managed-by"] == "gpuportal"
    assert namespace.metadata.labels["gpuportal.io/department"] == "nlp"
    assert quota(core, kube_world.llm.slug).spec.hard == {
        "requests.nvidia.com/gpu": "2", "requests.cpu": "16", "requests.memory": "128Gi",
        "limits.cpu": "16", "limits.memory": "128Gi",
    }
    scoped = quota(core, kube_world.llm.slug, "gpuportal-priority-gpu-standard")
    assert scoped.spec.hard == {"requests.nvidia.com/gpu": "2"}
    assert scoped.spec.scope_selector.match_expressions[0].to_dict() == {
        "scope_name": "PriorityClass", "operator": "In", "values": ["gpu-standard"],
    }
    other = quota(core, kube_world.llm.slug, "gpuportal-priority-other")
    assert other.spec.hard == {"requests.nvidia.com/gpu": "0"}
    limits = core.read_namespaced_limit_range("gpuportal-defaults", kube_world.llm.slug).spec.limits[0]
    assert limits.default_request == {"cpu": "100m", "memory": "256Mi"}
    assert limits.default == limits.max == {"cpu": "8", "memory": "64Gi"}  # one flavor: its unit
    with kube_cluster.api_client() as api:
        rbac = client.RbacAuthorizationV1Api(api)
        edit = rbac.read_namespaced_role_binding("gpuportal-members-edit", kube_world.llm.slug)
        assert [s.name for s in edit.subjects] == ["nlp_member"] and edit.role_ref.name == "edit"
        view = rbac.read_namespaced_role_binding("gpuportal-admins-view", kube_world.llm.slug)
        assert [s.name for s in view.subjects] == ["auditor", "nlp_admin"]
        policy = client.NetworkingV1Api(api).read_namespaced_network_policy("gpuportal-tenant-isolation", kube_world.llm.slug)
        assert policy.spec.policy_types == ["Ingress"]
        sources = policy.spec.ingress[0]._from
        assert sources[1].namespace_selector.match_labels == {"gpuportal.io/department": "nlp"}
        classes = client.SchedulingV1Api(api).read_priority_class("gpu-preemptible")
        assert (classes.value, classes.preemption_policy) == (100, "Never")

    # A pod of another priority class cannot take the project's GPUs.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky"}, "spec": {
        "priorityClassName": "gpu-preemptible",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(kube_world.llm.slug, pod)
    assert refused.value.status == 403 and "gpuportal-priority-other" in refused.value.body


def test_resync_with_nothing_changed_writes_nothing(kube_world: World) -> None:
    grant(kube_world)
    driver = driver_for(kube_world.cluster)
    try:
        from delivery.services import cluster_desired_scopes

        plan = driver.plan(cluster_desired_scopes(cluster=kube_world.cluster))
        assert [change.ref for change in plan.changes] == []
        assert plan.unchanged > 5
    finally:
        driver.close()


def test_release_shrinks_the_quota_and_the_last_release_prunes_the_namespace(kube_world: World, core: Any) -> None:
    first = grant(kube_world, quantity=1)
    second = grant(kube_world, quantity=3)
    assert quota(core, kube_world.llm.slug).spec.hard["requests.nvidia.com/gpu"] == "4"

    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=second.pk)
    assert quota(core, kube_world.llm.slug).spec.hard["requests.nvidia.com/gpu"] == "1"

    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=first.pk)
    namespace = core.read_namespace(kube_world.llm.slug)
    assert namespace.metadata.deletion_timestamp is not None  # delete-namespace policy: on its way out


def test_release_under_the_retain_policy_keeps_the_namespace_with_a_zero_quota(
    kube_world: World, core: Any, settings: Any
) -> None:
    settings.GPUPORTAL_KUBE_PRUNE_POLICY = "retain-namespace"
    allocation = grant(kube_world, quantity=2, flavor="mig")
    allocation_services.allocation_release(actor=kube_world.users["nlp_member"], allocation_id=allocation.pk)

    assert core.read_namespace(kube_world.llm.slug).metadata.deletion_timestamp is None
    hard = quota(core, kube_world.llm.slug).spec.hard
    assert hard["requests.nvidia.com/mig-1g.10gb"] == "0" and hard["requests.nvidia.com/gpu"] == "0"
    names = [q.metadata.name for q in core.list_namespaced_resource_quota(kube_world.llm.slug).items]
    assert names == ["gpuportal-gpu-quota"]
    with pytest.raises(client.ApiException):
        core.read_namespaced_limit_range("gpuportal-defaults", kube_world.llm.slug)


def test_a_hand_edited_quota_is_repaired_and_the_drift_recorded(kube_world: World, core: Any) -> None:
    grant(kube_world, quantity=2)
    head = audit_head()
    core.patch_namespaced_resource_quota(
        "gpuportal-gpu-quota", kube_world.llm.slug, {"spec": {"hard": {"requests.nvidia.com/gpu": "64"}}}
    )
    core.delete_namespaced_limit_range("gpuportal-defaults", kube_world.llm.slug)

    clusters_drift_check_task()

    assert quota(core, kube_world.llm.slug).spec.hard["requests.nvidia.com/gpu"] == "2"
    assert core.read_namespaced_limit_range("gpuportal-defaults", kube_world.llm.slug)
    drift = {(d.kind, d.name): d for d in ClusterDrift.objects.filter(cluster=kube_world.cluster)}
    assert "spec.hard.requests.nvidia.com/gpu" in drift[("ResourceQuota", "gpuportal-gpu-quota")].fields
    assert drift[("ResourceQuota", "gpuportal-gpu-quota")].change == "changed"
    assert drift[("LimitRange", "gpuportal-defaults")].change == "missing"
    events = audit_since(head, "cluster.drift_repaired")
    assert len(events) == 1 and events[0].details["count"] >= 1

    plan, result = cluster_sync(cluster_id=kube_world.cluster.pk, repair_drift=True)
    assert plan.is_empty and result.applied == 0


def test_an_api_server_outage_during_a_push_is_retried_until_it_converges(
    kube_world: World, core: Any, kube_cluster: Any
) -> None:
    host, port = kube_cluster.server.removeprefix("https://").split(":")
    with TcpProxy(target=(host, int(port))) as proxy:
        use_kubeconfig(kube_world.cluster, kube_cluster.kubeconfig.read_text().replace(kube_cluster.server, proxy.url))
        proxy.stop_accepting()
        allocation = grant(kube_world, quantity=1)
        # In-process delivery used up its attempts at once; a worker would have backed off.
        allocation.refresh_from_db()
        assert allocation.state == AllocationState.FAILED
        assert "unreachable" in allocation.failure_reason

        allocation_services.allocation_retry(actor=kube_world.users["nlp_admin"], allocation_id=allocation.pk)
        allocation.refresh_from_db()
        assert allocation.state == AllocationState.FAILED  # still down
        pending = ClusterPush.objects.create(cluster=kube_world.cluster, project=kube_world.llm, allocation=allocation,
                                             available_at=timezone.now())
        assert push_deliver(push_id=pending.pk) is not None  # retried later, with backoff
        pending.refresh_from_db()
        assert (pending.state, pending.attempts) == (PushState.PENDING, 1)
        assert pending.available_at > timezone.now()

        proxy.start_accepting()
        assert push_deliver(push_id=pending.pk, ignore_schedule=True) is None
    pending.refresh_from_db()
    allocation.refresh_from_db()
    assert pending.state == PushState.DONE and allocation.state == AllocationState.ACTIVE
    assert quota(core, kube_world.llm.slug).spec.hard["requests.nvidia.com/gpu"] == "1"


def test_a_bad_kubeconfig_fails_the_push_once_with_a_clear_error_on_the_cluster(kube_world: World) -> None:
    kube_world.cluster.kubeconfig_encrypted = b"not a fernet token"
    kube_world.cluster.save(update_fields=["kubeconfig_encrypted"])

    allocation = grant(kube_world, quantity=1)

    assert allocation.state == AllocationState.FAILED
    assert "cannot be decrypted" in allocation.failure_reason
    push = ClusterPush.objects.get(allocation=allocation)
    assert (push.state, push.attempts) == (PushState.FAILED, 1)  # permanent: no retry loop
    kube_world.cluster.refresh_from_db()
    assert "upload the kubeconfig again" in kube_world.cluster.last_sync_error


def test_a_kubeconfig_whose_credentials_are_refused_is_a_permanent_error(kube_world: World, kube_cluster: Any) -> None:
    text = kube_cluster.kubeconfig.read_text()
    broken = text.replace("client-key-data: ", "client-key-data: AAAA", 1)
    use_kubeconfig(kube_world.cluster, broken)
    with pytest.raises(PermanentDriverError, match="kubeconfig is not usable|TLS"):
        cluster_sync_project(cluster_id=kube_world.cluster.pk, project_id=kube_world.llm.pk)


def test_nodes_get_their_device_plugin_and_mig_labels(kube_world: World, core: Any, fake_gpu_nodes: Any) -> None:
    from kube_testenv.gpu_nodes import GPUNodeSpec

    fake_gpu_nodes.add(GPUNodeSpec(name="a100-0", product="NVIDIA-A100-SXM4-80GB", compute_capability=(8, 0),
                                   mig_strategy="mixed", mig_gpus=8, mig_devices={"1g.10gb": 7}))
    kube_world.cluster.nodes.filter(name="a100-0").update(sharing="mig")

    grant(kube_world, quantity=5, flavor="mig")

    labels = core.read_node("a100-0").metadata.labels
    assert labels["nvidia.com/device-plugin.config"] == "mig-mixed"
    assert labels["nvidia.com/mig.config"].startswith("gpuportal-")
    configs = core.read_namespaced_config_map("gpuportal-mig-parted-config", "gpu-operator").data["config.yaml"]
    assert labels["nvidia.com/mig.config"] in configs and "1g.10gb: 5" in configs
    scope = Scope(namespace=None, objects=[])
    assert scope.label == "cluster-wide objects"


def _volcano_queue_crd(kube_cluster: Any) -> None:
    """The Queue kind as Volcano registers it (schema left open: its webhook is not running here)."""
    body = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "queues.scheduling.volcano.sh"},
        "spec": {
            "group": "scheduling.volcano.sh", "scope": "Cluster",
            "names": {"plural": "queues", "singular": "queue", "kind": "Queue", "listKind": "QueueList"},
            "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }
    from kube_testenv import wait_for

    with kube_cluster.api_client() as api:
        extensions = client.ApiextensionsV1Api(api)
        try:
            extensions.create_custom_resource_definition(body)
        except client.ApiException as error:
            if error.status != 409:
                raise

        def established() -> bool:
            crd = extensions.read_custom_resource_definition("queues.scheduling.volcano.sh")
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(established, timeout=30, what="the Queue CRD to be established")


def test_volcano_and_hami_clusters_get_queues_and_hamis_quota_keys(kube_world: World, core: Any, kube_cluster: Any) -> None:
    _volcano_queue_crd(kube_cluster)
    kube_world.cluster.use_volcano = True
    kube_world.cluster.use_hami = True
    kube_world.cluster.save(update_fields=["use_volcano", "use_hami"])
    Quota.objects.filter(department=kube_world.nlp, flavor=kube_world.a100).update(guaranteed=1)

    grant(kube_world, quantity=2)

    hard = quota(core, kube_world.llm.slug).spec.hard
    assert (hard["limits.nvidia.com/gpumem"], hard["limits.nvidia.com/gpucores"]) == (str(2 * 81920), "200")
    with kube_cluster.api_client() as api:
        queue = client.CustomObjectsApi(api).get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "gpuportal-nlp")
    assert queue["spec"]["capability"] == {"nvidia.com/gpu": "2"}
    assert queue["spec"]["deserved"] == {"nvidia.com/gpu": "2"}
    assert queue["spec"]["guarantee"] == {"resource": {"nvidia.com/gpu": "1"}}
