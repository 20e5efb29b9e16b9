"""The "use it" panel: the pure renderer for every sharing mode (examples that parse, with exactly
the resource names the portal's quotas count), GET /api/v1/allocations/{id}/usage-guide/ scoped like
the allocation (outsiders 404, unusable states 409, scheduled ones a preview), the cluster's user
access settings through PATCH, and the allocation page showing the panel."""

from __future__ import annotations

import datetime
import shlex
from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.test import Client, TestCase
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from delivery.container_limits import container_limits
from delivery.rendering import GrantedUnits
from delivery.usage_guide import ClusterAccess, GuideInput, usage_guide
from tests.conftest import H100, World

LIMITS = container_limits([GrantedUnits("nvidia.com/gpu", 1, 8000, 65536)], request_cpu="100m", request_memory="256Mi")


def guide_input(mode: str, resource: str, **overrides: Any) -> GuideInput:
    fields: dict[str, Any] = {
        "allocation_id": 7, "state": "active", "cluster": "prod", "namespace": "nlp-llm", "flavor": "f",
        "sharing_mode": mode, "resource_name": resource, "quantity": 4, "priority_class": "gpu-standard",
        "memory_mib": 10240, "compute_percent": 25, "cpu_millicores_per_unit": 2000, "memory_mib_per_unit": 16384,
        "limits": LIMITS, **overrides,
    }
    return GuideInput(**fields)


