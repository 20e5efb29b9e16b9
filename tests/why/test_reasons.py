"""Every reason code of docs/pending.md produced by a scenario on the services and asserted
exactly, and the answer agrees with admission: a request said to fit is approved, one said to be
refused is refused with the same code."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from allocations.admission.reasons import ReasonCode, refusal_reasons
from allocations.admission.why import Why, allocation_why
from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass, Quota, QuotaWindow, WindowState
from clusters.models import Node, NodeSharing
from kernel.errors import CapacityExceeded, Conflict, QuotaExceeded
from tests.conftest import World, build_world

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)


def ask(world: World, *, flavor: Flavor, quantity: int = 1, persona: str = "nlp_member", project: str = "llm",
        start: datetime.datetime | None = None, days: float = 1, priority: PriorityClass | None = None) -> Allocation:
    start = start or timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=flavor, quantity=quantity,
        priority_class=priority or world.standard, starts_at=start, ends_at=start + days * DAY, justification="why",
    )


def grant(world: World, allocation: Allocation, admin: str) -> Allocation:
    return services.allocation_approve(actor=world.users[admin], allocation_id=allocation.pk)


def why(world: World, allocation: Allocation, persona: str = "nlp_member") -> Why:
    allocation = Allocation.objects.select_related("project", "flavor", "priority_class", "cluster").get(pk=allocation.pk)
    return allocation_why(allocation=allocation, viewer=world.users[persona])


def test_a_request_that_fits_waits_for_its_departments_admins_by_name(world: World) -> None:
    answer = why(world, ask(world, flavor=world.a100, quantity=2))
    assert answer.primary.code == ReasonCode.AWAITING_DECISION
    assert answer.primary.facts == {"deciders": ["nlp_admin"]}
    assert answer.queue == {"position": 1, "of": 1, "ahead": 0}
    assert answer.estimate is not None and answer.estimate.starts_at is not None


def test_an_admins_own_request_waits_for_another_admin(world: World) -> None:
    answer = why(world, ask(world, flavor=world.a100, persona="nlp_admin"), persona="nlp_admin")
    assert answer.primary.code == ReasonCode.FOUR_EYES
    assert answer.primary.facts == {"deciders": ["platform"]}  # nobody else in nlp or acme: the platform admins


def _vision_holds_ten(world: World) -> Allocation:
    """vision holds 8 H100 for three days and 2 A100 for two hours: 10 of acme's 16 GPU-equivalents."""
    grant(world, ask(world, flavor=world.h100, quantity=8, persona="vision_member", project="seg", days=3), "vision_admin")
    return grant(world, ask(world, flavor=world.a100, quantity=2, persona="vision_member", project="seg",
                            days=2 / 24), "vision_admin")


def test_the_parents_limit_refuses_with_its_numbers_what_would_start_now_and_when(world: World) -> None:
    short = _vision_holds_ten(world)
    request = ask(world, flavor=world.a100, quantity=7)
    answer = why(world, request)
    assert answer.primary.code == ReasonCode.QUOTA
    facts = answer.primary.facts
    assert (facts["level"], facts["department"], facts["flavor"]) == ("department", "acme", None)
    assert (facts["requested"], facts["in_use"], facts["limit"], facts["effective_limit"]) == ("7", "10", "16", "16")
    acme = next(line for line in answer.quota if line["department"] == "acme")
    assert (acme["fits"], acme["limit_now"], acme["in_use_now"]) == (False, "16", "10")
    nlp = [line for line in answer.quota if line["department"] == "nlp"]
    assert nlp and all(line["fits"] for line in nlp)  # the department's own levels leave room: the parent refuses
    fewer = next(offer for offer in answer.alternatives if offer["kind"] == "fewer-units")
    assert fewer["quantity"] == 6
    assert answer.estimate is not None and answer.estimate.starts_at == short.ends_at  # vision's A100s end then
    later = next(offer for offer in answer.alternatives if offer["kind"] == "later-start")
    assert later["starts_at"] == short.ends_at.isoformat()
    # Who holds acme's room: another department, as totals only, borrowed beyond its guarantee (0).
    assert answer.holders is not None and answer.holders["named"] == []
    assert answer.holders["departments"] == [
        {"department": "vision", "grants": 2, "gpu_equivalents": "10", "guaranteed": "0", "borrowed": "10"}]
    with pytest.raises(QuotaExceeded):  # admission agrees
        grant(world, request, "nlp_admin")


