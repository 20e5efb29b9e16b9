"""A quota's "in use" is what holds at an instant, not every grant added up: on /api/v1/quotas/,
/api/v1/usage/, /metrics, the request's quota lines and the placement preview. Two scheduled grants
of vision that never overlap count one at a time (and the larger over an interval that holds both);
a department with only future grants uses nothing now; a quota window in force shows its limit, not
the quota's own; ``?at=`` reads another instant, and a bad one is a 400 naming ``at``."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, Quota, SharingMode
from allocations.models.windows import QuotaWindow
from frontend.feedback import request_feedback
from frontend.outlook import request_allocation
from kernel.clock import clock_set
from tests.conftest import World, requires_postgres
from tests.observability.test_metrics import scrape, value

pytestmark = [pytest.mark.django_db, requires_postgres()]
HOUR = datetime.timedelta(hours=1)
DAY = datetime.timedelta(days=1)


@pytest.fixture
def now() -> datetime.datetime:
    moment = timezone.now().replace(minute=0, second=0, microsecond=0)
    clock_set(moment)
    return moment


def granted(world: World, *, quantity: int, start: datetime.datetime, end: datetime.datetime) -> Allocation:
    """A grant of vision's H100s over ``[start, end)``, requested and approved through the services."""
    allocation = services.allocation_request(
        actor=world.users["vision_member"], project=world.seg, flavor=world.h100, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=end, justification="in use over time",
    )
    return services.allocation_approve(actor=world.users["vision_admin"], allocation_id=allocation.pk)


def asked(world: World, *, starts_at: datetime.datetime | None, ends_at: datetime.datetime) -> Allocation:
    """vision's request for 1 H100 over ``[starts_at (None: now), ends_at)``, not submitted yet."""
    return request_allocation(project=world.seg, flavor=world.h100, quantity=1, priority_class=world.standard,
                              cluster=None, span=(starts_at, ends_at))


@pytest.fixture
def two_turns(world: World, now: datetime.datetime) -> tuple[Allocation, Allocation]:
    """vision (H100 limit 8, GPU-equivalents 10): 6 H100 tomorrow, 5 the day after; never both."""
    first = granted(world, quantity=6, start=now + DAY, end=now + 2 * DAY)
    second = granted(world, quantity=5, start=now + 2 * DAY, end=now + 3 * DAY)
    assert first.state == second.state == AllocationState.SCHEDULED
    return first, second


def quota_row(world: World, department: str, flavor: str | None, **params: str) -> dict[str, Any]:
    response = world.client("platform").get("/api/v1/quotas/", {"page_size": "100", **params})
    assert response.status_code == 200, response.content
    rows = [row for row in response.json()["results"] if row["department"] == department and row["flavor"] == flavor]
    assert len(rows) == 1, rows
    found: dict[str, Any] = rows[0]
    return found


def usage_quota(world: World, department: str, flavor: str | None, **params: str) -> dict[str, Any]:
    response = world.client("platform").get("/api/v1/usage/", params)
    assert response.status_code == 200, response.content
    rows = [row for row in response.json()["quotas"] if row["department"] == department and row["flavor"] == flavor]
    assert len(rows) == 1, rows
    found: dict[str, Any] = rows[0]
    return found


def test_two_scheduled_grants_that_never_overlap_count_one_at_a_time_on_the_quota_api(
    world: World, now: datetime.datetime, two_turns: tuple[Allocation, Allocation],
) -> None:
    assert quota_row(world, "vision", "h100")["in_use"] == "0.0000"  # nothing holds yet
    tomorrow = {"at": (now + DAY + HOUR).isoformat()}
    after = {"at": (now + 2 * DAY + HOUR).isoformat()}
    assert quota_row(world, "vision", "h100", **tomorrow)["in_use"] == "6.0000"
    assert quota_row(world, "vision", None, **tomorrow)["in_use"] == "6.0000"
    assert quota_row(world, "acme", None, **tomorrow)["in_use"] == "6.0000"
    assert quota_row(world, "vision", "h100", **after)["in_use"] == "5.0000"
    row = quota_row(world, "vision", None, **after)
    assert (row["in_use"], row["available"], row["at"]) == ("5.0000", "5.0000", after["at"].replace("+00:00", "Z"))
    quota = Quota.objects.get(department=world.vision, flavor=world.h100)
    detail = world.client("vision_member").get(f"/api/v1/quotas/{quota.pk}/", tomorrow)
    assert detail.status_code == 200 and detail.json()["in_use"] == "6.0000"


