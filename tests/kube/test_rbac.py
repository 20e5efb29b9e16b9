"""RBAC is enforced for a non-admin user authenticated by client certificate."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kube_testenv import KubeTestCluster, wait_for


def _bind_view(api: client.ApiClient, namespace: str, user: str) -> None:
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


@pytest.fixture
def viewer(kube_cluster: KubeTestCluster, kube_api_client: client.ApiClient) -> tuple[client.ApiClient, str, str, str]:
    """(viewer's client, user name, namespace it may view, another namespace)."""
    suffix = uuid.uuid4().hex[:8]
    user, own, other = f"viewer-{suffix}", f"team-a-{suffix}", f"team-b-{suffix}"
    kube_cluster.create_namespace(own)
    kube_cluster.create_namespace(other)
    _bind_view(kube_api_client, own, user)
    return kube_cluster.user_api_client(user), user, own, other


def test_view_user_can_read_but_not_create_in_its_namespace(
    viewer: tuple[client.ApiClient, str, str, str],
) -> None:
    api, user, own, _ = viewer
    with api:
        core = client.CoreV1Api(api)
        # The aggregated `view` role and the new binding reach the authorizer's
        # cache asynchronously; allow them a moment.
        wait_for(lambda: core.list_namespaced_pod(own), timeout=15, what="view access")

        with pytest.raises(ApiException) as denied:
            core.create_namespaced_config_map(own, {"metadata": {"name": "nope"}, "data": {}})

    assert denied.value.status == 403
    assert (
        f'User "{user}" cannot create resource "configmaps" in API group "" in the namespace "{own}"'
    ) in json.loads(denied.value.body)["message"]


def test_view_user_is_forbidden_to_read_another_namespace(
    viewer: tuple[client.ApiClient, str, str, str],
) -> None:
    api, user, own, other = viewer
    with api:
        core = client.CoreV1Api(api)
        wait_for(lambda: core.list_namespaced_pod(own), timeout=15, what="view access")

        with pytest.raises(ApiException) as denied:
            core.list_namespaced_config_map(other)

    assert denied.value.status == 403
    assert (
        f'User "{user}" cannot list resource "configmaps" in API group "" in the namespace "{other}"'
    ) in json.loads(denied.value.body)["message"]
