"""The portal keeps people told about the quota promises: what approval would reclaim (before
submitting, before approving), why and until when a grant is being reclaimed, when a scheduled one
starts, confirmation before a request that takes others' grants and before a release, only flavors
a cluster can serve, borrowed against guaranteed use, and four-eyes decisions."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.grants.reclaims import allocations_reclaim_due
from allocations.grants.scheduling import allocations_start_due
from allocations.models import Allocation, AllocationState, Flavor, Quota, SharingMode
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node, NodeSharing
from frontend.outlook import admission_outlook, request_outlook
from frontend.selectors import department_promises, servable_flavor_ids
from frontend.views.approvals import OUTLOOK_ROWS
from tenants.access import access_for
from tests.conftest import H100, World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def promises(world: World) -> None:
    """acme (limit 14) over nlp (guaranteed 4) and vision (guaranteed 8): GPU-equivalents only."""
    Quota.objects.all().delete()
    Quota.objects.create(department=world.acme, flavor=None, guaranteed=Decimal("0"), limit=Decimal("14"))
    Quota.objects.create(department=world.nlp, flavor=None, guaranteed=Decimal("4"), limit=Decimal("10"))
    Quota.objects.create(department=world.vision, flavor=None, guaranteed=Decimal("8"), limit=Decimal("12"))


def ask(world: World, persona: str, project: str, quantity: int, *,
        starts_in: datetime.timedelta = datetime.timedelta(0)) -> Allocation:
    start = timezone.now() + starts_in
    return services.allocation_request(
        actor=world.users[persona], project=getattr(world, project), flavor=world.a100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="promises",
    )


def vision_borrows(world: World) -> tuple[Allocation, Allocation]:
    """Vision holds 8 within its guarantee and 4 beyond it (borrowed from nlp's unused guarantee)."""
    promises(world)
    kept = services.allocation_approve(actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", 8).pk)
    borrowed = services.allocation_approve(
        actor=world.users["vision_admin"], allocation_id=ask(world, "vision_member", "seg", 4).pk
    )
    return kept, borrowed


def form_data(world: World, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "project": world.llm.pk, "flavor": world.a100.pk, "quantity": 3, "priority_class": world.standard.pk,
        "cluster": "", "starts_at": "", "duration_days": 1, "justification": "needs its guarantee back",
    }
    data.update(changes)
    return data


def text_of(page: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)).strip())


def test_the_request_form_says_before_submitting_what_approval_would_reclaim(world: World, login: Login) -> None:
    _, borrowed = vision_borrows(world)
    params = {key: value for key, value in form_data(world).items() if key != "justification"}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    text = text_of(html)
    assert "Approval would reclaim 1 grant from other departments:" in text
    assert (f"#{borrowed.pk} 1 of its 4 × a100 of vision-seg (department vision, gpu-standard): "
            "borrowed beyond its department's guarantee; runs 15 more minutes") in text
    assert "It would start once the grants it reclaims have run out their notice." in text
    assert f'href="/allocations/{borrowed.pk}/"' not in html  # nlp_member cannot open vision's grant
    # The confirmation box arrives with the feedback, into the form (out of band).
    assert '<div id="confirm-slot" hx-swap-oob="true">' in html and 'name="confirm"' in html


def test_a_request_that_would_reclaim_is_submitted_only_once_confirmed(world: World, login: Login) -> None:
    vision_borrows(world)
    client = login("nlp_member")
    response = client.post("/allocations/new/", form_data(world))
    assert response.status_code == 400
    html = response.content.decode()
    assert "Confirm before submitting: Approval would reclaim 1 grant from other departments" in text_of(html)
    assert 'id="id_confirm"' in html and 'aria-invalid="true"' in html
    assert not Allocation.objects.filter(project=world.llm).exists()

    response = client.post("/allocations/new/", form_data(world, confirm="yes"))
    request = Allocation.objects.get(project=world.llm)
    assert response.status_code == 302 and response["Location"] == f"/allocations/{request.pk}/"
    assert request.state == AllocationState.PENDING


def test_a_request_that_cannot_fit_says_why_and_needs_confirming_too(world: World, login: Login) -> None:
    vision_borrows(world)
    params = {key: value for key, value in form_data(world, quantity=7).items() if key != "justification"}
    text = text_of(login("nlp_member").get("/allocations/new/feedback/", params).content.decode())
    assert ("As things stand, approval would be refused: Quota exceeded for GPU-equivalents in department acme: "
            "requested 7, held 12, limit 14") in text
    assert "I understand that, as things stand, this request cannot be approved" in text
    response = login("nlp_member").post("/allocations/new/", form_data(world, quantity=7))
    assert response.status_code == 400 and not Allocation.objects.filter(project=world.llm).exists()