def test_the_usage_api_answers_in_use_at_an_instant_and_the_peak_over_its_range(
    world: World, now: datetime.datetime, two_turns: tuple[Allocation, Allocation],
) -> None:
    span = {"from": (now + DAY).isoformat(), "to": (now + 3 * DAY).isoformat(), "granularity": "day"}
    row = usage_quota(world, "vision", "h100", **span)
    assert (row["in_use"], row["peak_in_use"], row["effective_limit"]) == ("0.0000", "6.0000", "8.0000")
    assert usage_quota(world, "vision", None, **span)["peak_in_use"] == "6.0000"  # the larger, never 11
    later = usage_quota(world, "vision", "h100", **span, at=(now + 2 * DAY + HOUR).isoformat())
    assert later["in_use"] == "5.0000"
    nlp_only = world.client("platform").get("/api/v1/usage/", {"department": world.nlp.pk}).json()["quotas"]
    assert {row["department"] for row in nlp_only} == {"nlp"}  # nlp's subtree has quotas of nlp only


def test_metrics_count_what_holds_now_so_the_quota_alert_only_sees_a_real_exhaustion(
    world: World, now: datetime.datetime, two_turns: tuple[Allocation, Allocation],
) -> None:
    local = Client(REMOTE_ADDR="127.0.0.1")
    labels = {"department": "vision", "flavor": "h100", "sharing_mode": "exclusive"}
    assert value(scrape(local), "gpuportal_quota_used_units", **labels) == 0
    clock_set(now + DAY + HOUR)
    samples = scrape(local)
    assert value(samples, "gpuportal_quota_used_units", **labels) == 6
    assert value(samples, "gpuportal_quota_used_gpu_equivalents", department="vision") == 6  # of 10: no alert
    clock_set(now + 2 * DAY + HOUR)
    assert value(scrape(local), "gpuportal_quota_used_units", **labels) == 5


def test_a_time_slicing_department_with_only_future_grants_uses_nothing_now(world: World, now: datetime.datetime) -> None:
    sliced = Flavor.objects.create(
        name="h100-ts", display_name="H100 time-slice", gpu_model=world.h100.gpu_model,
        sharing_mode=SharingMode.TIMESLICE, resource_name="nvidia.com/gpu.shared", replicas=4, memory_mib=20480,
        compute_percent=25, gpu_equivalents=Decimal("0.25"),
    )
    Quota.objects.create(department=world.nlp, flavor=sliced, guaranteed=Decimal(0), limit=Decimal(4))
    for day in (1, 2):  # 4 replicas each, on two days that do not touch
        Allocation.objects.create(
            project=world.llm, flavor=sliced, quantity=4, priority_class=world.standard, state=AllocationState.SCHEDULED,
            starts_at=now + day * 2 * DAY, ends_at=now + (day * 2 + 1) * DAY, justification="later",
            requested_by=world.users["nlp_member"],
        )
    row = quota_row(world, "nlp", "h100-ts")
    assert (row["in_use"], row["available"]) == ("0.0000", "4.0000")
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_quota_used_units", department="nlp", flavor="h100-ts", sharing_mode="timeslice") == 0
    span = {"from": now.isoformat(), "to": (now + 6 * DAY).isoformat()}
    assert usage_quota(world, "nlp", "h100-ts", **span)["peak_in_use"] == "4.0000"


