"""pytest fixtures for a real control plane: ``kube_cluster`` and friends.

Enable with ``pytest_plugins = ["kube_testenv.pytest_plugin"]`` in a
conftest or ``-p kube_testenv.pytest_plugin``. Importing this module is
cheap: the Kubernetes client is imported only when a fixture is used.

Without binaries the fixtures skip, unless ``GPUPORTAL_REQUIRE_KUBE=1`` (set by
``make test``), in which case they fail so CI cannot silently skip.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from kube_testenv.paths import (
    BIN_ENV,
    REQUIRE_ENV,
    BinariesMissing,
    bin_dir,
    env_flag,
    find_binaries,
)

if TYPE_CHECKING:
    from kubernetes import client

    from kube_testenv.cluster import KubeTestCluster
    from kube_testenv.gpu_nodes import FakeGPUNodes
    from kube_testenv.kwok import KwokController


def pytest_report_header(config: pytest.Config) -> str:
    state = "required" if env_flag(REQUIRE_ENV) else "optional"
    return f"kube-testenv: binaries {bin_dir()} (${BIN_ENV}), {state} (${REQUIRE_ENV})"


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeTestCluster]:
    """A session-wide control plane (etcd, apiserver, controller-manager, scheduler).

    Attributes: ``kubeconfig`` (admin kubeconfig path), ``server`` (URL),
    ``api_client()`` (new admin ``kubernetes.client.ApiClient``),
    ``user_api_client(user, groups)``, ``user_kubeconfig(user, groups)``,
    ``create_namespace(name)``, ``kubectl(*args)``, ``startup_seconds``.
    """
    try:
        binaries = find_binaries()
    except BinariesMissing as exc:
        if env_flag(REQUIRE_ENV):
            pytest.fail(f"{exc} (${REQUIRE_ENV} is set, so this is an error)", pytrace=False)
        pytest.skip(str(exc))
    from kube_testenv.cluster import KubeTestCluster

    with KubeTestCluster(binaries) as cluster:
        yield cluster


@pytest.fixture
def kube_api_client(kube_cluster: KubeTestCluster) -> Iterator[client.ApiClient]:
    """An admin ApiClient for one test, closed afterwards."""
    with kube_cluster.api_client() as api:
        yield api


@pytest.fixture
def kube_namespace(kube_cluster: KubeTestCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace whose ``default`` service account exists; deleted after the test."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base or 'test'}-{uuid.uuid4().hex[:6]}"
    kube_cluster.create_namespace(name)
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture
def fake_gpu_nodes(kube_cluster: KubeTestCluster) -> Iterator[FakeGPUNodes]:
    """Register fake GPU nodes with ``.add(GPUNodeSpec(...))``; all removed after the test."""
    from kube_testenv.gpu_nodes import FakeGPUNodes

    with FakeGPUNodes(kube_cluster.api_client) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def kwok_controller(kube_cluster: KubeTestCluster) -> Iterator[KwokController]:
    """The kwok controller for the session cluster: it runs pods bound to kwok-annotated nodes."""
    from kube_testenv.kwok import KwokController
    from kube_testenv.paths import find_kwok

    try:
        binary = find_kwok()
    except BinariesMissing as exc:
        if env_flag(REQUIRE_ENV):
            pytest.fail(f"{exc} (${REQUIRE_ENV} is set, so this is an error)", pytrace=False)
        pytest.skip(str(exc))
    with KwokController(kube_cluster.kubeconfig, binary=binary) as controller:
        yield controller


@pytest.fixture
def kwok_gpu_nodes(kube_cluster: KubeTestCluster, kwok_controller: KwokController) -> Iterator[FakeGPUNodes]:
    """Like ``fake_gpu_nodes``, but kwok runs the pods bound to them (Running, Succeeded, deleted)."""
    from kube_testenv.gpu_nodes import FakeGPUNodes

    with FakeGPUNodes(kube_cluster.api_client, kwok=True) as nodes:
        yield nodes


def unique_name(prefix: str) -> str:
    """A DNS-1123 name unlikely to clash within the shared session cluster."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


__all__: list[str] = [
    "fake_gpu_nodes",
    "kube_api_client",
    "kube_cluster",
    "kube_namespace",
    "kwok_controller",
    "kwok_gpu_nodes",
    "unique_name",
]
