"""The quota calendar: whoever reads a department sees its quotas' effective numbers over the next
seven days as step charts with the use now, its windows and who a coming shrink hits; department
admins ask for windows, platform admins decide (four-eyes) or create them in force; outsiders get 404."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal
from html import unescape
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from allocations.grants import services
from allocations.models import Allocation, PriorityClass, Quota
from allocations.models.windows import QuotaWindow, WindowState
from allocations.quotas.windows import Effective, Step
from allocations.windows.services import quota_window_approve, quota_window_create
from allocations.windows.terms import WindowTerms
from frontend.quota_calendar import LEFT, chart, department_calendar, grants_over
from tenants.models import Membership, Role
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def text_of(page: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)).strip())


def part(html: str, pattern: str) -> str:
    found = re.search(pattern, html, re.S)
    assert found is not None, pattern
    return found.group(0)


def gpu_quota(world: World) -> Quota:
    return Quota.objects.get(department=world.nlp, flavor=None)


def window(world: World, *, persona: str = "platform", begins_in: datetime.timedelta, hours: float,
           **values: Any) -> QuotaWindow:
    """A window asked for by ``persona``; a platform admin's is approved by a second one (four-eyes)."""
    begins = timezone.now() + begins_in
    created = quota_window_create(
        actor=world.users[persona], quota_id=values.pop("quota", gpu_quota(world)).pk, justification="calendar tests",
        terms=WindowTerms(kind="temporary", begins_at=begins, ends_at=begins + datetime.timedelta(hours=hours), **values),
    )
    if persona != "platform" or created.state != WindowState.PENDING:
        return created
    second = world.users.get("platform_second") or world.persona_add(
        "platform_second", role=Role.PLATFORM_ADMIN, department=world.acme)
    return quota_window_approve(actor=second, window_id=created.pk)


def grant(world: World, quantity: int, priority_class: PriorityClass) -> Allocation:
    start = timezone.now() - datetime.timedelta(minutes=1)
    allocation = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=quantity,
        priority_class=priority_class, starts_at=start, ends_at=start + datetime.timedelta(days=2),
        justification="calendar",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


@pytest.mark.parametrize("persona", ["nlp_member", "nlp_admin", "auditor", "platform"])
def test_the_department_and_those_above_it_read_its_calendar(world: World, login: Login, persona: str) -> None:
    response = login(persona).get(f"/calendar/{world.nlp.pk}/")
    assert response.status_code == 200
    assert "Quota calendar of NLP" in response.content.decode()


@pytest.mark.parametrize("persona", ["vision_member", "vision_admin", "speech_member", "nobody"])
def test_outsiders_get_404(world: World, login: Login, persona: str) -> None:
    client = login(persona)
    assert client.get(f"/calendar/{world.nlp.pk}/").status_code == 404
    assert client.post(f"/calendar/{world.nlp.pk}/windows/", {}).status_code == 404
    pending = window(world, persona="nlp_admin", begins_in=datetime.timedelta(days=1), hours=2, limit_delta=Decimal(2))
    assert client.post(f"/quota-windows/{pending.pk}/decide/", {"decision": "approve"}).status_code == 404
    assert client.post(f"/quota-windows/{pending.pk}/cancel/").status_code == 404
    assert QuotaWindow.objects.get(pk=pending.pk).state == WindowState.PENDING


def test_the_navigation_leads_to_a_calendar_one_may_read(world: World, login: Login) -> None:
    response = login("vision_member").get("/calendar/")
    assert response.status_code == 302 and response["Location"] == f"/calendar/{world.vision.pk}/"
    html = login("nlp_member").get("/").content.decode()
    assert '<a href="/calendar/">Quota calendar</a>' in html
    assert login("nobody").get("/calendar/").status_code == 403
    assert "Quota calendar" not in login("nobody").get("/").content.decode()


