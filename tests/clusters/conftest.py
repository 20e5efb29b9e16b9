"""Fixtures for delivery tests against the real API server: a World whose cluster is reached
through its kubeconfig, with project namespaces unique to each test (the control plane is shared
by the whole session, and namespace deletion is asynchronous)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from django.db.models import Max

from audit.models import AuditEvent
from clusters.credentials import cluster_kubeconfig_set
from clusters.models import Cluster, ClusterDriverKind
from tests.conftest import World, build_world

if TYPE_CHECKING:
    from kube_testenv.cluster import KubeTestCluster


def audit_since(seq: int, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=seq, action=action).order_by("seq"))


def audit_head() -> int:
    return int(AuditEvent.objects.aggregate(head=Max("seq"))["head"] or 0)


def unique_projects(world: World) -> None:
    """Rename the World's projects so that no two tests share a namespace."""
    suffix = uuid.uuid4().hex[:6]
    for project in (world.llm, world.speech_project, world.seg):
        project.slug = f"{project.slug}-{suffix}"
        project.save(update_fields=["slug"])


def use_kubeconfig(cluster: Cluster, kubeconfig: str) -> None:
    cluster.driver = ClusterDriverKind.KUBERNETES
    cluster.save(update_fields=["driver"])
    cluster_kubeconfig_set(actor=None, cluster_id=cluster.pk, kubeconfig=kubeconfig)
    cluster.refresh_from_db()


@pytest.fixture
def kube_world(transactional_db: None, kube_cluster: KubeTestCluster) -> Iterator[World]:
    world = build_world()
    unique_projects(world)
    use_kubeconfig(world.cluster, kube_cluster.kubeconfig.read_text())
    operator_namespace(kube_cluster)
    yield world


def operator_namespace(kube_cluster: KubeTestCluster) -> None:
    """The namespace the GPU operator would have created (it holds the node-config ConfigMaps)."""
    from kubernetes import client

    with kube_cluster.api_client() as api:
        try:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": "gpu-operator"}})
        except client.ApiException as error:
            if error.status != 409:
                raise


@pytest.fixture
def core(kube_cluster: KubeTestCluster) -> Iterator[Any]:
    from kubernetes import client

    with kube_cluster.api_client() as api:
        yield client.CoreV1Api(api)
