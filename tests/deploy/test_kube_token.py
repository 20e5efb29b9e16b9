"""A kubeconfig that authenticates with a bearer token (a ServiceAccount's, as the target chart's
NOTES.txt builds it) is used as that identity by the Kubernetes driver, not as an anonymous user."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from delivery.drivers import PermanentDriverError
from delivery.drivers.kubernetes import KubernetesDriver

if TYPE_CHECKING:
    from kube_testenv.cluster import KubeTestCluster


def test_a_token_kubeconfig_acts_as_the_tokens_service_account(kube_cluster: KubeTestCluster) -> None:
    from kubernetes import client

    namespace = f"token-{uuid.uuid4().hex[:6]}"
    kube_cluster.create_namespace(namespace)
    with kube_cluster.api_client() as api:
        token = client.CoreV1Api(api).create_namespaced_service_account_token(
            "default", namespace, {"spec": {"expirationSeconds": 600}}
        ).status.token
    kubeconfig = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "t", "cluster": {
            "server": kube_cluster.server,
            "certificate-authority-data": base64.b64encode(Path(kube_cluster.ca_file).read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "t", "user": "u"}}],
    })  # fmt: skip
    driver = KubernetesDriver(cluster="token", kubeconfig=kubeconfig)
    try:
        with pytest.raises(PermanentDriverError) as refused:
            driver.namespace_exists("kube-system")  # the default ServiceAccount may not read namespaces
    finally:
        driver.close()
    assert f"system:serviceaccount:{namespace}:default" in str(refused.value)
    assert "system:anonymous" not in str(refused.value)
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
