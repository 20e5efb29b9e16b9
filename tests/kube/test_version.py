"""The control plane runs exactly the pinned Kubernetes release."""

from __future__ import annotations

import json

from kubernetes import client

from kube_testenv import KUBE_VERSION, KubeTestCluster


def test_version_endpoint_reports_pinned_release(
    kube_api_client: client.ApiClient,
) -> None:
    info = client.VersionApi(kube_api_client).get_code()
    assert info.git_version == KUBE_VERSION == "v1.36.3"
    assert (info.major, info.minor) == ("1", "36")
    assert info.git_tree_state == "clean"


def test_kubectl_is_pinned_and_talks_to_the_cluster(
    kube_cluster: KubeTestCluster,
) -> None:
    result = kube_cluster.kubectl("version", "--output=json")
    versions = json.loads(result.stdout)
    assert versions["clientVersion"]["gitVersion"] == KUBE_VERSION
    assert versions["serverVersion"]["gitVersion"] == KUBE_VERSION