MODES = [
    (SharingMode.EXCLUSIVE, "nvidia.com/gpu", {"nvidia.com/gpu": "2"}, {"node_units": (2, 2)}),
    (SharingMode.MIG, "nvidia.com/mig-1g.10gb", {"nvidia.com/mig-1g.10gb": "4"}, {"mig_profile": "1g.10gb"}),
    (SharingMode.MPS, "nvidia.com/gpu.shared", {"nvidia.com/gpu.shared": "1"}, {}),
    (SharingMode.TIMESLICE, "nvidia.com/gpu.shared", {"nvidia.com/gpu.shared": "1"}, {}),
    (SharingMode.VGPU, "nvidia.com/gpu",
     {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240", "nvidia.com/gpucores": "25"}, {"use_hami": True}),
    (SharingMode.VOLCANO_VGPU, "volcano.sh/vgpu-number",
     {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "10240", "volcano.sh/vgpu-cores": "25"}, {}),
]


@pytest.mark.parametrize(("mode", "resource", "gpu_limits", "extra"), MODES, ids=[m[0] for m in MODES])
def test_each_modes_pod_and_job_parse_and_ask_for_exactly_the_granted_resources(
    mode: str, resource: str, gpu_limits: dict[str, str], extra: dict[str, Any]
) -> None:
    guide = usage_guide(guide_input(mode, resource, **extra))
    pod = yaml.safe_load(guide.examples["pod"])
    job = yaml.safe_load(guide.examples["job"])
    assert (pod["kind"], pod["metadata"]["namespace"], job["kind"], job["apiVersion"]) == ("Pod", "nlp-llm", "Job", "batch/v1")
    for spec in (pod["spec"], job["spec"]["template"]["spec"]):
        assert spec["priorityClassName"] == "gpu-standard"
        assert "nodeSelector" not in spec and "nodeName" not in spec  # the cluster's policy adds the pool selector
        (container,) = spec["containers"]
        assert container["resources"]["limits"] == {**gpu_limits, "cpu": "2", "memory": "16Gi"}
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "16Gi"}
        assert spec.get("schedulerName") == ("volcano" if mode == SharingMode.VOLCANO_VGPU else None)
    per_pod = int(gpu_limits[next(iter(gpu_limits))])
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 4 // per_pod
    lines = {line.name: (line.per_pod, line.total) for line in guide.resources}
    assert lines[next(iter(gpu_limits))] == (per_pod, 4)
    assert set(lines) == set(gpu_limits)
    assert guide.status == "ready" and guide.as_dict()["priority_class"] == "gpu-standard"


def test_shared_units_are_one_per_pod_and_vgpu_totals_multiply_memory_and_cores() -> None:
    guide = usage_guide(guide_input(SharingMode.VGPU, "nvidia.com/gpu", quantity=3))
    assert [(line.name, line.per_pod, line.total) for line in guide.resources] == [
        ("nvidia.com/gpu", 1, 3), ("nvidia.com/gpumem", 10240, 30720), ("nvidia.com/gpucores", 25, 75),
    ]
    mps = usage_guide(guide_input(SharingMode.MPS, "nvidia.com/gpu.shared"))
    assert any("refuses more than one shared replica" in note for note in mps.notes)


def test_a_whole_gpu_grant_split_over_nodes_says_how_many_fit_in_one_pod() -> None:
    guide = usage_guide(guide_input(SharingMode.EXCLUSIVE, "nvidia.com/gpu", quantity=12, node_units=(8, 4)))
    assert [(line.per_pod, line.total) for line in guide.resources] == [(8, 12)]
    assert any("At most 8 units are booked on one node" in note and "3 pods of 4" in note for note in guide.notes)
    pod, job = yaml.safe_load(guide.examples["pod"]), yaml.safe_load(guide.examples["job"])
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # The Job's pods fill both nodes' shares exactly: 3 pods of 4 (2 on the first node, 1 on the second).
    assert job["spec"]["parallelism"] == 3
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    odd = usage_guide(guide_input(SharingMode.EXCLUSIVE, "nvidia.com/gpu", quantity=11, node_units=(8, 3)))
    assert yaml.safe_load(odd.examples["job"])["spec"]["parallelism"] == 11


def test_without_oidc_settings_the_guide_says_to_ask_the_platform_team() -> None:
    guide = usage_guide(guide_input(SharingMode.EXCLUSIVE, "nvidia.com/gpu", kube_user="alice", kube_role="edit"))
    assert guide.kubeconfig["method"] == "ask-platform-team" and guide.kubeconfig["snippet"] == ""
    assert "Kubernetes knows you as alice" in guide.kubeconfig["instructions"]
    assert "ClusterRole edit" in guide.kubeconfig["instructions"]


def test_with_oidc_settings_the_snippet_configures_kubelogin_and_quotes_every_value() -> None:
    access = ClusterAccess(api_server_url="https://k8s.example:6443", oidc_issuer_url="https://idp.example/realms/a b",
                           oidc_client_id="kubernetes", ca_certificate="-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----")
    guide = usage_guide(guide_input(SharingMode.EXCLUSIVE, "nvidia.com/gpu", access=access))
    snippet = guide.kubeconfig["snippet"]
    assert guide.kubeconfig["method"] == "oidc"
    words = shlex.split(snippet.replace("\\\n", " "))
    assert "--exec-arg=--oidc-issuer-url=https://idp.example/realms/a b" in words  # one word, quoted
    assert "--exec-arg=--oidc-client-id=kubernetes" in words
    assert "--server=https://k8s.example:6443" in words
    assert "--namespace=nlp-llm" in words and "certificate-authority-data" in snippet.split("\n")[1]


def test_a_preview_is_marked() -> None:
    guide = usage_guide(guide_input(SharingMode.EXCLUSIVE, "nvidia.com/gpu", state="scheduled", preview=True))
    assert guide.status == "preview" and "what it will be once it is active" in guide.notes[0]


# ------------------------------------------------------------------------------- API and page


def ask(world: World, flavor: Flavor, *, quantity: int = 1, start_in: datetime.timedelta | None = None) -> Allocation:
    start = timezone.now() + (start_in or datetime.timedelta())
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=3), justification="x",
    )


