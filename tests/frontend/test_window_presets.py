"""The quota-window form's presets: once (a festival) and day/night write the window's terms
without a typed rule, the zone is chosen from a list (the common ones first), the number fields say
what each means; the raw rule stays under "advanced". Bad input is an error next to its field, with
what was typed kept."""

from __future__ import annotations

import datetime
import re
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from allocations.models import Quota
from allocations.models.windows import QuotaWindow, WindowKind, WindowState
from frontend.window_presets import daily_minutes, daily_rule
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db

WORKDAYS = ["MO", "TU", "WE", "TH", "FR"]
BERLIN = ZoneInfo("Europe/Berlin")


def url(world: World) -> str:
    return f"/calendar/{world.nlp.pk}/windows/"


def daily(world: World, **changes: Any) -> dict[str, Any]:
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    return {"quota": quota.pk, "kind": "daily", "timezone": "Europe/Berlin", "daily_from": "20:00", "daily_until": "08:00",
            "weekdays": WORKDAYS, "limit_delta": "4", "shrink_policy": "wait", "justification": "nightly training",
            **changes}


def error_of(html: str, field: str) -> str:
    found = re.search(rf'id="id_window_{field}_error"[^>]*>(.*?)</div>', html, re.S)
    assert found is not None, field
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_a_day_night_preset_writes_the_rule_its_duration_and_its_days(world: World, login: Login) -> None:
    today = timezone.now().astimezone(BERLIN).date()
    response = login("nlp_admin").post(url(world), daily(world), follow=True)
    assert response.status_code == 200, response.content[:2000]
    window = QuotaWindow.objects.get()
    assert (window.kind, window.rrule, window.timezone, window.duration_minutes) == (
        WindowKind.RECURRING, "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=20;BYMINUTE=0", "Europe/Berlin", 720)
    assert window.begins_at == datetime.datetime.combine(today, datetime.time(), tzinfo=BERLIN)
    assert window.ends_at is None and window.state == WindowState.PENDING


def test_every_day_is_a_daily_rule_and_a_last_day_ends_it(world: World, login: Login) -> None:
    first = timezone.now().astimezone(BERLIN).date() + datetime.timedelta(days=2)
    last = first + datetime.timedelta(days=6)
    body = daily(world, weekdays=[*WORKDAYS, "SA", "SU"], daily_from="22:30", daily_until="06:00", first_day=first.isoformat(), last_day=last.isoformat())
    assert login("nlp_admin").post(url(world), body).status_code == 302
    window = QuotaWindow.objects.get()
    assert (window.rrule, window.duration_minutes) == ("FREQ=DAILY;BYHOUR=22;BYMINUTE=30", 450)
    assert window.begins_at == datetime.datetime.combine(first, datetime.time(), tzinfo=BERLIN)
    assert window.ends_at == datetime.datetime.combine(last + datetime.timedelta(days=1), datetime.time(), tzinfo=BERLIN)


def test_a_window_once_reads_its_times_in_the_zone_chosen(world: World, login: Login) -> None:
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    day = timezone.now().astimezone(BERLIN).date() + datetime.timedelta(days=3)
    body = {"quota": quota.pk, "kind": "temporary", "timezone": "Europe/Berlin", "begins_at": f"{day.isoformat()}T18:00",
            "ends_at": f"{(day + datetime.timedelta(days=2)).isoformat()}T06:00", "limit": "14", "shrink_policy": "wait",
            "justification": "festival"}
    assert login("nlp_admin").post(url(world), body).status_code == 302
    window = QuotaWindow.objects.get()
    assert window.kind == WindowKind.TEMPORARY and window.timezone == "" and window.rrule == ""
    assert window.begins_at == datetime.datetime.combine(day, datetime.time(18), tzinfo=BERLIN)
    assert window.ends_at == datetime.datetime.combine(day + datetime.timedelta(days=2), datetime.time(6), tzinfo=BERLIN)


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"timezone": ""}, "timezone", "This field is required."),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone", "Select a valid choice."),
    ({"daily_until": "20:00"}, "daily_until", "The end must differ from the start."),
    ({"daily_from": "25:00"}, "daily_from", "Enter a valid time."),
    ({"weekdays": []}, "weekdays", "Choose at least one day."),
    ({"first_day": "2001-01-01"}, "first_day", "days ago"),
    ({"limit_delta": "", "limit": ""}, "limit_delta", "Give at least one"),
    ({"limit": "12"}, "limit", "not both"),
])
def test_bad_input_is_an_error_next_to_its_field_with_the_input_kept(
    world: World, login: Login, changes: dict[str, Any], field: str, message: str
) -> None:
    body = daily(world, **changes)
    response = login("nlp_admin").post(url(world), body)
    html = response.content.decode()
    assert response.status_code == 400
    assert message in error_of(html, field)
    assert not QuotaWindow.objects.exists()
    assert re.search(r'<input type="radio" name="kind" value="daily"[^>]* checked', html)
    assert 'nightly training</textarea>' in html
    if field not in ("daily_from", "daily_until"):
        assert re.search(r'name="daily_from" value="20:00"', html)
    if field != "weekdays":
        assert re.search(r'name="weekdays" value="MO"[^>]* checked', html)
        assert not re.search(r'name="weekdays" value="SA"[^>]* checked', html)