def test_a_window_in_force_shows_its_limit_instead_of_the_quotas_own(world: World, now: datetime.datetime) -> None:
    quota = Quota.objects.get(department=world.vision, flavor__isnull=True)  # limit 10
    window = QuotaWindow.objects.create(
        quota=quota, state="approved", kind="temporary", begins_at=now - HOUR, ends_at=now + DAY, limit=Decimal(6),
        requested_by=world.users["platform"], decided_by=world.users["platform"],
    )
    row = quota_row(world, "vision", None)
    assert (row["limit"], row["effective_limit"], row["limit_by"], row["available"]) == (
        "10.0000", "6.0000", window.pk, "6.0000")
    later = quota_row(world, "vision", None, at=(now + DAY).isoformat())  # the window has ended
    assert (later["effective_limit"], later["limit_by"]) == ("10.0000", None)
    assert usage_quota(world, "vision", None)["effective_limit"] == "6.0000"
    samples = scrape(Client(REMOTE_ADDR="127.0.0.1"))
    assert value(samples, "gpuportal_quota_effective_limit_gpu_equivalents", department="vision") == 6
    admin = Client()
    admin.force_login(world.users["vision_admin"])
    page = admin.get("/usage/").content.decode()
    assert "0 of 6 GPU-eq. in use" in " ".join(page.split())


@pytest.mark.parametrize("path", ["/api/v1/quotas/", "quota", "/api/v1/usage/"])
@pytest.mark.parametrize("bad", ["tomorrow", "2026-13-01T00:00:00Z", "9999-01-01T00:00:00Z"])
def test_a_bad_at_is_a_400_naming_at(world: World, path: str, bad: str) -> None:
    if path == "quota":
        path = f"/api/v1/quotas/{Quota.objects.get(department=world.vision, flavor__isnull=True).pk}/"
    response = world.client("vision_member").get(path, {"at": bad})
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert list(fields) == ["at"] and fields["at"] != ["Unknown parameter."], fields


def test_the_request_lines_and_the_preview_carry_their_time_segments(
    world: World, now: datetime.datetime, two_turns: tuple[Allocation, Allocation],
) -> None:
    span = (now + DAY, now + 3 * DAY)
    lines = request_feedback(project=world.seg, flavor=world.h100, quantity=1, cluster=None,
                             request=asked(world, starts_at=span[0], ends_at=span[1])).quota
    h100 = next(line for line in lines if line.department == "vision" and line.what == "h100 units")
    assert (h100.in_use, h100.limit, h100.fits) == (Decimal(6), Decimal(8), True)  # the tighter day, never 6 + 5
    assert [(s.start, s.end, s.in_use) for s in h100.segments] == [
        (now + DAY, now + 2 * DAY, Decimal(6)), (now + 2 * DAY, now + 3 * DAY, Decimal(5))]
    today = request_feedback(project=world.seg, flavor=world.h100, quantity=1, cluster=None,
                             request=asked(world, starts_at=None, ends_at=now + DAY)).quota
    assert {line.in_use for line in today} == {0}  # before both grants
    pending = services.allocation_request(
        actor=world.users["vision_member"], project=world.seg, flavor=world.h100, quantity=1,
        priority_class=world.standard, starts_at=span[0], ends_at=span[1], justification="both days",
    )
    body = world.client("vision_admin").get(f"/api/v1/allocations/{pending.pk}/placement-preview/").json()
    check = next(c for c in body["quota_checks"] if c["department"] == "vision" and c["flavor"] == "h100")
    assert (check["from"], check["until"]) == (span[0].isoformat().replace("+00:00", "Z"),
                                               span[1].isoformat().replace("+00:00", "Z"))
    assert [(s["in_use"], s["limit"]) for s in check["segments"]] == [("6", "8"), ("5", "8")]
    admin = Client()
    admin.force_login(world.users["vision_admin"])
    queue = " ".join(admin.get("/approvals/").content.decode().split())
    assert "vision · h100 units: 6 + 1 of 8 <span class=\"muted\">(its tightest of 2 periods" in queue