def test_a_platform_admin_sees_the_holders_by_name(world: World) -> None:
    _vision_holds_ten(world)
    answer = why(world, ask(world, flavor=world.a100, quantity=7), persona="platform")
    assert answer.holders is not None and len(answer.holders["named"]) == 2 and answer.holders["departments"] == []


def test_a_window_that_raises_the_limit_later_makes_it_outside_a_window(world: World) -> None:
    quota = Quota.objects.get(department=world.nlp, flavor=world.a100)
    begins = timezone.now() + datetime.timedelta(days=2)
    window = QuotaWindow.objects.create(quota=quota, kind="temporary", state=WindowState.APPROVED, begins_at=begins,
                                        ends_at=begins + DAY, limit=Decimal("12"), requested_by=world.users["platform"])
    answer = why(world, ask(world, flavor=world.a100, quantity=9, days=0.5))
    assert answer.primary.code == ReasonCode.OUTSIDE_WINDOW
    assert (answer.primary.facts["department"], answer.primary.facts["limit"]) == ("nlp", "8")
    assert (answer.primary.facts["window"], answer.primary.facts["window_limit"]) == (window.pk, "12")
    assert answer.estimate is not None and answer.estimate.starts_at == begins


def test_no_room_on_the_gpus_is_no_fit_with_the_holders_of_the_model(db: None) -> None:
    world = build_world(a100_gpus=2)
    grant(world, ask(world, flavor=world.a100, quantity=1, persona="vision_member", project="seg"), "vision_admin")
    request = ask(world, flavor=world.a100, quantity=2)
    answer = why(world, request)
    assert answer.primary.code == ReasonCode.NO_FIT
    assert answer.primary.facts["kind"] == "whole-gpus" and answer.primary.facts["placed"] == "1"
    assert answer.holders is not None and answer.holders["departments"][0]["department"] == "vision"
    assert [offer["quantity"] for offer in answer.alternatives if offer["kind"] == "fewer-units"] == [1]
    with pytest.raises(CapacityExceeded):
        grant(world, request, "nlp_admin")


def test_nodes_below_the_flavors_minimum_is_driver_minimum(world: World) -> None:
    Flavor.objects.filter(pk=world.a100.pk).update(min_driver_version="535")
    world.a100.refresh_from_db()
    answer = why(world, ask(world, flavor=world.a100))
    assert answer.primary.code == ReasonCode.DRIVER_MINIMUM
    assert answer.primary.facts["cause"] == "driver-minimum"


def test_an_mps_node_serving_another_department_is_tenancy(world: World) -> None:
    Node.objects.filter(name="h100-0").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    grant(world, ask(world, flavor=world.mps, persona="vision_member", project="seg"), "vision_admin")
    answer = why(world, ask(world, flavor=world.mps))
    assert answer.primary.code == ReasonCode.TENANCY
    assert answer.primary.facts["cause"] == "tenancy"


def test_an_approved_request_with_a_later_start_waits_for_it(world: World) -> None:
    start = timezone.now() + DAY
    scheduled = grant(world, ask(world, flavor=world.a100, start=start), "nlp_admin")
    assert scheduled.state == AllocationState.SCHEDULED
    answer = why(world, scheduled)
    assert answer.primary.code == ReasonCode.SCHEDULED_START
    assert answer.primary.facts == {"until": start.isoformat()}
    assert answer.estimate is not None and answer.estimate.starts_at == start