def granted(world: World, flavor: Flavor, **kwargs: Any) -> Allocation:
    """Approved, and pushed (to the manifests folder) once the approval commits: active."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        allocation = services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=ask(world, flavor, **kwargs).pk)
    allocation.refresh_from_db()
    return allocation


def url(allocation: Allocation) -> str:
    return f"/api/v1/allocations/{allocation.pk}/usage-guide/"


@pytest.mark.django_db
def test_members_read_the_guide_of_an_active_grant_and_outsiders_get_404(world: World) -> None:
    allocation = granted(world, world.mig, quantity=2)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE
    answer = world.client("nlp_member").get(url(allocation))
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["status"], body["namespace"], body["cluster"], body["priority_class"]) == (
        "ready", "nlp-llm", "test-cluster", "gpu-standard")
    assert body["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "per_pod": 2, "total": 2}]
    assert body["container_limits"]["max"] == {"cpu": "2000m", "memory": "16384Mi"}
    pod = yaml.safe_load(body["examples"]["pod"])
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "2"
    assert body["kubeconfig"]["method"] == "ask-platform-team"
    assert "ClusterRole edit" in body["kubeconfig"]["instructions"]
    admin = world.client("nlp_admin").get(url(allocation)).json()
    assert "ClusterRole view" in admin["kubeconfig"]["instructions"]
    for outsider in ("vision_member", "vision_admin", "nobody"):
        assert world.client(outsider).get(url(allocation)).status_code == 404
    assert world.client(None).get(url(allocation)).status_code == 401
    assert world.client("nlp_member").get("/api/v1/allocations/999999/usage-guide/").status_code == 404


@pytest.mark.django_db
def test_a_pending_request_has_no_guide_and_a_scheduled_grant_has_a_preview(world: World) -> None:
    pending = ask(world, world.a100)
    refused = world.client("nlp_member").get(url(pending))
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_usable" and "pending" in refused.json()["error"]["message"]
    scheduled = granted(world, world.a100, start_in=datetime.timedelta(days=2))
    scheduled.refresh_from_db()
    assert scheduled.state == AllocationState.SCHEDULED
    body = world.client("nlp_member").get(url(scheduled)).json()
    assert (body["status"], body["state"]) == ("preview", "scheduled")


@pytest.mark.django_db
def test_the_clusters_user_access_settings_turn_on_the_kubelogin_snippet(world: World) -> None:
    allocation = granted(world, world.a100)
    path = f"/api/v1/clusters/{world.cluster.pk}/"
    settings = {"user_api_server_url": "https://k8s.example:6443", "user_oidc_issuer_url": "https://idp.example",
                "user_oidc_client": "kubernetes"}
    assert world.client("nlp_admin").patch(path, settings, format="json").status_code == 403
    bad = world.client("platform").patch(path, {"user_api_server_url": "http://k8s.example"}, format="json")
    assert bad.status_code == 400 and "user_api_server_url" in bad.json()["error"]["fields"]
    bad = world.client("platform").patch(path, {"user_ca_certificate": "not a pem"}, format="json")
    assert bad.status_code == 400 and "user_ca_certificate" in bad.json()["error"]["fields"]
    changed = world.client("platform").patch(path, settings, format="json")
    assert changed.status_code == 200 and changed.json()["user_oidc_client"] == "kubernetes"
    body = world.client("nlp_member").get(url(allocation)).json()
    assert body["kubeconfig"]["method"] == "oidc"
    assert "--exec-arg=--oidc-issuer-url=https://idp.example" in body["kubeconfig"]["snippet"]


@pytest.mark.django_db
def test_the_allocation_page_shows_the_panel_only_for_a_usable_grant(world: World) -> None:
    vgpu = Flavor.objects.create(
        name="h100-vgpu", display_name="vGPU", gpu_model=H100, sharing_mode=SharingMode.VGPU,
        resource_name="nvidia.com/gpu", memory_mib=10240, compute_percent=20, gpu_equivalents=Decimal("0.2"),
    )
    world.cluster.use_hami = True
    world.cluster.save(update_fields=["use_hami"])
    allocation = granted(world, vgpu)
    client = Client()
    client.force_login(world.users["nlp_member"])
    page = client.get(f"/allocations/{allocation.pk}/").content.decode()
    assert 'id="usage-guide"' in page and 'data-copy="guide-pod"' in page
    assert "nvidia.com/gpumem: &#x27;10240&#x27;" in page and "priorityClassName: gpu-standard" in page
    pending = ask(world, world.a100)
    assert 'id="usage-guide"' not in client.get(f"/allocations/{pending.pk}/").content.decode()
