"""The scene the role matrix and the query budgets run against: the shared ``world`` plus one object
of every kind the API serves, spread over the departments so that a leak shows.

Import the fixtures into a test module with
``from tests.foundation.conftest_matrix import audit_keys_fixture, scene_fixture  # noqa: F401``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from accounting.models import IdleCase, IdlePolicy, IdleState, RateCard, Statement
from allocations.grants import changes, services
from allocations.models import Allocation, AllocationChange, Flavor, Quota, QuotaWindow, RuleChange, RuleChangeKind
from allocations.rules import changes as rule_changes
from allocations.windows import services as window_services
from allocations.windows.terms import WindowTerms
from audit.checkpoints import checkpoint_publish
from audit.integrity.keys import signing_key_generate
from audit.models import AuditCheckpoint
from clusters.models import ClusterDrift, Gpu, Node
from telemetry.models import GpuSample, NodeReportState, NodeToken, ObservedGpu, SampleTier
from tenants.models import Project, Role
from tests.conftest import World

AUDIT_ORIGIN = "test.gpuportal/matrix"


@dataclass
class Scene:
    world: World
    pending: Allocation  # nlp (project nlp-llm), pending
    failed: Allocation  # nlp, granted then failed to provision: the one retry applies to
    speech: Allocation  # nlp-speech (a team under nlp), pending
    vision: Allocation  # vision (project vision-seg), granted
    change: AllocationChange  # vision's allocation raised to 2 units by vision_member: pending approval
    quota: Quota  # nlp's quota of a100 units
    window: QuotaWindow  # on nlp's quota of a100 units, asked for by nlp_admin: pending approval
    vision_window: QuotaWindow  # on vision's quota of h100 units, asked for by vision_admin: pending
    rule_change: RuleChange  # nlp's a100 quota's limit to 9, proposed by a second platform admin: pending
    node: Node  # h100-0, where vision's allocation runs: its observed GPU shows vision's process
    observed: ObservedGpu
    token: NodeToken  # for node h100-0
    token_text: str
    drift: ClusterDrift
    checkpoint: AuditCheckpoint
    rate_card: RateCard  # a100, EUR
    statement: Statement  # nlp's, last month
    idle_policy: IdlePolicy  # everywhere, reclaim
    idle_case: IdleCase  # on nlp's failed grant (requested by nlp_member), warned



def request(world: World, *, persona: str, project: Project, flavor: Flavor, quantity: int = 1) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=flavor, quantity=quantity, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="role matrix",
    )


def granted(world: World, *, persona: str, admin: str, project: Project, flavor: Flavor, quantity: int = 1) -> Allocation:
    allocation = request(world, persona=persona, project=project, flavor=flavor, quantity=quantity)
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk, comment="ok")


def failed(world: World) -> Allocation:
    allocation = granted(world, persona="nlp_member", admin="nlp_admin", project=world.llm, flavor=world.a100)
    services.allocation_provision_start(allocation_id=allocation.pk)
    return services.allocation_provision_failed(allocation_id=allocation.pk, reason="cluster unreachable")


def observe(node: Node, *, index: int = 0, pod_uid: str = "pod-of-vision") -> ObservedGpu:
    """What an agent would have reported about one GPU of ``node``, with one process on it."""
    now = timezone.now()
    gpu = Gpu.objects.get(node=node, index=index)
    NodeReportState.objects.update_or_create(
        node=node, defaults={"received_at": now, "collected_at": now, "stale_at": now + datetime.timedelta(minutes=5)}
    )
    observed = ObservedGpu.objects.create(
        node=node, uuid=f"GPU-{node.pk}-{index}", gpu=gpu, index=index, name=gpu.model, first_seen_at=now, last_seen_at=now, gpu_percent=40, memory_percent=20,
        processes=[{"pid": 4242, "used_memory_bytes": 1 << 30, "gpu_instance_id": None, "compute_instance_id": None,
                    "mig_uuid": None, "pod_uid": pod_uid, "container_id": "containerd://abc"}],
    )
    GpuSample.objects.create(
        gpu=observed, tier=SampleTier.FIVE_MINUTES, at=now - datetime.timedelta(minutes=10), gpu_percent=40.0
    )
    return observed


def window_ask(world: World, *, persona: str, quota: Quota) -> QuotaWindow:
    """A pending temporary window that raises ``quota``'s limit by 2 units from tomorrow, for a day."""
    start = timezone.now() + datetime.timedelta(days=1)
    return window_services.quota_window_create(
        actor=world.users[persona], quota_id=quota.pk, justification="role matrix",
        terms=WindowTerms(kind="temporary", begins_at=start, ends_at=start + datetime.timedelta(days=1),
                          limit_delta=Decimal(2)),
    )


