"""The allocation workflow through its services: each transition, and the ones refused."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.utils import timezone

from allocations.grants import changes, services
from allocations.models import Allocation, AllocationState
from audit.models import AuditEvent
from kernel.errors import FieldError, NotAllowed, TransitionNotAllowed
from tests.conftest import World

# Real commits: provisioning is enqueued on commit, exactly as in production.
pytestmark = pytest.mark.django_db(transaction=True)


def request(world: World, *, persona: str = "nlp_member", quantity: int = 2, flavor: str = "a100", days: int = 7,
            project: str = "llm", priority: str = "standard") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona],
        project=getattr(world, project),
        flavor=getattr(world, flavor),
        quantity=quantity,
        priority_class=getattr(world, priority),
        starts_at=start,
        ends_at=start + datetime.timedelta(days=days),
        justification="fine-tuning run",
    )


def quota_file(world: World, namespace: str = "nlp-llm") -> Path:
    return Path(settings.GPUPORTAL_MANIFESTS_DIR) / world.cluster.name / "namespaces" / namespace / "resourcequota-gpuportal-gpu-quota.yaml"


def test_it_requests_approves_and_activates_with_manifests_written(world: World) -> None:
    allocation = request(world)
    assert allocation.state == AllocationState.PENDING

    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk, comment="ok")

    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE
    assert allocation.cluster == world.cluster
    assert allocation.decided_by == world.users["nlp_admin"]
    quota = yaml.safe_load(quota_file(world).read_text())
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"
    assert quota["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuportal"
    namespace = yaml.safe_load(quota_file(world).with_name("namespace-nlp-llm.yaml").read_text())
    assert namespace["metadata"]["labels"]["gpuportal.io/department"] == "nlp"
    actions = list(AuditEvent.objects.filter(target_id=str(allocation.pk), target_type="allocations.allocation")
                   .order_by("seq").values_list("action", flat=True))
    assert actions == ["allocation.requested", "allocation.approved", "allocation.provisioning", "allocation.activated"]


def test_it_sums_a_projects_allocations_into_one_quota(world: World) -> None:
    for quantity in (1, 3):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request(world, quantity=quantity).pk)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request(world, flavor="mig", quantity=5).pk)
    hard = yaml.safe_load(quota_file(world).read_text())["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "4"
    assert hard["requests.nvidia.com/mig-1g.10gb"] == "5"
    assert hard["requests.cpu"] == f"{4 * 8000 + 5 * 2000}m"


def test_it_shrinks_the_quota_on_release_and_prunes_after_the_last(world: World) -> None:
    first = request(world, quantity=1)
    second = request(world, quantity=2)
    for allocation in (first, second):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)

    services.allocation_release(actor=world.users["nlp_member"], allocation_id=first.pk)
    assert yaml.safe_load(quota_file(world).read_text())["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"

    services.allocation_release(actor=world.users["nlp_member"], allocation_id=second.pk)
    assert not quota_file(world).parent.exists()
    second.refresh_from_db()
    assert second.state == AllocationState.RELEASED


def test_it_rejects_with_a_comment_and_then_refuses_approval(world: World) -> None:
    allocation = request(world)
    with pytest.raises(FieldError) as missing:
        services.allocation_reject(actor=world.users["nlp_admin"], allocation_id=allocation.pk, comment=" ")
    assert missing.value.fields == {"comment": ["A rejection needs a comment for the requester."]}

    services.allocation_reject(actor=world.users["nlp_admin"], allocation_id=allocation.pk, comment="no budget")
    with pytest.raises(TransitionNotAllowed):
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.REJECTED
    assert allocation.decision_comment == "no budget"


def test_it_cancels_a_pending_request_released_by_its_requester(world: World) -> None:
    allocation = request(world)
    services.allocation_release(actor=world.users["nlp_member"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.CANCELLED


def test_it_expires_allocations_past_their_end_and_frees_the_quota(world: World) -> None:
    allocation = request(world, quantity=8)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    blocked = request(world, quantity=1)

    later = allocation.ends_at + datetime.timedelta(seconds=1)
    assert services.allocations_expire(now=later) == 2  # the pending one has ended too

    allocation.refresh_from_db()
    assert allocation.state == AllocationState.EXPIRED
    assert not quota_file(world).parent.exists()
    blocked.refresh_from_db()
    assert blocked.state == AllocationState.EXPIRED
    assert services.allocations_expire(now=later) == 0


def test_it_renews_forward_only_and_within_the_longest_duration(world: World) -> None:
    allocation = request(world, days=7)
    later = allocation.ends_at + datetime.timedelta(days=3)
    changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=allocation.pk, ends_at=later)
    allocation.refresh_from_db()
    assert allocation.ends_at == later

    with pytest.raises(FieldError) as backwards:
        changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=allocation.pk,
                                 ends_at=later - datetime.timedelta(days=1))
    assert "ends_at" in backwards.value.fields
    with pytest.raises(FieldError):
        changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=allocation.pk,
                                 ends_at=timezone.now() + datetime.timedelta(days=settings.GPUPORTAL_MAX_ALLOCATION_DAYS + 1))


def test_it_lets_only_the_departments_admins_decide(world: World) -> None:
    allocation = request(world)
    for persona in ("nlp_member", "vision_admin", "auditor", "speech_member"):
        with pytest.raises(NotAllowed):
            services.allocation_approve(actor=world.users[persona], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.PENDING


def test_it_refuses_requests_for_projects_the_user_is_not_in(world: World) -> None:
    with pytest.raises(FieldError) as outsider:
        request(world, persona="vision_member", project="llm")
    assert "project" in outsider.value.fields
    with pytest.raises(NotAllowed):
        request(world, persona="auditor", project="llm")


def test_it_marks_the_allocation_failed_with_the_reason_when_the_push_keeps_failing(
    world: World, settings: object, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the manifests folder should be")
    settings.GPUPORTAL_MANIFESTS_DIR = blocker  # type: ignore[attr-defined]
    allocation = request(world)

    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)

    allocation.refresh_from_db()
    assert allocation.state == AllocationState.FAILED
    assert "cannot write manifests" in allocation.failure_reason
    assert AuditEvent.objects.filter(action="allocation.failed", target_id=str(allocation.pk)).exists()

    settings.GPUPORTAL_MANIFESTS_DIR = tmp_path / "manifests"  # type: ignore[attr-defined]
    services.allocation_retry(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE


def test_it_keeps_an_observed_gpu_uuid_when_labels_refresh_the_node(world: World) -> None:
    from clusters.inventory import GpuSpec, node_upsert
    from clusters.models import Gpu

    node = world.cluster.nodes.get(name="h100-0")
    Gpu.objects.filter(node=node, index=0).update(uuid="GPU-11111111-2222-3333-4444-555555555555")
    node_upsert(actor=None, cluster=world.cluster, name="h100-0", cpu_millicores=128000, memory_mib=1048576,
                gpus=[GpuSpec(index=i, model="NVIDIA-H100-80GB-HBM3", memory_mib=81920) for i in range(8)])
    assert Gpu.objects.get(node=node, index=0).uuid == "GPU-11111111-2222-3333-4444-555555555555"