def test_the_zone_is_chosen_from_a_list_the_common_ones_first(world: World, login: Login) -> None:
    html = login("nlp_admin").get(f"/calendar/{world.nlp.pk}/").content.decode()
    select = re.search(r'<select name="timezone".*?</select>', html, re.S)
    assert select is not None
    zones = re.findall(r'<option value="([^"]*)"', select.group(0))
    assert zones[:3] == ["", "UTC", "Europe/London"] and "Europe/Berlin" in zones[:8]
    assert zones.index("Asia/Tokyo") < zones.index("Africa/Abidjan") and len(zones) > 300
    assert len(zones) == len(set(zones))


def test_the_form_says_what_each_number_means_and_keeps_the_raw_rule_under_advanced(world: World, login: Login) -> None:
    html = login("nlp_admin").get(f"/calendar/{world.nlp.pk}/").content.decode()
    numbers = re.search(r'<fieldset class="window-part" id="window-numbers".*?</fieldset>', html, re.S)
    assert numbers is not None and "What changes while it is in force" in numbers.group(0)
    assert "Optional, but at least one of the four" in numbers.group(0)
    for label in ("Limit: change by", "Limit: set to", "Guarantee: change by", "Guarantee: set to"):
        assert label in numbers.group(0)
    advanced = re.search(r'<details class="window-part" id="window-advanced".*?</details>', html, re.S)
    assert advanced is not None and 'name="rrule"' in advanced.group(0) and "Advanced" in advanced.group(0)
    assert 'name="kind" value="daily"' in html


def test_an_existing_rule_is_still_written_under_advanced(world: World, login: Login) -> None:
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    tokyo = ZoneInfo("Asia/Tokyo")
    day = timezone.now().astimezone(tokyo).date() + datetime.timedelta(days=2)
    body = {"quota": quota.pk, "kind": "recurring", "begins_at": f"{day.isoformat()}T00:00", "timezone": "Asia/Tokyo",
            "rrule": "FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=0;BYMINUTE=0", "duration_minutes": "1440", "limit_delta": "2",
            "shrink_policy": "wait", "justification": "month start"}
    assert login("nlp_admin").post(url(world), body).status_code == 302
    window = QuotaWindow.objects.get()
    assert (window.rrule, window.timezone, window.duration_minutes) == (
        "FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=0;BYMINUTE=0", "Asia/Tokyo", 1440)
    assert window.begins_at == datetime.datetime.combine(day, datetime.time(), tzinfo=tokyo)


@pytest.mark.parametrize(("persona", "status"), [("nlp_member", 403), ("vision_admin", 404), ("nobody", 404)])
def test_only_the_departments_admins_and_platform_admins_use_a_preset(
    world: World, login: Login, persona: str, status: int
) -> None:
    assert login(persona).post(url(world), daily(world)).status_code == status
    assert not QuotaWindow.objects.exists()


@pytest.mark.parametrize(("four_eyes", "state"), [(True, WindowState.PENDING), (False, WindowState.APPROVED)])
def test_a_platform_admins_preset_waits_for_another_admin_only_with_four_eyes(
    world: World, login: Login, settings: Any, four_eyes: bool, state: str
) -> None:
    settings.GPUPORTAL_FOUR_EYES = four_eyes
    assert login("platform").post(url(world), daily(world)).status_code == 302
    assert QuotaWindow.objects.get().state == state


def test_the_rule_written_is_the_one_shown() -> None:
    assert daily_rule(starts=datetime.time(20), weekdays=["SA", "SU"]) == "FREQ=WEEKLY;BYDAY=SA,SU;BYHOUR=20;BYMINUTE=0"
    assert daily_minutes(starts=datetime.time(8), ends=datetime.time(20)) == 720
    assert daily_minutes(starts=datetime.time(20), ends=datetime.time(8)) == 720
