"""The platform overview: a platform admin's first look at the clusters' health (sync, deliveries,
node reports), their allocation and busy GPUs now, the decisions waiting, the failed pushes and the
signals of trouble the portal has; linked from the dashboard and the navigation. Others get 403."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Quota, RuleChangeKind
from allocations.rules.changes import rule_change_propose
from allocations.windows.services import quota_window_create
from allocations.windows.terms import WindowTerms
from clusters.models import Cluster, ClusterPush, Gpu, Node, PushState
from telemetry.models import NodeReportState, ObservedGpu
from tests.conftest import World
from tests.frontend.conftest import Login, pending

pytestmark = pytest.mark.django_db


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip())


def section(html: str, section_id: str) -> str:
    found = re.search(rf'<section[^>]* id="{section_id}".*?</section>', html, re.S)
    assert found is not None, section_id
    return found.group(0)


def reporting(node: Node, *, stale: bool, busy: int | None = None) -> None:
    now = timezone.now()
    stale_at = now - datetime.timedelta(minutes=1) if stale else now + datetime.timedelta(minutes=5)
    NodeReportState.objects.create(node=node, received_at=now, collected_at=now, stale_at=stale_at)
    if busy is not None:
        gpu = Gpu.objects.get(node=node, index=0)
        ObservedGpu.objects.create(node=node, uuid=f"GPU-{node.pk}-0", gpu=gpu, index=0, name=gpu.model,
                                   first_seen_at=now, last_seen_at=now, gpu_percent=busy, memory_percent=10)


@pytest.mark.parametrize(("persona", "status"), [
    ("platform", 200), ("nlp_admin", 403), ("nlp_member", 403), ("auditor", 403), ("nobody", 403),
])
def test_only_platform_admins_see_the_overview(world: World, login: Login, persona: str, status: int) -> None:
    assert login(persona).get("/platform/").status_code == status


def test_someone_signed_out_is_sent_to_sign_in(world: World, login: Login) -> None:
    response = login(None).get("/platform/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_dashboard_leads_platform_admins_to_it(world: World, login: Login) -> None:
    html = login("platform").get("/").content.decode()
    assert 'href="/platform/">Open the platform overview</a>' in section(html, "platform-overview-link")
    for persona in ("nlp_admin", "nlp_member"):
        assert "/platform/" not in login(persona).get("/").content.decode()


def test_it_shows_each_clusters_health_allocation_and_busy_gpus_now(world: World, login: Login) -> None:
    a100_0, a100_1 = Node.objects.get(cluster=world.cluster, name="a100-0"), Node.objects.get(cluster=world.cluster, name="a100-1")
    reporting(a100_0, stale=False, busy=60)
    reporting(a100_1, stale=True)
    allocation = pending(world, quantity=2)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    broken = Cluster.objects.create(name="broken", last_sync_at=timezone.now(), last_sync_error="connection refused")
    ClusterPush.objects.create(cluster=broken, available_at=timezone.now(), state=PushState.FAILED, attempts=8,
                               last_error="certificate expired")
    html = login("platform").get("/platform/").content.decode()
    row = text_of(re.search(rf'<tr id="cluster-{world.cluster.pk}">.*?</tr>', html, re.S).group(0))  # type: ignore[union-attr]
    assert "stale nodes" in row and "2 of 3 1 stale" in row  # two nodes report, one of them stopped
    assert "2 GPU-eq. (8 %)" in row  # 2 of 24 GPUs held now
    assert "60 % of 1 GPU read" in row
    broken_row = text_of(re.search(rf'<tr id="cluster-{broken.pk}">.*?</tr>', html, re.S).group(0))  # type: ignore[union-attr]
    assert "error" in broken_row and "1 failed" in broken_row
    failed = text_of(section(html, "failed-pushes"))
    assert "Failed pushes (1)" in failed and "certificate expired" in failed and "cluster-wide objects" in failed
    signals = text_of(section(html, "signals"))
    assert "broken: the last sync failed: connection refused" in signals and "broken: 1 failed push(es)" in signals
    assert "test-cluster: 1 of 2 node(s) stopped reporting" in signals
    assert "receives no firing alerts" in signals


def test_it_counts_the_decisions_waiting_and_links_to_the_queue(world: World, login: Login, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = True
    pending(world)
    pending(world, persona="vision_member", project="seg", flavor="h100")
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    begins = timezone.now() + datetime.timedelta(days=1)
    terms = WindowTerms(kind="temporary", begins_at=begins, ends_at=begins + datetime.timedelta(hours=4),
                        limit_delta=Decimal(2))
    quota_window_create(actor=world.users["nlp_admin"], quota_id=quota.pk, terms=terms, justification="x")
    rule_change_propose(actor=world.users["platform"], kind=RuleChangeKind.QUOTA_UPDATE, quota_id=quota.pk,
                        fields={"limit": Decimal(12)})
    html = login("platform").get("/platform/").content.decode()
    decisions = section(html, "decisions")
    assert "Waiting for a decision (4)" in text_of(decisions)
    assert '<a href="/approvals/"><strong>2</strong> requests for GPUs</a>' in decisions
    assert '<a href="/approvals/#changes-title"><strong>0</strong> changes to grants</a>' in decisions
    assert '<a href="/approvals/#rule-changes-title"><strong>1</strong> change of the rules</a>' in decisions
    assert '<a href="/approvals/#windows-title"><strong>1</strong> quota window</a>' in decisions


def test_a_quiet_platform_says_so(world: World, login: Login) -> None:
    html = login("platform").get("/platform/").content.decode()
    assert 'id="no-signals"' in html and "No push has failed." in html
    assert "Waiting for a decision</h2>" in html


def test_the_page_needs_no_inline_style_or_script(world: World, login: Login) -> None:
    html = login("platform").get("/platform/").content.decode()
    assert "style=" not in html and "<style" not in html
    assert re.search(r"<[^>]*\son[a-z]+=", html) is None