def test_the_chart_steps_up_for_a_raise_and_back_and_lists_the_coming_shrink(world: World, login: Login) -> None:
    raised = window(world, begins_in=datetime.timedelta(days=2), hours=24, limit_delta=Decimal(4))
    html = login("nlp_member").get(f"/calendar/{world.nlp.pk}/").content.decode()
    quota = gpu_quota(world)
    figure = re.search(rf'<figure class="calendar" id="calendar-{quota.pk}">.*?</figure>', html, re.S)
    assert figure is not None
    limit = re.search(r'<polyline class="chart-limit" points="([^"]+)"', figure.group(0))
    assert limit is not None
    points = [tuple(float(n) for n in point.split(",")) for point in limit.group(1).split()]
    assert len(points) == 6  # three steps: base, raised, base again
    base_y, raised_y = points[0][1], points[2][1]
    assert raised_y < base_y and points[4][1] == base_y  # higher is drawn further up, and back down
    right = points[-1][0]
    assert points[2][0] == pytest.approx(LEFT + (right - LEFT) * 2 / 7, abs=1.0)  # two days in
    text = text_of(figure.group(0))
    assert "now: limit 10, guaranteed 0" in text
    assert "limit 14 → 10" in text and f"#{raised.pk} (wait)" in text
    windows = text_of(part(html, r'<table class="queue cards" id="windows">.*?</table>'))
    assert f"#{raised.pk} GPU-equivalents" in windows and "limit +4" in windows and "Approved" in windows
    assert "begins" in windows and "ends" in windows and "asked by platform" in windows


def test_each_step_of_the_chart_tells_its_values_on_hover_and_focus(world: World, login: Login) -> None:
    """The calendar's chart is read like the utilisation charts: a point per step, its values as a
    tooltip and as its accessible name, one point in the tab order, a readout under the chart."""
    raised = window(world, begins_in=datetime.timedelta(days=2), hours=24, limit_delta=Decimal(4))
    html = login("nlp_member").get(f"/calendar/{world.nlp.pk}/").content.decode()
    figure = re.search(rf'<figure class="calendar" id="calendar-{gpu_quota(world).pk}">.*?</figure>', html, re.S)
    assert figure is not None
    svg = re.search(r'<svg class="calendar-chart"[^>]*>', figure.group(0))
    assert svg is not None and 'role="group"' in svg.group(0)
    readout = re.search(r'data-chart-readout="([^"]+)"', svg.group(0))
    assert readout is not None and f'id="{readout.group(1)}"' in figure.group(0)
    points = re.findall(r'<rect class="chart-point"[^>]*tabindex="(-?\d)"[^>]*aria-label="([^"]+)"', figure.group(0))
    assert [tab for tab, _label in points] == ["0", "-1", "-1"]  # three steps, one tab stop
    labels = [unescape(label) for _tab, label in points]
    assert labels[1].endswith(f"limit 14 (quota window #{raised.pk}), guarantee 0; 0 in use now")
    assert " to " in labels[1] and "UTC: limit" in labels[1]
    assert "limit 10, guarantee 0" in labels[0] and "quota window" not in labels[0]


def test_a_shrink_within_30_minutes_names_the_grants_over_the_new_value(world: World, login: Login) -> None:
    oldest = grant(world, 1, world.standard)
    newer = grant(world, 2, world.standard)
    cheap = grant(world, 2, world.preemptible)
    window(world, begins_in=datetime.timedelta(minutes=10), hours=2, limit=Decimal(2), shrink_policy="reclaim")
    calendar = department_calendar(user=world.users["nlp_admin"], department=world.nlp, now=timezone.now())
    [(row, shrink)] = [(r, s) for r, s in calendar.shrinks_soon if r.quota.flavor is None]
    assert (shrink.before, shrink.after, shrink.held) == (Decimal(10), Decimal(2), Decimal(5))
    assert [g.id for g in shrink.over] == [cheap.pk, newer.pk]  # lowest priority first, then newest
    html = login("nlp_admin").get(f"/calendar/{world.nlp.pk}/").content.decode()
    soon = text_of(part(html, r'<section[^>]*id="shrinks-soon".*?</section>'))
    assert f"#{cheap.pk} of nlp_member (nlp-llm), #{newer.pk} of nlp_member (nlp-llm)" in soon
    assert "reclaimed with their notice" in soon and f"#{oldest.pk}" not in soon


