"""Query budgets: every API list and every portal page runs as many queries with 3N rows as with N.

Each test measures every endpoint once on the role-matrix scene grown by N rows of every kind,
grows it by 2N more, measures again and compares. A count that grows with the rows is an N+1:
fix it in the selector or view (select_related, prefetch_related, one grouped query), not here.
Lists are read with a page size that holds every row, so pagination cannot hide a per-row query.
The one cost allowed to grow is the placement preview's: a fixed number of queries per candidate
cluster (it dry-runs the engine on each), whatever the number of requests previewed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounting.idle_models import IdleCase, IdlePolicy, IdleState
from allocations.grants import changes, services
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, ProjectQuota, Quota, SharingMode
from allocations.quotas.usage import department_usage, quota_usages
from audit.models import AuditEvent
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, ClusterDrift, ClusterPush, PushState
from frontend.feedback import request_feedback
from kernel.reads import SharedReads
from telemetry.models import GpuSample, SampleTier
from tenants.access import department_parent_map, department_subtree_ids
from tenants.access_tokens import access_token_create, access_token_revoke
from tenants.models import Department, Membership, Project, Role
from tests.conftest import A100, H100
from tests.foundation.conftest_matrix import (  # noqa: F401 (fixtures)
    Scene,
    audit_keys_fixture,
    granted,
    idle_case_open,
    observe,
    request,
    scene_fixture,
)

N = 2
PAGE = {"page_size": 500}


@pytest.fixture(autouse=True)
def _room(scene: Scene) -> None:
    """Quotas large enough for every approval the growth makes."""
    Quota.objects.update(limit=Decimal(1000))


@dataclass
class Grown:
    """The rows added so far, for names that stay unique as the scene grows."""

    rounds: int = 0


def grow(scene: Scene, count: int, grown: Grown) -> None:
    """Add ``count`` rows of every kind the API and the portal list."""
    world = scene.world
    for _ in range(count):
        grown.rounds += 1
        tag = grown.rounds
        request(world, persona="nlp_member", project=world.llm, flavor=world.a100)
        request(world, persona="speech_member", project=world.speech_project, flavor=world.a100)
        request(world, persona="vision_member", project=world.seg, flavor=world.h100)
        idle = granted(world, persona="nlp_member", admin="nlp_admin", project=world.llm, flavor=world.a100)
        granted(world, persona="vision_member", admin="vision_admin", project=world.seg, flavor=world.h100)
        kept = idle_case_open(idle, policy=scene.idle_policy)
        IdleCase.objects.filter(pk=kept.pk).update(state=IdleState.KEPT, closed_at=timezone.now(), reason="grown")
        idle_case_open(idle, policy=IdlePolicy.objects.create(name=f"idle-{tag}", department=world.nlp))
        project = Project.objects.create(slug=f"nlp-extra-{tag}", name=f"Extra {tag}", department=world.nlp)
        project.members.add(world.users["nlp_member"])
        colleague = User.objects.create_user(username=f"colleague-{tag}")
        Membership.objects.create(user=colleague, department=world.nlp, role=Role.RESEARCHER)
        world.llm.members.add(colleague)
        ProjectQuota.objects.create(project=project, flavor=world.a100, limit=Decimal(2))
        team = Department.objects.create(slug=f"nlp-team-{tag}", name=f"Team {tag}", parent=world.nlp)
        Membership.objects.create(user=world.users["platform"], department=team, role=Role.RESEARCHER)
        flavor = Flavor.objects.create(
            name=f"h100-half-{tag}", display_name=f"H100 half {tag}", gpu_model=H100, sharing_mode=SharingMode.MPS,
            resource_name="nvidia.com/gpu.shared", replicas=2, memory_mib=40960, compute_percent=50,
            gpu_equivalents=Decimal("0.5"),
        )
        for department in (world.nlp, world.vision, team):
            Quota.objects.create(department=department, flavor=flavor, guaranteed=Decimal(0), limit=Decimal(4))
        Quota.objects.create(department=team, flavor=None, guaranteed=Decimal(0), limit=Decimal(2))
        PriorityClass.objects.create(name=f"gpu-extra-{tag}", value=500 + tag)
        # Inactive: the cluster lists and pages show it, a placement preview does not try it (a
        # preview reads each candidate cluster: test_a_preview_reads_each_candidate_cluster_once).
        other = Cluster.objects.create(name=f"extra-cluster-{tag}", is_active=False)
        ClusterPush.objects.create(cluster=other, available_at=timezone.now(), state=PushState.FAILED,
                                   last_error=f"refused {tag}")  # the platform overview lists the failed pushes
        node_upsert(actor=None, cluster=other, name=f"far-{tag}", cpu_millicores=64000, memory_mib=524288,
                    gpus=[GpuSpec(index=0, model=A100, memory_mib=81920, mig_capable=True)])
        node = node_upsert(
            actor=None, cluster=world.cluster, name=f"extra-{tag}", cpu_millicores=64000, memory_mib=524288,
            gpus=[GpuSpec(index=i, model=A100, memory_mib=81920, mig_capable=True) for i in range(2)],
        )
        observe(node, pod_uid=f"pod-{tag}")
        observe(scene.node, index=tag, pod_uid=f"pod-{tag}")  # h100-0 has GPUs 0..7; the scene observed 0
        ClusterDrift.objects.create(cluster=world.cluster, kind="ResourceQuota", namespace="nlp-llm", name=f"q{tag}",
                                    change="changed")
        world.client("platform").post(
            "/api/v1/node-tokens/", {"cluster": world.cluster.pk, "node_name": node.name}, format="json"
        )
        for persona in ("platform", "nlp_member"):
            issued = access_token_create(actor=world.users[persona], name=f"grown {tag}", scope="read")
            if tag % 2:
                access_token_revoke(actor=world.users[persona], token_id=issued.token.pk)
        GpuSample.objects.create(gpu=scene.observed, tier=SampleTier.FIVE_MINUTES,
                                 at=timezone.now() - datetime.timedelta(minutes=10 + tag), gpu_percent=50.0)


def counted(call: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = call()
        assert response.status_code == 200, getattr(response, "content", b"")[:500]
        if getattr(response, "streaming", False):
            response.getvalue()
    return len(queries.captured_queries)


def measure(calls: dict[str, Callable[[], Any]]) -> dict[str, int]:
    for call in calls.values():  # warm what is cached per process or per user object
        call()
    return {name: counted(call) for name, call in calls.items()}


def api_calls(scene: Scene) -> dict[str, Callable[[], Any]]:
    world = scene.world

    def get(route: str, persona: str = "platform", params: dict[str, Any] | None = None, paged: bool = True,
            **kwargs: Any) -> Callable[[], Any]:  # fmt: skip
        url = reverse(route, kwargs=kwargs)  # page_size only where there are pages: elsewhere it is unknown (400)
        return lambda: world.client(persona).get(url, {**(PAGE if paged else {}), **(params or {})})

    cluster = world.cluster.pk
    return {
        "me": get("api-me", paged=False),
        "departments": get("api-departments"),
        "projects": get("api-projects"),
        "flavors": get("api-flavors"),
        "priority-classes": get("api-priority-classes"),
        "quotas": get("api-quotas"),
        "quotas (nlp_member)": get("api-quotas", "nlp_member"),
        "allocations": get("api-allocations"),
        "allocations (nlp_member)": get("api-allocations", "nlp_member"),
        "clusters": get("api-clusters"),
        "nodes": get("api-nodes"),
        "cluster drift": get("api-cluster-drift", cluster_id=cluster),
        "cluster pushes": get("api-cluster-pushes", cluster_id=cluster),
        "node tokens": get("api-node-tokens"),
        "telemetry nodes": get("api-telemetry-nodes"),
        "telemetry node": get("api-telemetry-node", node_id=scene.node.pk, paged=False),
        "gpu samples": get("api-telemetry-gpu-samples", gpu_id=scene.observed.pk),
        "audit events": get("audit:event-list", "auditor", {"action": "allocation.requested"}),
        "audit events (nlp_admin)": get("audit:event-list", "nlp_admin", {"action": "allocation.requested"}),
        "audit export": get("audit:export", "auditor", {"action": "allocation.requested"}, paged=False),
        "fair share": get("api-fair-share", paged=False),
        "idle policies": get("api-idle-policies"),
        "idle cases": get("api-idle-cases"),
        "idle cases (nlp_member)": get("api-idle-cases", "nlp_member"),
        "access tokens": get("api-access-tokens"),
        "department members": get("api-department-members", "nlp_member", department_id=world.nlp.pk),
        "project members": get("api-project-members", "nlp_member", project_id=world.llm.pk),
    }


def test_api_lists_run_as_many_queries_for_3n_rows_as_for_n(scene: Scene) -> None:
    grown = Grown()
    grow(scene, N, grown)
    calls = api_calls(scene)
    small = measure(calls)
    grow(scene, 2 * N, grown)
    assert measure(calls) == small


def portal_calls(scene: Scene, detail: Allocation) -> dict[str, Callable[[], Any]]:
    world = scene.world
    clients: dict[str | None, Client] = {}

    def client(persona: str | None) -> Client:
        if persona not in clients:
            clients[persona] = Client()
            if persona is not None:
                clients[persona].force_login(world.users[persona])
        return clients[persona]

    def get(route: str, persona: str | None, params: dict[str, Any] | None = None, **kwargs: Any) -> Callable[[], Any]:
        url = reverse(route, kwargs=kwargs)
        return lambda: client(persona).get(url, params or {})

    cluster = world.cluster.pk
    requested = {"action": "allocation.requested"}
    event = AuditEvent.objects.filter(action="allocation.requested", target_id=str(detail.pk)).values_list("seq", flat=True).get()
    queued = Allocation.objects.filter(state=AllocationState.PENDING, project=world.llm).order_by("pk").values_list(
        "pk", flat=True).first()
    return {
        "login": get("login", None),
        "dashboard": get("home", "nlp_member"),
        "dashboard (platform)": get("home", "platform"),
        "request form": get("allocation-new", "nlp_admin"),
        "request feedback": get("allocation-feedback", "nlp_member", {
            "project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "priority_class": world.standard.pk,
            "duration_days": 2,  # with the window, the feedback also says what approval would do
        }),
        "allocation detail": get("allocation-detail", "nlp_member", allocation_id=detail.pk),
        "allocation detail (nlp_admin, usage guide as viewer)": get("allocation-detail", "nlp_admin", allocation_id=detail.pk),
        "approvals": get("approvals", "nlp_admin"),
        # A row beyond the queue's first: the same decision, read alone when the row comes into view.
        "approvals row decision": get("approval-decision", "nlp_admin", allocation_id=queued),
        "department usage": get("department-usage", "nlp_admin"),
        "department usage (platform)": get("department-usage", "platform"),
        "clusters": get("clusters", "platform"),
        "cluster detail": get("cluster-detail", "platform", cluster_id=cluster),
        "catalogue": get("catalogue", "platform"),
        "platform overview": get("platform-overview", "platform"),
        "new flavor form": get("catalogue-flavor-new", "platform"),
        "new quota form": get("catalogue-quota-new", "platform"),
        "quota form": get("catalogue-quota-edit", "platform", quota_id=Quota.objects.filter(department=world.nlp).earliest("pk").pk),
        "priority class form": get("catalogue-priority-class-edit", "platform", priority_class_id=world.standard.pk),
        "audit log": get("audit-log", "auditor", requested),
        "audit log (nlp_admin)": get("audit-log", "nlp_admin", requested),
        "audit export": get("audit-export", "auditor", {**requested, "output": "csv"}),
        "audit event": get("audit-event", "auditor", seq=event),
        "audit event (nlp_admin)": get("audit-event", "nlp_admin", seq=event),
        "fair share": get("fair-share", "nlp_member"),
        "fair share (platform)": get("fair-share", "platform"),
        "idle grants": get("idle-cases", "nlp_member"),
        "idle grants (nlp_admin)": get("idle-cases", "nlp_admin"),
        "api tokens": get("api-tokens", "nlp_member"),
        "department page": get("department", "nlp_admin", department_id=world.nlp.pk),
        "department page (platform)": get("department", "platform", department_id=world.nlp.pk),
        "departments (platform)": get("departments", "platform"),
        "notification preferences": get("notification-preferences", "nlp_member"),
    }


def renewed(allocation: Allocation, *, times: int, actor: Any) -> None:
    for _ in range(times):
        allocation.refresh_from_db()
        changes.allocation_renew(actor=actor, allocation_id=allocation.pk,
                                 ends_at=allocation.ends_at + datetime.timedelta(hours=1))


def test_portal_pages_run_as_many_queries_for_3n_rows_as_for_n(scene: Scene) -> None:
    world = scene.world
    member = world.users["nlp_member"]
    # The allocation page lists one allocation's units, history and pushes: one of N, one of 3N.
    small = granted(world, persona="nlp_member", admin="nlp_admin", project=world.llm, flavor=world.a100, quantity=N)
    large = granted(world, persona="nlp_member", admin="nlp_admin", project=world.llm, flavor=world.a100,
                    quantity=3 * N)
    renewed(small, times=N, actor=member)
    renewed(large, times=3 * N, actor=member)
    grown = Grown()
    grow(scene, N, grown)
    before = measure(portal_calls(scene, small))
    grow(scene, 2 * N, grown)
    assert measure(portal_calls(scene, large)) == before


def test_the_growth_reaches_every_list(scene: Scene) -> None:
    """Guards the measurement: each list the budgets read really grows with ``grow``."""
    calls = api_calls(scene)
    sizes: dict[str, int] = {}
    for name, call in calls.items():
        body = call()
        if name == "fair share":  # the tree, not a page: its rows
            sizes[name] = len(body.json()["rows"])
        elif name not in ("me", "telemetry node", "audit export"):
            sizes[name] = body.json()["count"]
    sizes["telemetry node"] = len(calls["telemetry node"]().json()["gpus"])
    sizes["me"] = len(calls["me"]().json()["memberships"])
    grow(scene, N, Grown())
    for name, call in calls.items():
        if name == "telemetry node":
            assert len(call().json()["gpus"]) > sizes[name]
        elif name == "me":
            assert len(call().json()["memberships"]) > sizes[name]
        elif name == "fair share":
            assert len(call().json()["rows"]) > sizes[name]
        elif name in sizes:
            assert call().json()["count"] > sizes[name], name


def test_quota_usage_in_one_query_matches_the_admission_sum(scene: Scene) -> None:
    """``quota_usages`` reads one aggregated query; admission sums per quota. Both say the same."""
    grow(scene, N, Grown())
    services.allocation_request(
        actor=scene.world.users["nlp_member"], project=scene.world.llm, flavor=scene.world.mig, quantity=3,
        priority_class=scene.world.standard, starts_at=timezone.now(),
        ends_at=timezone.now() + datetime.timedelta(days=1), justification="mig",
    )
    granted(scene.world, persona="nlp_member", admin="nlp_admin", project=scene.world.llm, flavor=scene.world.mig,
            quantity=3)
    parents = department_parent_map()
    quotas = list(Quota.objects.select_related("flavor"))
    for usage in quota_usages(quotas=quotas):
        subtree = department_subtree_ids(root_ids=[usage.quota.department_id], parents=parents)
        expected = department_usage(department_ids=subtree, flavor=usage.quota.flavor)
        assert (usage.in_use, str(usage.in_use)) == (expected, str(expected)), usage.quota


def preview_queries_per_cluster() -> int:
    """The cluster's placement version with its inventory fingerprint (allocations.booking.state);
    then, on SQLite, which keeps no placement state between requests, its nodes, their GPUs and the
    live reservations on them. On PostgreSQL the process keeps the state (warmed by ``measure``)
    and nothing changed since: the one query is all."""
    return 1 if connection.vendor == "postgresql" else 4


def test_a_preview_reads_each_candidate_cluster_once(scene: Scene) -> None:
    """The request form's feedback and the approvals queue dry-run the engine on every candidate
    cluster: each added cluster costs the same few queries, and the queue pays them once, not once
    per pending request."""
    world = scene.world
    for quantity in (1, 2, 3):
        request(world, persona="nlp_member", project=world.llm, flavor=world.a100, quantity=quantity)
    admin = Client()
    admin.force_login(world.users["nlp_admin"])
    params = {"project": world.llm.pk, "flavor": world.a100.pk, "quantity": 1, "priority_class": world.standard.pk,
              "duration_days": 2}
    calls = {
        "request feedback": lambda: admin.get(reverse("allocation-feedback"), params),
        "approvals": lambda: admin.get(reverse("approvals")),
    }
    counts = [measure(calls)]
    for tag in range(2):
        cluster = Cluster.objects.create(name=f"candidate-{tag}")
        node_upsert(actor=None, cluster=cluster, name=f"node-{tag}", cpu_millicores=64000, memory_mib=524288,
                    gpus=[GpuSpec(index=0, model=A100, memory_mib=81920, mig_capable=True)])
        counts.append(measure(calls))
    for before, after in zip(counts, counts[1:], strict=False):
        assert {name: after[name] - before[name] for name in calls} == dict.fromkeys(
            calls, preview_queries_per_cluster()
        )


def test_feedback_with_shared_reads_matches_feedback_read_alone(scene: Scene) -> None:
    """The approvals queue shares reads among its rows; each row says what it says read alone."""
    world = scene.world
    grow(scene, 1, Grown())
    for quantity, flavor in ((2, world.a100), (3, world.mig), (1, world.mps), (40, world.a100)):
        request(world, persona="nlp_member", project=world.llm, flavor=flavor, quantity=quantity)
    shared = SharedReads()
    pending = list(Allocation.objects.filter(state="pending").select_related("project", "flavor", "priority_class"))
    assert len(pending) >= 6
    for allocation in pending:
        fields: dict[str, Any] = {"project": allocation.project, "flavor": allocation.flavor, "quantity": allocation.quantity,
                                  "cluster": allocation.cluster}
        assert request_feedback(**fields, reads=shared) == request_feedback(**fields), allocation