def test_a_request_that_simply_fits_needs_no_confirmation(world: World, login: Login) -> None:
    promises(world)
    params = {key: value for key, value in form_data(world).items() if key != "justification"}
    html = login("nlp_member").get("/allocations/new/feedback/", params).content.decode()
    assert "Approval would reclaim nothing" in html and 'name="confirm"' not in html
    assert "This request fits today." in html
    response = login("nlp_member").post("/allocations/new/", form_data(world))
    assert response.status_code == 302


def test_the_unsaved_request_sees_what_the_saved_one_will(world: World) -> None:
    """The form asks about an unsaved allocation; once saved, admission says the same."""
    _, borrowed = vision_borrows(world)
    user = world.users["nlp_member"]
    start = timezone.now()
    before = request_outlook(user=user, project=world.llm, flavor=world.a100, quantity=3,
                             priority_class=world.standard, cluster=None, starts_at=start,
                             ends_at=start + datetime.timedelta(days=1))
    saved = ask(world, "nlp_member", "llm", 3)
    after = admission_outlook(user=user, allocation=saved)
    assert [line.allocation_id for line in before.reclaim] == [line.allocation_id for line in after.reclaim] == [
        borrowed.pk]
    assert before.admitted and after.admitted and before.starts == after.starts == "after-notice"


def test_the_approver_sees_what_approval_would_reclaim(world: World, login: Login) -> None:
    _, borrowed = vision_borrows(world)
    request = ask(world, "nlp_member", "llm", 3)
    html = login("nlp_admin").get("/approvals/").content.decode()
    outlook = re.search(rf'<div class="outlook" id="outlook-{request.pk}">(.*?)</div>', html, re.S)
    assert outlook is not None
    assert (f"Approval would reclaim 1 grant from other departments: #{borrowed.pk} 1 of its 4 × a100 of vision-seg "
            "(department vision, gpu-standard): borrowed beyond its department's guarantee") in text_of(outlook.group(1))
    detail = login("nlp_admin").get(f"/allocations/{request.pk}/").content.decode()
    assert "On approval, as things stand" in detail and f"#{borrowed.pk} 1 of its 4 × a100 of vision-seg" in text_of(detail)


def test_the_queue_previews_admission_for_its_first_rows_only(world: World, login: Login) -> None:
    requests = [ask(world, "nlp_member", "llm", 1) for _ in range(OUTLOOK_ROWS + 1)]
    html = login("nlp_admin").get("/approvals/").content.decode()
    for request in requests[:OUTLOOK_ROWS]:
        assert f'id="outlook-{request.pk}"' in html
    last = requests[-1]
    assert f'id="outlook-{last.pk}"' not in html
    assert f'<a href="/allocations/{last.pk}/">See on its page what approval would reclaim</a>' in html


def test_the_victims_owner_sees_why_and_until_when_and_the_requester_when_it_starts(
    world: World, login: Login
) -> None:
    _, borrowed = vision_borrows(world)
    Quota.objects.filter(department=world.acme).update(limit=Decimal("12"))  # all 4 must go: the whole grant
    request = ask(world, "nlp_member", "llm", 4)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk, comment="guarantee")
    borrowed.refresh_from_db()
    assert borrowed.state == AllocationState.RECLAIMING and borrowed.reclaim_deadline is not None
    deadline = f"{borrowed.reclaim_deadline.astimezone(datetime.UTC):%Y-%m-%d %H:%M} UTC"

    victim_page = login("vision_member").get(f"/allocations/{borrowed.pk}/").content.decode()
    assert (f"Reclaimed for request #{request.pk} (4 × a100 for nlp-llm): it borrowed beyond the guarantee of "
            f"department vision, which held 12 GPU-equivalents against a guarantee of 8. Runs until {deadline}.") \
        in text_of(victim_page)
    assert '<span class="state state-reclaiming">Reclaiming</span>' in victim_page  # badge, and in the timeline
    assert f'href="/allocations/{request.pk}/"' not in victim_page  # vision cannot open nlp's request
    assert f"Runs until {deadline} (15 minutes' notice)" in text_of(victim_page)
    assert "still on test-cluster until its notice ends" in victim_page  # its workloads keep running
    dashboard = login("vision_member").get("/").content.decode()
    assert "Reclaiming" in dashboard and f"until {borrowed.reclaim_deadline:%Y-%m-%d %H:%M}" in dashboard
    assert f"Reclaimed for request #{request.pk} (4 × a100 for nlp-llm)" in text_of(dashboard)

    request_page = text_of(login("nlp_member").get(f"/allocations/{request.pk}/").content.decode())
    assert f"Starts once the grants it reclaims have run out their notice (#{borrowed.pk}), by {deadline}" in request_page
    assert f"Reclaims #{borrowed.pk} (4 × a100 of vision-seg, department vision: borrowed, 15 min notice)" in request_page
    assert "Starts after its victims' notice" in request_page

    later = timezone.now() + datetime.timedelta(minutes=16)
    assert allocations_reclaim_due(now=later) == 1 and allocations_start_due(now=later) == 1
    victim_page = text_of(login("vision_member").get(f"/allocations/{borrowed.pk}/").content.decode())
    assert re.search(rf"Its capacity was released at \d{{4}}-\d\d-\d\d \d\d:\d\d UTC\. Reclaimed for request #{request.pk} "
                     r"\(4 × a100 for nlp-llm\): it borrowed", victim_page), victim_page
    assert "Reclaimed" in victim_page
    assert "Starts once" not in text_of(login("nlp_member").get(f"/allocations/{request.pk}/").content.decode())


