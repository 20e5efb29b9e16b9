"""The portal in a real browser: the journeys people take, under the deployed security headers."""

from __future__ import annotations

import csv
import datetime
import io
import re
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Quota
from tests.browser.conftest import Portal

pytestmark = pytest.mark.django_db(transaction=True)


def no_policy_violations(portal: Portal) -> None:
    assert not [error for error in portal.console_errors if "Content Security Policy" in error or "htmx" in error]


def every_control_is_labelled(portal: Portal) -> None:
    # Those a person can reach: a part of a form that its choices hide has no accessible name to check.
    controls = portal.page.locator("main").locator(
        "input:not([type=hidden]):visible, select:visible, textarea:visible, button:visible")
    assert controls.count() > 0
    for index in range(controls.count()):
        expect(controls.nth(index)).to_have_accessible_name(re.compile(r"\w"))


def test_researcher_submits_admin_approves_researcher_sees_it_active(portal: Portal) -> None:
    page, world = portal.page, portal.world
    portal.login("nlp_member")
    portal.shot("dashboard-empty")

    portal.nav("Request GPUs")
    page.get_by_label("Project").select_option(str(world.llm.pk))
    page.get_by_label("Flavor").select_option(str(world.a100.pk))
    page.get_by_label("Quantity").fill("2")
    # Live feedback (HTMX) as the fields change: GPU-equivalents, quota left, where it fits.
    expect(page.locator("#feedback-gpu-eq")).to_contain_text("2 (2 × 1 of NVIDIA-A100")
    expect(page.locator("#feedback-quota")).to_contain_text("a100 units: 8 of 8 left, 6 after this request")
    expect(page.locator("#feedback-where")).to_contain_text("cluster test-cluster")
    page.get_by_label("Justification").fill("Fine-tuning a 7B model for the speech team")
    expect(page.locator("#feedback-verdict")).to_have_text("This request fits today.")
    portal.shot("request-form")
    page.get_by_role("button", name="Submit request").click()

    heading = page.get_by_role("heading", level=1, name=re.compile(r"^Allocation #\d+$"))
    expect(heading).to_be_visible()
    allocation_id = int(heading.inner_text().split("#")[1])
    expect(page.locator(".state")).to_have_text("Pending approval")
    expect(page.locator("#timeline")).to_contain_text("An allocation was requested")
    portal.shot("request-submitted")
    portal.logout()

    portal.login("nlp_admin")
    portal.nav("Approvals")
    row = page.get_by_role("row").filter(has_text=f"#{allocation_id}")
    expect(row).to_contain_text("a100 units: 0 + 2 of 8")
    expect(row).to_contain_text("Fine-tuning a 7B model")
    page.get_by_label(f"Select request #{allocation_id}").focus()
    page.keyboard.press("Space")  # keyboard alone is enough to decide
    expect(page.get_by_label(f"Select request #{allocation_id}")).to_be_checked()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # past the link to the request: to the comment
    expect(page.get_by_label("Comment")).to_be_focused()
    page.keyboard.type("Approved for two weeks of fine-tuning")
    portal.shot("approvals-queue")
    every_control_is_labelled(portal)
    page.get_by_role("button", name="Approve selected").click()
    expect(page.get_by_role("status").filter(has_text=f"Approved #{allocation_id}.")).to_be_visible()
    expect(page.get_by_text("No requests are waiting for a decision.")).to_be_visible()
    portal.shot("approved")
    portal.logout()

    portal.login("nlp_member")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=f"Allocation {allocation_id}"))
    expect(row).to_contain_text("Active")
    expect(row).to_contain_text("in sync on test-cluster")
    expect(page.get_by_role("img", name=re.compile(r"^nlp a100: 25 % of the limit in use"))).to_be_visible()
    portal.shot("dashboard-active")
    page.set_viewport_size({"width": 390, "height": 844})
    portal.shot("dashboard-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    row.get_by_role("link", name=f"Allocation {allocation_id}").click()
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("An allocation was approved")
    expect(timeline).to_contain_text("Approved for two weeks of fine-tuning")
    expect(timeline).to_contain_text("An allocation reached its cluster")
    portal.shot("allocation-detail")
    assert Allocation.objects.get(pk=allocation_id).state == AllocationState.ACTIVE
    no_policy_violations(portal)


def test_an_invalid_request_shows_field_errors(portal: Portal) -> None:
    page = portal.page
    portal.login("nlp_member")
    # Keyboard first: the skip link is the first stop and leads to the content.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()

    page.goto("/allocations/new/")
    quantity = page.get_by_label("Quantity")
    quantity.fill("0")
    # Errors of a field already filled in appear while typing, next to the field.
    expect(page.locator("#id_quantity_error")).to_have_text("Ensure this value is greater than or equal to 1.")
    expect(page.locator("#id_justification_error")).to_be_empty()
    page.get_by_label("Duration (days)").fill("500")
    expect(page.locator("#id_duration_days_error")).to_have_text("Ensure this value is less than or equal to 90.")
    portal.shot("live-errors")

    page.get_by_role("button", name="Submit request").click()
    expect(page.get_by_role("alert")).to_contain_text("The request was not sent")
    expect(page.get_by_label("Project")).to_be_focused()  # the first field to correct
    expect(page.locator("#id_project_error")).to_have_text("This field is required.")
    expect(page.locator("#id_justification_error")).to_have_text("This field is required.")
    expect(page.locator("#id_duration_days_error")).to_have_text("Ensure this value is less than or equal to 90.")
    expect(page.get_by_label("Quantity")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Quantity")).to_have_accessible_description(
        re.compile("Units of the flavor.*greater than or equal to 1")
    )
    portal.shot("submitted-errors")
    every_control_is_labelled(portal)
    assert not Allocation.objects.exists()
    no_policy_violations(portal)


def test_an_outsider_cannot_open_another_departments_allocation(portal: Portal) -> None:
    page, world = portal.page, portal.world
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="confidential NLP experiment",
    )
    portal.login("vision_member")
    expect(page.get_by_text("No allocations yet.")).to_be_visible()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals")).to_have_count(0)
    portal.shot("outsider-dashboard")

    response = page.goto(f"/allocations/{allocation.pk}/")
    assert response is not None and response.status == 404
    assert "script-src 'self';" in response.headers["content-security-policy"]  # served as deployed
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page).to_have_title("Not found · GPU Portal")
    expect(page.get_by_text("confidential NLP experiment")).to_have_count(0)
    portal.shot("not-found")

    response = page.goto("/approvals/")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    portal.shot("forbidden")


