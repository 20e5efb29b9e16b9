"""What delivery and telemetry tell about other departments' work: nothing, to an outsider.

Pushes (project slugs, allocation ids, error texts), drift (namespaces, queues) and the processes
on a node's GPUs (pod UIDs, containers) are scoped like every other list: each role sees the rows
of the departments it reads (admins and auditors their subtree); rows of the cluster-wide objects,
and processes on a GPU nobody or several departments hold, only those who read every department
(platform admins, the auditor of the root).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, Reservation
from clusters.models import ClusterDrift, ClusterPush, Node, PushState
from tenants.models import Project, Role
from tests.conftest import World
from tests.foundation.conftest_matrix import observe

pytestmark = pytest.mark.django_db

VISION_SECRET = "admission webhook denied vision-seg: quota gpuportal-gpu-quota exceeded"


def grant(world: World, *, persona: str, admin: str, project: Project, flavor: str = "h100") -> Allocation:
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users[persona], project=project, flavor=getattr(world, flavor), quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="x",
    )
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk, comment="ok")


def listed(world: World, persona: str, url: str) -> list[dict[str, Any]]:
    response = world.client(persona).get(url, {"page_size": 500})
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = response.json()["results"]
    return results


@pytest.fixture
def nlp_auditor(world: World) -> str:
    world.persona_add("nlp_auditor", role=Role.AUDITOR, department=world.nlp)
    return "nlp_auditor"


# ------------------------------------------------------------------------------------ pushes


def test_an_outsider_sees_none_of_another_departments_pushes(world: World, nlp_auditor: str) -> None:
    vision = grant(world, persona="vision_member", admin="vision_admin", project=world.seg)
    ClusterPush.objects.create(
        cluster=world.cluster, project=world.seg, allocation=vision, state=PushState.FAILED, attempts=8,
        available_at=timezone.now(), last_error=VISION_SECRET,
    )
    ClusterPush.objects.create(
        cluster=world.cluster, project=None, state=PushState.FAILED, available_at=timezone.now(),
        last_error="Queue gpuportal-vision: deserved must be >= guarantee",
    )
    url = f"/api/v1/clusters/{world.cluster.pk}/pushes/"
    for outsider in ("nlp_member", "nlp_admin", "speech_member", nlp_auditor):
        response = world.client(outsider).get(url, {"page_size": 500})
        assert response.status_code == 200
        text = json.dumps(response.json())
        assert "vision" not in text and str(vision.pk) not in [str(row["allocation_id"]) for row in response.json()["results"]]
        assert response.json()["results"] == []

    mine = listed(world, "vision_member", url)
    assert {row["project"] for row in mine} == {world.seg.slug}
    assert VISION_SECRET in {row["last_error"] for row in mine}
    for everything in ("auditor", "platform"):
        assert {row["project"] for row in listed(world, everything, url)} == {world.seg.slug, None}


def test_a_department_admin_sees_the_pushes_of_the_teams_below(world: World) -> None:
    speech = grant(world, persona="speech_member", admin="nlp_admin", project=world.speech_project, flavor="a100")
    url = f"/api/v1/clusters/{world.cluster.pk}/pushes/"
    assert {row["allocation_id"] for row in listed(world, "nlp_admin", url)} == {speech.pk}
    assert {row["project"] for row in listed(world, "speech_member", url)} == {world.speech_project.slug}
    assert listed(world, "vision_admin", url) == []


# ------------------------------------------------------------------------------------- drift


def test_drift_shows_only_the_namespaces_within_reach(world: World, nlp_auditor: str) -> None:
    def drift(kind: str, namespace: str, name: str) -> None:
        ClusterDrift.objects.create(cluster=world.cluster, kind=kind, namespace=namespace, name=name, change="changed")

    drift("ResourceQuota", world.seg.slug, "gpuportal-gpu-quota")
    drift("Namespace", "", world.seg.slug)
    drift("ResourceQuota", world.speech_project.slug, "gpuportal-gpu-quota")
    drift("Queue", "", "gpuportal-vision")
    drift("ConfigMap", world.cluster.gpu_operator_namespace, "gpuportal-device-plugin-configs")
    drift("PriorityClass", "", "gpu-standard")
    url = f"/api/v1/clusters/{world.cluster.pk}/drift/"

    def seen(persona: str) -> set[str]:
        return {f"{row['kind']} {row['namespace']}/{row['name']}" for row in listed(world, persona, url)}

    vision = {f"ResourceQuota {world.seg.slug}/gpuportal-gpu-quota", f"Namespace /{world.seg.slug}"}
    speech = {f"ResourceQuota {world.speech_project.slug}/gpuportal-gpu-quota"}
    cluster_wide = {"Queue /gpuportal-vision", "ConfigMap gpu-operator/gpuportal-device-plugin-configs",
                    "PriorityClass /gpu-standard"}
    assert seen("nlp_member") == speech  # nlp's researchers read the speech team below nlp
    assert seen("nlp_admin") == speech
    assert seen(nlp_auditor) == speech
    assert seen("speech_member") == speech
    assert seen("vision_member") == vision
    assert seen("vision_admin") == vision
    assert seen("auditor") == vision | speech | cluster_wide
    assert seen("platform") == vision | speech | cluster_wide


# --------------------------------------------------------------------------------- processes


def _held_gpu(allocation: Allocation) -> tuple[Node, int]:
    reservation = Reservation.objects.select_related("node").get(allocation=allocation, released_at__isnull=True)
    return reservation.node, reservation.gpu_indices[0]


def _pods(world: World, persona: str, node: Node) -> dict[int, set[str]]:
    response = world.client(persona).get(f"/api/v1/telemetry/nodes/{node.pk}/")
    assert response.status_code == 200
    return {gpu["index"]: {process["pod_uid"] for process in gpu["processes"] or []} for gpu in response.json()["gpus"]}


def test_an_outsider_sees_none_of_the_processes_on_another_departments_gpus(world: World, nlp_auditor: str) -> None:
    vision = grant(world, persona="vision_member", admin="vision_admin", project=world.seg)
    node, index = _held_gpu(vision)
    observe(node, index=index, pod_uid="pod-of-vision")
    free = next(gpu.index for gpu in node.gpus.order_by("index") if gpu.index != index)
    observe(node, index=free, pod_uid="pod-of-nobody")

    for outsider in ("nlp_member", "nlp_admin", "speech_member", nlp_auditor):
        assert _pods(world, outsider, node) == {index: set(), free: set()}, outsider
    for insider in ("vision_member", "vision_admin"):
        assert _pods(world, insider, node) == {index: {"pod-of-vision"}, free: set()}, insider
    for everything in ("auditor", "platform"):
        assert _pods(world, everything, node) == {index: {"pod-of-vision"}, free: {"pod-of-nobody"}}, everything


def test_a_gpu_two_departments_share_shows_its_processes_only_to_who_reads_both(world: World) -> None:
    nlp = grant(world, persona="nlp_member", admin="nlp_admin", project=world.llm, flavor="a100")
    speech = grant(world, persona="speech_member", admin="nlp_admin", project=world.speech_project, flavor="a100")
    node, index = _held_gpu(nlp)
    speech_node, speech_index = _held_gpu(speech)
    observe(node, index=index, pod_uid="pod-of-nlp")
    if (speech_node.pk, speech_index) != (node.pk, index):
        observe(speech_node, index=speech_index, pod_uid="pod-of-speech")
    assert _pods(world, "nlp_member", node)[index] == {"pod-of-nlp"}
    assert _pods(world, "speech_member", node)[index] == set()  # nlp's GPU: above the speech team
    assert _pods(world, "nlp_admin", speech_node)[speech_index] == {"pod-of-speech"}  # the team below nlp

    # Vision gets a share of nlp's GPU (as a time-sliced or MIG GPU would be shared).
    vision = grant(world, persona="vision_member", admin="vision_admin", project=world.seg)
    Reservation.objects.create(allocation=vision, unit=1, node=node, gpu_indices=[index], gpu_milli=500)
    assert _pods(world, "nlp_member", node)[index] == set()
    assert _pods(world, "vision_member", node)[index] == set()
    assert _pods(world, "platform", node)[index] == {"pod-of-nlp"}