def test_an_outsider_cannot_see_another_departments_reclaim_details(world: World, login: Login) -> None:
    _, borrowed = vision_borrows(world)
    request = ask(world, "nlp_member", "llm", 3)
    for persona in ("vision_member", "vision_admin", "speech_member"):
        assert login(persona).get(f"/allocations/{request.pk}/").status_code == 404, persona
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)
    for persona in ("nlp_member", "speech_member"):
        assert login(persona).get(f"/allocations/{borrowed.pk}/").status_code == 404, persona
    assert login("vision_member").get("/approvals/").status_code == 403


def test_a_grant_scheduled_ahead_says_when_it_starts(world: World, login: Login) -> None:
    request = ask(world, "nlp_member", "llm", 1, starts_in=datetime.timedelta(days=2))
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)
    request.refresh_from_db()
    assert request.state == AllocationState.SCHEDULED
    html = login("nlp_member").get(f"/allocations/{request.pk}/").content.decode()
    assert f"Starts at {request.starts_at.astimezone(datetime.UTC):%Y-%m-%d %H:%M} UTC." in text_of(html)
    assert '<span class="state state-scheduled">Scheduled</span>' in html
    assert "booked on test-cluster, nothing there before its start" in html


def test_release_asks_for_confirmation_first(world: World, login: Login) -> None:
    request = ask(world, "nlp_member", "llm", 1)
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)
    client = login("nlp_member")
    response = client.post(f"/allocations/{request.pk}/release/", {"comment": "done early"})
    html = response.content.decode()
    assert response.status_code == 200 and f"Release allocation #{request.pk}?" in html
    assert '<input type="hidden" name="confirm" value="yes">' in html and 'value="done early"' in html
    request.refresh_from_db()
    assert request.state == AllocationState.APPROVED
    response = client.post(f"/allocations/{request.pk}/release/", {"comment": "done early", "confirm": "yes"})
    assert response.status_code == 302
    request.refresh_from_db()
    assert request.state == AllocationState.RELEASED
    # Someone who may not release it gets the refusal, not a confirmation page.
    other = ask(world, "nlp_member", "llm", 1)
    response = login("auditor").post(f"/allocations/{other.pk}/release/", follow=True)
    assert "Withdraw request" not in response.content.decode() and "Only the project" in response.content.decode()


def add_mps_node(cluster: Cluster, *, schedulable: bool = True) -> Node:
    node = node_upsert(actor=None, cluster=cluster, name=f"mps-{cluster.pk}", cpu_millicores=64000, memory_mib=524288,
                       gpus=[GpuSpec(index=0, model=H100, memory_mib=81920, mig_capable=False)])
    Node.objects.filter(pk=node.pk).update(sharing=NodeSharing.MPS, sharing_replicas=4, is_schedulable=schedulable)
    return node


def test_flavors_no_cluster_can_serve_are_not_offered(world: World, login: Login) -> None:
    def offered() -> set[str]:
        html = login("nlp_member").get("/allocations/new/").content.decode()
        select = re.search(r'<select name="flavor".*?</select>', html, re.S)
        assert select is not None
        return {Flavor.objects.get(pk=int(pk)).name for pk in re.findall(r'<option value="(\d+)"', select.group(0))}

    # No node runs MPS with four replicas: the H100 nodes give whole GPUs.
    assert offered() == {"a100", "a100-1g", "h100"}
    response = login("nlp_member").post("/allocations/new/", form_data(world, flavor=world.mps.pk, confirm="yes"))
    assert response.status_code == 400
    assert "no active cluster can serve the one chosen" in response.content.decode()
    inactive = Cluster.objects.create(name="retired", is_active=False)
    add_mps_node(inactive)
    add_mps_node(Cluster.objects.create(name="drained"), schedulable=False)
    assert "h100-mps" not in offered()
    add_mps_node(world.cluster)
    assert "h100-mps" in offered()