def test_the_grants_over_a_value_are_the_fewest_lowest_priority_newest_first() -> None:
    from frontend.quota_calendar import HeldGrant

    now = timezone.now()

    def held(pk: int, priority: int, amount: str, ends_in_hours: float = 5) -> HeldGrant:
        return HeldGrant(id=pk, project="p", owner="o", priority_class="c", priority=priority, amount=Decimal(amount),
                         what="", starts_at=now - datetime.timedelta(hours=1),
                         until=now + datetime.timedelta(hours=ends_in_hours))

    grants = [held(1, 10, "3"), held(2, 10, "2"), held(3, 5, "1"), held(4, 5, "1", ends_in_hours=1)]
    at = now + datetime.timedelta(hours=2)  # grant 4 has ended by then
    total, over = grants_over(grants, at=at, value=Decimal(4))
    assert total == Decimal(6) and [g.id for g in over] == [3, 2]
    assert grants_over(grants, at=at, value=Decimal(6)) == (Decimal(6), ())


def test_the_chart_scales_to_the_highest_value_and_describes_itself() -> None:
    start = datetime.datetime(2030, 1, 1, 6, tzinfo=datetime.UTC)
    end = start + datetime.timedelta(days=7)
    cut = start + datetime.timedelta(days=1)
    steps = [Step(start, cut, Effective(Decimal(2), Decimal(8), None, None)),
             Step(cut, end, Effective(Decimal(2), Decimal(20), None, 7, (7,)))]
    drawn = chart(steps=steps, in_use=Decimal(5), start=start, end=end, label="a100")
    ys = [float(point.split(",")[1]) for point in drawn.limit_points.split()]
    top = float(drawn.ticks[-1][1])
    assert top >= 20 and ys[2] < ys[0]
    assert float(drawn.use_y) == pytest.approx(drawn.plot_bottom - drawn.plot_height * 5 / top, abs=0.1)
    assert [label for _, label in drawn.days] == ["Wed 02", "Thu 03", "Fri 04", "Sat 05", "Sun 06", "Mon 07", "Tue 08"]
    assert "limit 8 and guarantee 2 now, 5 in use; 2 steps" in drawn.description


def test_a_class_share_gets_its_own_row(world: World, login: Login) -> None:
    window(world, begins_in=datetime.timedelta(hours=1), hours=10, limit=Decimal(3))
    window(world, begins_in=datetime.timedelta(hours=3), hours=10, limit=Decimal(1),
           priority_class_id=world.preemptible.pk)
    html = login("nlp_member").get(f"/calendar/{world.nlp.pk}/").content.decode()
    quota = gpu_quota(world)
    assert f'id="calendar-{quota.pk}-class-{world.preemptible.pk}"' in html
    assert "GPU-equivalents, gpu-preemptible's share" in text_of(html)


def test_a_department_admin_asks_and_errors_show_next_to_their_fields(world: World, login: Login) -> None:
    client = login("nlp_admin")
    quota = gpu_quota(world)
    begins = timezone.now() + datetime.timedelta(days=1)
    data = {"quota": quota.pk, "kind": "temporary", "begins_at": f"{begins:%Y-%m-%dT%H:%M}",
            "ends_at": f"{begins - datetime.timedelta(hours=1):%Y-%m-%dT%H:%M}", "limit_delta": "4",
            "shrink_policy": "wait", "justification": "festival"}
    response = client.post(f"/calendar/{world.nlp.pk}/windows/", data)
    assert response.status_code == 400
    error = re.search(r'id="id_window_ends_at_error"[^>]*>(.*?)</div>', response.content.decode(), re.S)
    assert error is not None and "The end must be after begins_at." in error.group(1)
    recurring = {**data, "kind": "recurring", "ends_at": "", "rrule": "FREQ=DAILY", "timezone": "Europe/Berlin"}
    response = client.post(f"/calendar/{world.nlp.pk}/windows/", recurring)
    error = re.search(r'id="id_window_duration_minutes_error"[^>]*>(.*?)</div>', response.content.decode(), re.S)
    assert response.status_code == 400 and error is not None and "needs the duration" in error.group(1)
    assert not QuotaWindow.objects.exists()

    data["ends_at"] = f"{begins + datetime.timedelta(hours=6):%Y-%m-%dT%H:%M}"
    response = client.post(f"/calendar/{world.nlp.pk}/windows/", data, follow=True)
    created = QuotaWindow.objects.get()
    assert (created.state, created.limit_delta, created.requested_by) == (WindowState.PENDING, Decimal(4), world.users["nlp_admin"])
    assert f"Quota window #{created.pk} waits for a platform admin" in response.content.decode()
    assert login("nlp_member").post(f"/calendar/{world.nlp.pk}/windows/", data).status_code == 403
    assert 'id="window-form"' not in login("nlp_member").get(f"/calendar/{world.nlp.pk}/").content.decode()


