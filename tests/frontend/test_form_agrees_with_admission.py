"""The request form says one thing about the quota: its quota lines are the checks of the decision
approval makes (``admission_decide``), the one its "On approval" outlook reads, over the request's
own dates. nlp may hold 8 a100 units; with all 8 held until the day after tomorrow, a request for 8
from five days on fits (lines and outlook alike), and one that overlaps the grant exceeds (lines
and outlook alike). Where approval would reclaim a preemptible grant, or where the project's cap
refuses it, the lines do not say the opposite of the outlook either."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, PriorityClass, ProjectQuota
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)


def held(world: World, priority_class: PriorityClass) -> Allocation:
    """nlp's whole a100 quota (8 units) held from now until the day after tomorrow."""
    start = timezone.now()
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=8,
        priority_class=priority_class, starts_at=start, ends_at=start + 2 * DAY, justification="held",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def fields(world: World, *, starts_in: datetime.timedelta, days: int = 3, **changes: Any) -> dict[str, Any]:
    start = timezone.now() + starts_in
    data: dict[str, Any] = {
        "project": world.llm.pk, "flavor": world.a100.pk, "quantity": 8, "priority_class": world.standard.pk,
        "cluster": "", "starts_at": start.strftime("%Y-%m-%dT%H:%M"), "duration_days": days,
        "justification": "the same page",
    }
    data.update(changes)
    return data


def page(login: Login, how: str, data: dict[str, Any]) -> str:
    """The form as its user sees it: the live feedback (HTMX), or the page the form comes back on
    when it does not submit (no justification yet)."""
    if how == "live feedback":
        response = login("nlp_member").get("/allocations/new/feedback/", data)
        assert response.status_code == 200
    else:
        response = login("nlp_member").post("/allocations/new/", {**data, "justification": ""})
        assert response.status_code == 400
    return " ".join(response.content.decode().split())


def quota_lines(html: str) -> dict[str, str]:
    """Each quota line's verdict (``✓ fits`` or ``✗ exceeds``) by what it counts (``nlp · a100 units``)."""
    found = re.search(r'<ul class="checks" id="feedback-quota">(.*?)</ul> <h3>Physical fit', html)
    assert found is not None, html
    lines = re.findall(r"(✓ fits|✗ exceeds) — <strong>([\w-]+)</strong> · ([^:]+):", found.group(1))
    assert lines, found.group(1)
    return {f"{department} · {what}": verdict for verdict, department, what in lines}


def outlook(html: str) -> str:
    found = re.search(r'<div class="outlook" id="feedback-outlook"> <p class="verdict [\w-]+">(.*?)</p>', html)
    assert found is not None, html
    return found.group(1)


HOW = pytest.mark.parametrize("how", ["live feedback", "form page"])


@HOW
def test_a_request_after_the_grant_ends_fits_in_its_lines_and_its_outlook(world: World, login: Login,
                                                                           how: str) -> None:
    held(world, world.standard)
    html = page(login, how, fields(world, starts_in=5 * DAY))
    assert quota_lines(html) == {
        "acme · GPU-equivalents": "✓ fits", "nlp · a100 units": "✓ fits", "nlp · GPU-equivalents": "✓ fits",
    }
    assert outlook(html) == "Approval would reclaim nothing: it fits within the quotas and on the GPUs."


@HOW
def test_a_request_overlapping_the_grant_exceeds_in_its_lines_and_its_outlook(world: World, login: Login,
                                                                             how: str) -> None:
    held(world, world.standard)
    html = page(login, how, fields(world, starts_in=DAY))
    assert quota_lines(html)["nlp · a100 units"] == "✗ exceeds"
    assert outlook(html).startswith("As things stand, approval would be refused: Quota exceeded for a100 units "
                                    "in department nlp")


@HOW
def test_a_request_that_fits_by_reclaiming_does_not_read_exceeds(world: World, login: Login, how: str) -> None:
    """The outlook admits it by reclaiming the preemptible grant: its lines are those of that
    plan (the grant counted as gone), not a verdict of their own that the quota is exceeded."""
    victim = held(world, world.preemptible)
    html = page(login, how, fields(world, starts_in=DAY))
    assert set(quota_lines(html).values()) == {"✓ fits"}, quota_lines(html)
    assert outlook(html) == "Approval would reclaim 1 grant:"
    assert f"#{victim.pk} 8 × a100 of nlp-llm" in re.sub(r"<[^>]+>", "", html)
    assert "counting the grants listed under “On approval” as reclaimed" in html


@HOW
def test_a_request_over_its_projects_cap_is_not_said_to_fit_the_quota(world: World, login: Login,
                                                                      how: str) -> None:
    ProjectQuota.objects.create(project=world.llm, flavor=world.a100, limit=Decimal(4))
    html = page(login, how, fields(world, starts_in=5 * DAY))
    assert 'id="feedback-quota"' not in html
    assert re.search(r'<p class="verdict verdict-bad" id="feedback-quota-refusal">✗ [^<]*cap', html), html
    assert outlook(html).startswith("As things stand, approval would be refused:")


def test_without_its_dates_the_form_gives_no_quota_verdict(world: World, login: Login) -> None:
    """Approval judges a request over its dates: until the duration parses there is no decision,
    so no line says fits or exceeds (there used to be one for the instant now)."""
    held(world, world.standard)
    html = page(login, "live feedback", fields(world, starts_in=5 * DAY, duration_days=""))
    assert 'id="feedback-quota"' not in html and "✗ exceeds" not in html and "✓ fits —" not in html
    assert "and a duration to check the quota" in html