def test_an_approval_that_reclaims_waits_for_the_victims_notice(world: World) -> None:
    Quota.objects.all().delete()  # the reclaim flow's own numbers (tests/quotas/test_reclaim_flow.py)
    for department, guaranteed, limit in ((world.acme, "0", "14"), (world.nlp, "4", "10"), (world.vision, "8", "12")):
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(guaranteed), limit=Decimal(limit))
    grant(world, ask(world, flavor=world.a100, quantity=8, persona="vision_member", project="seg"), "vision_admin")
    grant(world, ask(world, flavor=world.a100, quantity=4, persona="vision_member", project="seg"), "vision_admin")
    request = ask(world, flavor=world.a100, quantity=3)
    before = why(world, request)
    assert before.primary.code == ReasonCode.AWAITING_DECISION
    assert [reason.code for reason in before.secondary] == [ReasonCode.RECLAIM_NOTICE]
    waiting = grant(world, request, "nlp_admin")
    assert waiting.state == AllocationState.SCHEDULED
    answer = why(world, waiting)
    assert answer.primary.code == ReasonCode.RECLAIM_NOTICE
    deadline = Allocation.objects.filter(reclaimed_for=waiting).values_list("reclaim_deadline", flat=True).get()
    assert deadline is not None and answer.primary.facts == {"until": deadline.isoformat()}


def test_an_approved_grant_on_its_way_is_provisioning_and_a_failing_cluster_is_unreachable(world: World) -> None:
    approved = grant(world, ask(world, flavor=world.a100), "nlp_admin")
    assert why(world, approved).primary.code == ReasonCode.PROVISIONING
    world.cluster.last_sync_error = "connection refused"
    world.cluster.save(update_fields=["last_sync_error"])
    answer = why(world, approved)
    assert answer.primary.code == ReasonCode.CLUSTER_UNREACHABLE
    assert answer.primary.facts == {"cluster": "test-cluster", "error": "connection refused"}


def test_a_refusal_admission_has_no_code_for_is_unknown() -> None:
    primary, secondary = refusal_reasons(Conflict("Something else.", details={"x": "1"}))
    assert (primary.code, primary.facts, secondary) == (ReasonCode.UNKNOWN, {"code": "conflict", "x": "1"}, [])


def test_the_queue_counts_the_requests_the_same_admins_see_oldest_first(world: World) -> None:
    first = ask(world, flavor=world.a100)
    ask(world, flavor=world.a100, persona="speech_member", project="speech_project")
    ask(world, flavor=world.h100, persona="vision_member", project="seg")  # another admin's queue
    last = ask(world, flavor=world.a100)
    assert why(world, first).queue == {"position": 1, "of": 3, "ahead": 0}
    assert why(world, last).queue == {"position": 3, "of": 3, "ahead": 2}


def test_docs_pending_lists_every_code_and_nothing_else() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "pending.md").read_text()
    requests, pods = text.split("\n## Pending pods\n", 1)
    documented = set(re.findall(r"^### `([a-z-]+)`", requests, flags=re.MULTILINE))
    assert documented == {code.value for code in ReasonCode}
    from delivery.pod_reasons import PodReasonCode  # a pod's reasons are the section after the requests'
    assert set(re.findall(r"^### `([a-z-]+)`", pods, flags=re.MULTILINE)) == {code.value for code in PodReasonCode}


def test_a_project_cap_is_a_quota_at_the_projects_level(world: World) -> None:
    from allocations.models import ProjectQuota
    ProjectQuota.objects.create(project=world.llm, flavor=world.a100, limit=Decimal("2"))
    answer = why(world, ask(world, flavor=world.a100, quantity=3))
    assert answer.primary.code == ReasonCode.QUOTA
    facts = answer.primary.facts
    assert (facts["level"], facts["project"], facts["limit"], facts["requested"]) == ("project", "nlp-llm", "2", "3")
    assert [offer["quantity"] for offer in answer.alternatives if offer["kind"] == "fewer-units"] == [2]


def test_a_flavor_without_any_quota_on_the_chain_is_a_quota_of_zero(world: World) -> None:
    Quota.objects.filter(department__in=[world.nlp, world.acme]).delete()
    answer = why(world, ask(world, flavor=world.h100))
    assert answer.primary.code == ReasonCode.QUOTA
    assert (answer.primary.facts["department"], answer.primary.facts["limit"]) == ("nlp", "0")