def test_the_auditor_downloads_an_export(portal: Portal) -> None:
    page, world = portal.page, portal.world
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.mig, quantity=3,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="speech model distillation",
    )
    portal.login("auditor")
    portal.nav("Audit log")
    expect(page.get_by_role("heading", name="Audit log", level=1)).to_be_visible()
    page.get_by_label("Action").select_option("allocation.requested")
    page.get_by_role("button", name="Apply filters").click()
    # The log is append-only: it also holds what earlier tests recorded.
    events = page.locator("table.events tbody")
    expect(events.get_by_role("row").filter(has_text=f"allocations.allocation {allocation.pk}")).to_have_count(1)
    expect(events.get_by_role("row").filter(has_not_text="allocation.requested")).to_have_count(0)
    portal.shot("audit-log-filtered")
    every_control_is_labelled(portal)

    with page.expect_download() as download_info:
        page.get_by_role("link", name="CSV").click()
    download = download_info.value
    assert re.fullmatch(r"audit-\d{8}T\d{6}Z\.csv", download.suggested_filename)
    saved = portal.folder / download.suggested_filename
    download.save_as(saved)
    rows = list(csv.DictReader(io.StringIO(saved.read_text())))
    assert {row["action"] for row in rows} == {"allocation.requested"}
    ours = [row for row in rows if row["target_id"] == str(allocation.pk)]
    assert [(row["actor_username"], row["department_id"]) for row in ours] == [("nlp_member", str(world.nlp.pk))]
    assert re.fullmatch(r"[0-9a-f]{64}", ours[0]["hash"])

    page.get_by_label("Action").select_option("audit.exported")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("table.events tbody")).to_contain_text("auditor")
    portal.shot("audit-log-export-recorded")
    no_policy_violations(portal)