def test_a_platform_admin_decides_from_the_approvals_page_never_on_their_own(world: World, login: Login) -> None:
    asked = window(world, persona="nlp_admin", begins_in=datetime.timedelta(days=1), hours=4, limit_delta=Decimal(2))
    html = login("nlp_admin").get("/approvals/").content.decode()
    assert f'id="pending-window-{asked.pk}"' in html and f"Withdraw window #{asked.pk}" in html
    assert f"Approve window #{asked.pk}" not in html
    Membership.objects.create(user=world.users["nlp_admin"], department=world.acme, role=Role.PLATFORM_ADMIN)
    own = login("nlp_admin")
    assert "another platform admin must decide (four-eyes)" in own.get("/approvals/").content.decode()
    response = own.post(f"/quota-windows/{asked.pk}/decide/", {"decision": "approve", "back": "approvals"}, follow=True)
    assert f"Quota window #{asked.pk} not approved: Nobody decides on their own" in response.content.decode()

    client = login("platform")
    assert f"Approve window #{asked.pk}" in client.get("/approvals/").content.decode()
    response = client.post(f"/quota-windows/{asked.pk}/decide/", {"decision": "reject", "comment": " "}, follow=True)
    assert "A rejection needs a comment" in response.content.decode()
    response = client.post(f"/quota-windows/{asked.pk}/decide/", {"decision": "approve", "comment": "ok"}, follow=True)
    assert response.redirect_chain[-1][0] == f"/calendar/{world.nlp.pk}/"
    asked.refresh_from_db()
    assert (asked.state, asked.decided_by, asked.decision_comment) == (WindowState.APPROVED, world.users["platform"], "ok")


def test_a_platform_admin_creates_a_window_in_force_and_the_requester_may_cancel(
    world: World, login: Login, settings: Any
) -> None:
    settings.GPUPORTAL_FOUR_EYES = False  # with it on, the window waits for another platform admin (test_rule_four_eyes)
    quota = gpu_quota(world)
    begins = timezone.now() - datetime.timedelta(minutes=1)
    data = {"quota": quota.pk, "kind": "temporary", "begins_at": f"{begins:%Y-%m-%dT%H:%M}",
            "ends_at": f"{begins + datetime.timedelta(days=1):%Y-%m-%dT%H:%M}", "limit_delta": "4",
            "shrink_policy": "wait", "justification": "festival"}
    response = login("platform").post(f"/calendar/{world.nlp.pk}/windows/", data, follow=True)
    created = QuotaWindow.objects.get()
    assert created.state == WindowState.APPROVED
    html = response.content.decode()
    assert f"Quota window #{created.pk} is in force as of its start." in html
    assert "now: limit 14, guaranteed 0" in text_of(html)
    asked = window(world, persona="nlp_admin", begins_in=datetime.timedelta(days=1), hours=4, limit_delta=Decimal(2))
    assert login("nlp_member").post(f"/quota-windows/{asked.pk}/cancel/", follow=True).status_code == 200
    assert QuotaWindow.objects.get(pk=asked.pk).state == WindowState.PENDING  # not theirs: refused
    login("nlp_admin").post(f"/quota-windows/{asked.pk}/cancel/")
    assert QuotaWindow.objects.get(pk=asked.pk).state == WindowState.CANCELLED