def test_servable_flavors_take_two_queries_however_many(world: World, django_assert_num_queries: Any) -> None:
    for index in range(4):
        Flavor.objects.create(
            name=f"l4-{index}", display_name="L4", gpu_model="NVIDIA-L4", sharing_mode=SharingMode.EXCLUSIVE,
            resource_name="nvidia.com/gpu", memory_mib=24576, compute_percent=100, gpu_equivalents=Decimal("1"),
        )
        add_mps_node(Cluster.objects.create(name=f"more-{index}"))
    flavors = list(Flavor.objects.all())
    with django_assert_num_queries(2):
        served = servable_flavor_ids(flavors=flavors)
    assert served == {world.a100.pk, world.mig.pk, world.h100.pk, world.mps.pk}


def test_department_admins_see_borrowed_against_guaranteed_use(world: World, login: Login,
                                                                django_assert_max_num_queries: Any) -> None:
    vision_borrows(world)
    html = login("vision_admin").get("/usage/").content.decode()
    table = re.search(r'<table id="promises">.*?</table>', html, re.S)
    assert table is not None
    # vision: guaranteed 8, limit 12, holds 12: 8 within its guarantee, 4 borrowed.
    assert "vision GPU-equivalents 8 12 all unused 12 8 4 0" in text_of(table.group(0))
    assert "nlp GPU" not in text_of(table.group(0))  # another department's row
    # nlp lends what vision borrows of its unused guarantee (4 of 4).
    access_for(world.users["platform"])  # read once per user and request
    with django_assert_max_num_queries(4):
        rows = {row.department: row for row in department_promises(user=world.users["platform"],
                                                                   department_ids=[world.nlp.pk, world.vision.pk])}
    assert (rows["nlp"].in_use, rows["nlp"].borrowed, rows["nlp"].lent) == (Decimal(0), Decimal(0), Decimal(4))
    assert (rows["vision"].borrowed, rows["vision"].lent) == (Decimal(4), Decimal(0))


def test_an_admins_own_request_waits_for_another_admin(world: World, login: Login, settings: Any) -> None:
    own = ask(world, "nlp_admin", "llm", 1)
    client = login("nlp_admin")
    html = client.get("/approvals/").content.decode()
    assert f'id="select-{own.pk}"' not in html
    assert "Your own request: another admin must decide (four-eyes)." in html
    assert "another admin must decide (four-eyes)" in client.get(f"/allocations/{own.pk}/").content.decode()
    # Deciding anyway answers with the service's refusal, not an error page.
    response = client.post("/approvals/", {"selected": [own.pk], "decision": "approve"}, follow=True)
    assert response.status_code == 200
    assert f"#{own.pk} not approved: Nobody decides on their own request" in response.content.decode()
    own.refresh_from_db()
    assert own.state == AllocationState.PENDING
    settings.GPUPORTAL_FOUR_EYES = False
    assert f'id="select-{own.pk}"' in client.get("/approvals/").content.decode()


def granted(world: World, quantity: int = 1) -> Allocation:
    return services.allocation_approve(actor=world.users["nlp_admin"],
                                       allocation_id=ask(world, "nlp_member", "llm", quantity).pk)