def test_a_request_that_reclaims_is_confirmed_approved_and_its_victim_told_why(portal: Portal) -> None:
    page, world = portal.page, portal.world
    # acme (limit 14) over nlp (guaranteed 4) and vision (guaranteed 8); vision holds 4 beyond its guarantee,
    # and nlp's 3 leave room for 1 of them under acme's limit: its grant of 4 gives back 1 (a partial reclaim).
    Quota.objects.all().delete()
    for department, guaranteed, limit in ((world.acme, 0, 14), (world.nlp, 4, 10), (world.vision, 8, 12)):
        Quota.objects.create(department=department, flavor=None, guaranteed=Decimal(guaranteed), limit=Decimal(limit))
    start = timezone.now()
    grants = [
        services.allocation_approve(actor=world.users["vision_admin"], allocation_id=services.allocation_request(
            actor=world.users["vision_member"], project=world.seg, flavor=world.a100, quantity=quantity,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=10),
            justification="segmentation",
        ).pk)
        for quantity in (8, 4)
    ]
    borrowed = grants[1]

    portal.login("nlp_member")
    portal.nav("Request GPUs")
    page.get_by_label("Project").select_option(str(world.llm.pk))
    page.get_by_label("Flavor").select_option(str(world.a100.pk))
    page.get_by_label("Quantity").fill("3")
    page.get_by_label("Justification").fill("Our guarantee, back for the paper deadline")
    outlook = page.locator("#feedback-outlook")
    expect(outlook).to_contain_text("Approval would reclaim 1 grant from other departments")
    expect(outlook).to_contain_text(
        f"#{borrowed.pk} 1 of its 4 × a100 of vision-seg (department vision, gpu-standard): borrowed beyond its "
        "department's guarantee; runs 15 more minutes"
    )
    # The feedback refreshes (and re-renders the confirmation) 400 ms after the last keystroke:
    # let the last refresh land before ticking the box, as a person reading the outlook would.
    page.wait_for_timeout(600)
    page.wait_for_load_state("networkidle")
    confirm = page.get_by_role("checkbox", name=re.compile("I understand that approving this request"))
    confirm.check()
    expect(confirm).to_be_checked()
    portal.shot("request-would-reclaim")
    page.get_by_role("button", name="Submit request").click()
    heading = page.get_by_role("heading", level=1, name=re.compile(r"^Allocation #\d+$"))
    expect(heading).to_be_visible()
    request_id = int(heading.inner_text().split("#")[1])
    portal.logout()

    portal.login("nlp_admin")
    portal.nav("Approvals")
    row = page.get_by_role("row").filter(has_text=f"#{request_id}")
    expect(row).to_contain_text(
        f"Approval would reclaim 1 grant from other departments: #{borrowed.pk} 1 of its 4 × a100"
    )
    expect(row).to_contain_text("borrowed beyond its department's guarantee; runs 15 more minutes")
    page.get_by_label(f"Select request #{request_id}").check()
    portal.shot("approver-sees-reclaim")
    page.get_by_role("button", name="Approve selected").click()
    expect(page.get_by_role("status").filter(has_text=f"Approved #{request_id}.")).to_be_visible()
    portal.logout()

    portal.login("vision_member")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=f"Allocation {borrowed.pk}"))
    victim = Allocation.objects.get(pk=borrowed.pk)  # it keeps running, with 1 of its units promised away
    assert (victim.state, victim.quantity, victim.reclaim_units, victim.reclaimed_for_id) == (
        AllocationState.ACTIVE, 4, 1, request_id)
    assert victim.reclaim_deadline is not None
    deadline = f"{victim.reclaim_deadline.astimezone(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    expect(row).to_contain_text(f"Active gives back 1 of its 4 units at {deadline}")
    row.get_by_role("link", name=f"Allocation {borrowed.pk}").click()
    expect(page.locator("#standing")).to_have_text(
        f"1 of its 4 units reclaimed for request #{request_id} (3 × a100 for nlp-llm): it borrowed beyond the "
        "guarantee of department vision, which held 12 GPU-equivalents against a guarantee of 8. "
        f"Gives back 1 of its 4 units at {deadline}."
    )
    portal.shot("victim-told-why")
    no_policy_violations(portal)


def test_a_department_admin_asks_for_a_window_a_platform_admin_approves_the_calendar_raises(portal: Portal) -> None:
    page, world = portal.page, portal.world
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    begins = timezone.now() - datetime.timedelta(minutes=1)

    portal.login("nlp_admin")
    portal.nav("Quota calendar")
    expect(page.get_by_role("heading", level=1, name="Quota calendar of NLP")).to_be_visible()
    figure = page.locator(f"#calendar-{quota.pk}")
    expect(figure).to_contain_text("now: limit 10, guaranteed 0")
    page.get_by_role("combobox", name=re.compile(r"^Quota")).select_option(str(quota.pk))
    page.get_by_label("Begins", exact=True).fill(f"{begins:%Y-%m-%dT%H:%M}")
    page.get_by_label("Ends", exact=True).fill(f"{begins + datetime.timedelta(days=2):%Y-%m-%dT%H:%M}")
    page.get_by_label("Limit: change by").fill("4")
    page.get_by_label("Justification").fill("Conference deadline: four more GPUs for two days")
    every_control_is_labelled(portal)
    portal.shot("window-form")
    page.get_by_role("button", name="Ask for approval").click()
    expect(page.get_by_role("status").filter(has_text="waits for a platform admin's approval")).to_be_visible()
    expect(page.locator("#windows")).to_contain_text("Pending approval")
    expect(figure).to_contain_text("now: limit 10")  # nothing changes before approval
    portal.logout()

    portal.login("platform")
    portal.nav("Approvals")
    row = page.locator("#pending-windows").get_by_role("row").filter(has_text="Conference deadline")
    expect(row).to_contain_text("limit +4")
    window_id = int(re.findall(r"#(\d+)", row.inner_text())[0])
    row.get_by_label(f"Comment on window #{window_id}").fill("Granted for the deadline")
    portal.shot("window-approvals")
    row.get_by_role("button", name=f"Approve window #{window_id}").click()
    expect(page.get_by_role("status").filter(has_text=f"Quota window #{window_id} approved.")).to_be_visible()
    portal.nav("Quota calendar")
    page.get_by_role("navigation", name="Departments").get_by_role("link", name="nlp", exact=True).click()
    expect(figure).to_contain_text("now: limit 14, guaranteed 0")
    expect(figure).to_contain_text(f"windows in force: #{window_id}")
    expect(figure.locator("svg.calendar-chart")).to_have_accessible_name(re.compile(r"^GPU-equivalents: limit 14 and guarantee 0 now"))
    raised = figure.locator(".chart-point").first  # the step in force now, in the tab order
    expect(raised).to_have_accessible_name(re.compile(rf"limit 14 \(quota window #{window_id}\), guarantee 0"))
    expect(page.locator(f"#window-{window_id}")).to_contain_text("Approved")
    portal.shot("calendar-raised")
    no_policy_violations(portal)