def test_the_page_needs_no_inline_style_or_script(world: World, login: Login) -> None:
    window(world, begins_in=datetime.timedelta(hours=2), hours=3, limit_delta=Decimal(1))
    html = login("platform").get(f"/calendar/{world.nlp.pk}/").content.decode()
    assert "style=" not in html and "<style" not in html
    assert all('src="' in tag for tag in re.findall(r"<script[^>]*>", html))
    assert re.search(r"<[^>]*\son[a-z]+=", html) is None  # no event handler attributes
    assert "<svg" in html


def test_the_demo_seeds_nlps_nightly_raise_and_visions_festival_once() -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from allocations.quotas.window_reading import approved_window_specs
    from allocations.quotas.windows import effective
    from tenants.models import Department

    seeded_on = timezone.now().astimezone(datetime.UTC).date()
    call_command("seed_demo")
    call_command("seed_demo")
    assert QuotaWindow.objects.filter(state=WindowState.APPROVED).count() == 3
    nlp = Quota.objects.get(department__slug="nlp", flavor=None)
    vision = Quota.objects.get(department__slug="vision", flavor=None)
    specs = approved_window_specs()
    berlin = ZoneInfo("Europe/Berlin")
    today = timezone.now().astimezone(berlin).date() + datetime.timedelta(days=1)

    def limit(quota: Quota, at: datetime.datetime, priority_class_id: int | None = None) -> Decimal:
        return effective(guaranteed=quota.guaranteed, limit=quota.limit, windows=specs.get(quota.pk, []), at=at,
                         priority_class_id=priority_class_id).limit

    night = datetime.datetime.combine(today, datetime.time(23), berlin)
    noon = datetime.datetime.combine(today, datetime.time(12), berlin)
    assert (limit(nlp, noon), limit(nlp, night)) == (nlp.limit, nlp.limit + 4)
    preemptible = PriorityClass.objects.get(name="gpu-preemptible").pk
    assert (limit(nlp, noon, preemptible), limit(nlp, night, preemptible)) == (Decimal(4), nlp.limit + 4)
    festival = QuotaWindow.objects.get(quota=vision)
    begins = festival.begins_at.astimezone(datetime.UTC)
    assert begins.weekday() == 0 and begins.time() == datetime.time(8) and begins > timezone.now()
    assert 1 <= (begins.date() - seeded_on).days <= 7  # next week's Monday: up to 7 days and 8 hours from a Monday
    assert festival.ends_at is not None
    assert limit(vision, festival.begins_at) == vision.limit + 4 == limit(vision, festival.ends_at) + 4
    assert {w.requested_by for w in QuotaWindow.objects.all()} == {User.objects.get(username="admin")}
    calendar = department_calendar(user=User.objects.get(username="bob"),
                                   department=Department.objects.get(slug="nlp"), now=timezone.now())
    assert [row.label for row in calendar.rows][:2] == ["GPU-equivalents", "GPU-equivalents, gpu-preemptible's share"]
    assert len(calendar.rows[0].steps) >= 13  # up and down each night of the week


@pytest.mark.parametrize(("now", "monday"), [
    ("2026-12-07T00:02:13+00:00", "2026-12-14"),  # a Monday's small hours: next week's, not today's 08:00
    ("2026-12-07T09:00:00+00:00", "2026-12-14"),
    ("2026-12-06T23:59:00+00:00", "2026-12-07"),  # a Sunday night: tomorrow
    ("2026-12-06T23:30:00-01:00", "2026-12-14"),  # already Monday in UTC
    ("2026-12-09T12:00:00+00:00", "2026-12-14"),
])
def test_the_demo_festival_begins_on_the_next_monday_at_eight_utc(now: str, monday: str) -> None:
    from demo.windows import _next_monday

    begins = _next_monday(datetime.datetime.fromisoformat(now))
    assert begins == datetime.datetime.fromisoformat(f"{monday}T08:00:00+00:00")