def scene_build(world: World) -> Scene:
    node = Node.objects.get(cluster=world.cluster, name="h100-0")
    issued = world.client("platform").post(
        "/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": node.name}, format="json"
    ).json()
    vision = granted(world, persona="vision_member", admin="vision_admin", project=world.seg, flavor=world.h100)
    raised = changes.allocation_resize(actor=world.users["vision_member"], allocation_id=vision.pk, quantity=2).change
    assert raised is not None
    quota = Quota.objects.get(department=world.nlp, flavor=world.a100)
    failed_grant = failed(world)
    idle_policy = IdlePolicy.objects.create(name="matrix", action="reclaim")
    proposer = world.persona_add("platform_second", role=Role.PLATFORM_ADMIN, department=world.acme)
    proposed = rule_changes.rule_change_propose(actor=proposer, kind=RuleChangeKind.QUOTA_UPDATE, quota_id=quota.pk,
                                                fields={"limit": Decimal(9)}).change
    assert proposed is not None
    return Scene(
        world=world,
        pending=request(world, persona="nlp_member", project=world.llm, flavor=world.a100),
        failed=failed_grant,
        speech=request(world, persona="speech_member", project=world.speech_project, flavor=world.a100),
        vision=vision,
        change=raised,
        quota=quota,
        window=window_ask(world, persona="nlp_admin", quota=quota),
        vision_window=window_ask(world, persona="vision_admin", quota=Quota.objects.get(department=world.vision, flavor=world.h100)),
        rule_change=proposed,
        node=node,
        observed=observe(node),
        token=NodeToken.objects.get(pk=issued["id"]),
        token_text=issued["token"],
        drift=ClusterDrift.objects.create(
            cluster=world.cluster, kind="ResourceQuota", namespace="vision-seg", name="gpu", change="changed"
        ),
        checkpoint=checkpoint_publish(),
        rate_card=RateCard.objects.create(
            flavor=world.a100, price_per_gpu_hour=Decimal("2.5"), currency="EUR", valid_from=timezone.now()
        ),
        statement=Statement.objects.create(
            department=world.nlp, period_start=timezone.now() - datetime.timedelta(days=30), period_end=timezone.now(),
            currency="EUR", total=Decimal("0.00"), sha256="0" * 64, closed_at=timezone.now(),
        ),
        idle_policy=idle_policy,
        idle_case=idle_case_open(failed_grant, policy=idle_policy),
    )


def idle_case_open(allocation: Allocation, *, policy: IdlePolicy) -> IdleCase:
    now = timezone.now()
    return IdleCase.objects.create(
        allocation=allocation, policy=policy, state=IdleState.WARNED, opened_at=now, idle_since=now - datetime.timedelta(hours=2),
        idle_minutes=120, last_evaluated_at=now, warned_at=now, action_due_at=now + datetime.timedelta(hours=1),
    )


@pytest.fixture(name="audit_keys")
def audit_keys_fixture(settings: Any, tmp_path: Path) -> None:
    """A signing key and a checkpoint folder, so checkpoints can be published and exported."""
    settings.GPUPORTAL_AUDIT_ORIGIN = AUDIT_ORIGIN
    settings.GPUPORTAL_AUDIT_SIGNING_KEY = signing_key_generate(AUDIT_ORIGIN).private_pem()
    settings.GPUPORTAL_AUDIT_CHECKPOINT_DIR = str(tmp_path / "checkpoints")


@pytest.fixture(name="scene")
def scene_fixture(world: World, audit_keys: None) -> Scene:
    cache.clear()  # the login throttle counts in the cache
    return scene_build(world)