def local(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M")


def test_a_renewal_within_the_self_service_window_applies_at_once(world: World, login: Login) -> None:
    allocation = granted(world)
    later = allocation.ends_at.replace(second=0, microsecond=0) + datetime.timedelta(days=2)
    page = login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode()
    assert 'id="id_renew_justification"' in page and 'id="id_resize_quantity"' in page
    assert "applies at once; a later end waits for a department admin" in page
    response = login("nlp_member").post(f"/allocations/{allocation.pk}/renew/",
                                        {"ends_at": local(later), "justification": "two more days"}, follow=True)
    assert f"Allocation #{allocation.pk} now ends {later:%Y-%m-%d %H:%M} UTC." in response.content.decode()
    allocation.refresh_from_db()
    assert allocation.ends_at == later and not allocation.changes.exists()


def test_a_renewal_beyond_it_waits_and_another_admin_approves_it(world: World, login: Login) -> None:
    allocation = granted(world)
    later = allocation.ends_at.replace(second=0, microsecond=0) + datetime.timedelta(days=20)
    response = login("nlp_member").post(f"/allocations/{allocation.pk}/renew/",
                                        {"ends_at": local(later), "justification": "the paper slipped"}, follow=True)
    change = allocation.changes.get()
    page = text_of(response.content.decode())
    assert f"Change #{change.pk} (renewal) of allocation #{allocation.pk} waits for a department admin's approval." in page
    assert f"Change #{change.pk} waits for approval" in page and "“the paper slipped”" in page
    assert f"Withdraw change #{change.pk}" in page and "Approve change" not in page  # the researcher cannot decide

    queue = login("nlp_admin").get("/approvals/").content.decode()
    row = re.search(rf'<tr id="change-{change.pk}">(.*?)</tr>', queue, re.S)
    assert row is not None and f"renew until {later:%Y-%m-%d %H:%M}" in text_of(row.group(1))
    response = login("nlp_admin").post(f"/changes/{change.pk}/decide/", {"decision": "approve", "comment": "fine"},
                                       follow=True)
    assert f"Change #{change.pk} of allocation #{allocation.pk} approved." in response.content.decode()
    allocation.refresh_from_db()
    assert allocation.ends_at == later
    timeline = text_of(login("nlp_member").get(f"/allocations/{allocation.pk}/").content.decode())
    assert "A change to a grant was requested for approval" in timeline
    assert "A change to a grant was approved and applied by nlp_admin" in timeline
    assert f"New end: {later:%Y-%m-%d %H:%M} UTC" in timeline and f"Change #{change.pk} (renewal)" in timeline


def test_a_larger_quantity_waits_a_rejection_needs_a_comment_and_fewer_units_apply_at_once(
    world: World, login: Login
) -> None:
    allocation = granted(world, quantity=2)
    client = login("nlp_member")
    client.post(f"/allocations/{allocation.pk}/resize/", {"quantity": 4, "justification": "bigger batch"})
    change = allocation.changes.get()
    admin = login("nlp_admin")
    response = admin.post(f"/changes/{change.pk}/decide/", {"decision": "reject", "comment": " "}, follow=True)
    assert f"Change #{change.pk}: A rejection needs a comment for the requester." in response.content.decode()
    response = admin.post(f"/changes/{change.pk}/decide/", {"decision": "reject", "comment": "use two", "back": "allocation"},
                          follow=True)
    assert response.redirect_chain[-1][0] == f"/allocations/{allocation.pk}/"
    change.refresh_from_db()
    assert change.state == "rejected" and change.decision_comment == "use two"

    response = client.post(f"/allocations/{allocation.pk}/resize/", {"quantity": 1}, follow=True)
    assert f"Allocation #{allocation.pk} now has 1 unit." in response.content.decode()
    response = client.post(f"/allocations/{allocation.pk}/resize/", {"quantity": 1})
    assert response.status_code == 400
    assert re.search(r'id="id_resize_quantity_error"[^>]*><p>The allocation already has 1 unit.</p>',
                     response.content.decode())


def test_the_requester_withdraws_a_pending_change_and_an_outsider_cannot_touch_it(world: World, login: Login) -> None:
    allocation = granted(world)
    login("nlp_member").post(f"/allocations/{allocation.pk}/resize/", {"quantity": 3})
    change = allocation.changes.get()
    for persona in ("vision_member", "vision_admin"):
        assert login(persona).post(f"/changes/{change.pk}/cancel/").status_code == 404
        assert login(persona).post(f"/changes/{change.pk}/decide/", {"decision": "approve"}).status_code == 404
    response = login("nlp_member").post(f"/changes/{change.pk}/cancel/", follow=True)
    assert f"Change #{change.pk} withdrawn." in response.content.decode()
    change.refresh_from_db()
    assert change.state == "cancelled"


def test_an_admins_own_change_waits_for_another_admin(world: World, login: Login) -> None:
    allocation = granted(world)
    client = login("nlp_admin")
    client.post(f"/allocations/{allocation.pk}/resize/", {"quantity": 2})
    change = allocation.changes.get()
    queue = client.get("/approvals/").content.decode()
    assert "Your own change: another admin must decide (four-eyes)." in queue
    assert f"Approve change #{change.pk}" not in queue
    page = client.get(f"/allocations/{allocation.pk}/").content.decode()
    assert "You requested this change: another admin must decide (four-eyes)." in page and "Approve change" not in page
    response = client.post(f"/changes/{change.pk}/decide/", {"decision": "approve"}, follow=True)
    assert response.status_code == 200
    assert f"Change #{change.pk} not approved: Nobody decides on their own change" in response.content.decode()
    change.refresh_from_db()
    assert change.state == "pending"
