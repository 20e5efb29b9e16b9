"""A quota's numbers over time through ``/api/v1/quotas/{id}/effective/?at=`` and
``/timeline/?from=&to=``: the approved windows' numbers with their precedence (temporary over
recurring, a class's own over department-wide), with fixed dates; bad times are a 400 naming the
parameter."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from allocations.models import Quota, QuotaWindow
from tests.conftest import World
from tests.quotas.test_window_api import NOW_ISH, UTC, effective, far, refused, total


def approved(world: World, quota: Quota, **terms: Any) -> QuotaWindow:
    """An approved window with fixed dates, written directly (the API takes only times near now)."""
    return QuotaWindow.objects.create(quota=quota, state="approved", requested_by=world.users["platform"],
                                      decided_by=world.users["platform"], **terms)


def moment(day: int, hour: int) -> datetime.datetime:
    """Next year's June ``day`` at ``hour`` UTC: fixed dates, always within the API's five years."""
    return datetime.datetime(timezone.now().year + 1, 6, day, hour, tzinfo=UTC)


@pytest.fixture
def festival_and_nights(world: World) -> tuple[Quota, QuotaWindow, QuotaWindow, QuotaWindow]:
    """nlp's quota (guaranteed 2, limit 10) with a nightly shrink of the limit to 6 (20:00-08:00 in
    Shanghai: 12:00-00:00 UTC) from June 1st, a festival of +3 guaranteed and +4 limit from June 10th
    00:00 to June 12th 00:00 UTC, and the preemptible class's share cut to 3 on June 9th."""
    quota = total(world)
    Quota.objects.filter(pk=quota.pk).update(guaranteed=Decimal(2))
    quota.refresh_from_db()
    night = approved(world, quota, kind="recurring", begins_at=moment(1, 12), rrule="FREQ=DAILY",
                     timezone="Asia/Shanghai", duration_minutes=720, limit=Decimal(6))
    festival = approved(world, quota, kind="temporary", begins_at=moment(10, 0), ends_at=moment(12, 0),
                        guaranteed_delta=Decimal(3), limit_delta=Decimal(4))
    share = approved(world, quota, kind="temporary", begins_at=moment(9, 0), ends_at=moment(10, 0),
                     priority_class=world.preemptible, limit=Decimal(3))
    return quota, night, festival, share


@pytest.mark.django_db
def test_the_effective_numbers_follow_the_windows_in_force_with_their_precedence(
    world: World, festival_and_nights: tuple[Quota, QuotaWindow, QuotaWindow, QuotaWindow],
) -> None:
    quota, night, festival, share = festival_and_nights

    def at(day: int, hour: int, **params: str) -> tuple[str, str, int | None, int | None, list[int]]:
        body = effective(world, quota, at=moment(day, hour).isoformat(), **params)
        assert body["base"] == {"guaranteed": "2.0000", "limit": "10.0000"} and body["quota"] == quota.pk
        return body["guaranteed"], body["limit"], body["guaranteed_by"], body["limit_by"], body["windows"]

    assert at(9, 6) == ("2.0000", "10.0000", None, None, [])  # 14:00 in Shanghai
    assert at(9, 13) == ("2.0000", "6.0000", None, night.pk, [night.pk])  # 21:00 in Shanghai
    assert at(10, 6) == ("5.0000", "14.0000", festival.pk, festival.pk, [festival.pk])
    # at night during the festival, the temporary window wins over the recurring one
    assert at(10, 13) == ("5.0000", "14.0000", festival.pk, festival.pk, sorted([night.pk, festival.pk]))
    # the class's own window wins for its share; department-wide windows apply to it too
    assert at(9, 6, priority_class=str(world.preemptible.pk)) == ("2.0000", "3.0000", None, share.pk, [share.pk])
    assert at(9, 6, priority_class=str(world.standard.pk)) == ("2.0000", "10.0000", None, None, [])


@pytest.mark.django_db
def test_the_timeline_is_the_step_function_of_those_numbers(
    world: World, festival_and_nights: tuple[Quota, QuotaWindow, QuotaWindow, QuotaWindow],
) -> None:
    quota, night, festival, _ = festival_and_nights
    response = world.client("nlp_member").get(
        f"/api/v1/quotas/{quota.pk}/timeline/", {"from": moment(9, 0).isoformat(), "to": moment(13, 0).isoformat()}
    )
    assert response.status_code == 200, response.content

    steps = [(datetime.datetime.fromisoformat(step["start"]), datetime.datetime.fromisoformat(step["end"]),
              step["guaranteed"], step["limit"], step["windows"]) for step in response.json()["steps"]]

    both = sorted([night.pk, festival.pk])
    assert steps == [
        (moment(9, 0), moment(9, 12), "2.0000", "10.0000", []),
        (moment(9, 12), moment(10, 0), "2.0000", "6.0000", [night.pk]),
        (moment(10, 0), moment(10, 12), "5.0000", "14.0000", [festival.pk]),
        (moment(10, 12), moment(11, 0), "5.0000", "14.0000", both),
        (moment(11, 0), moment(11, 12), "5.0000", "14.0000", [festival.pk]),
        (moment(11, 12), moment(12, 0), "5.0000", "14.0000", both),
        (moment(12, 0), moment(12, 12), "2.0000", "10.0000", []),
        (moment(12, 12), moment(13, 0), "2.0000", "6.0000", [night.pk]),
    ]


@pytest.mark.django_db
def test_only_approved_windows_count(world: World, festival_and_nights: tuple[Quota, QuotaWindow, QuotaWindow, QuotaWindow]) -> None:
    quota, night, festival, _ = festival_and_nights
    QuotaWindow.objects.filter(pk=festival.pk).update(state="cancelled")
    QuotaWindow.objects.filter(pk=night.pk).update(state="pending")
    assert effective(world, quota, at=moment(10, 13).isoformat())["limit"] == "10.0000"


@pytest.mark.django_db
def test_the_timeline_defaults_to_the_next_seven_days(world: World) -> None:
    body = world.client("nlp_member").get(f"/api/v1/quotas/{total(world).pk}/timeline/").json()
    [step] = body["steps"]
    start, end = (datetime.datetime.fromisoformat(step[name]) for name in ("start", "end"))
    assert end - start == datetime.timedelta(days=7) and abs(start - timezone.now()) < NOW_ISH
    assert (step["limit"], body["base"]["limit"]) == ("10.0000", "10.0000")


BAD_TIMES: list[tuple[str, dict[str, str], str]] = [
    ("effective", {"at": "yesterday"}, "at"),
    ("effective", {"at": "2999-01-01T00:00:00Z"}, "at"),
    ("effective", {"at": "0001-01-01T00:00:00+00:00"}, "at"),
    ("effective", {"priority_class": "987654"}, "priority_class"),
    ("effective", {"priority_class": "first"}, "priority_class"),
    ("timeline", {"from": "soon"}, "from"),
    ("timeline", {"from": "1900-01-01T00:00:00Z"}, "from"),
    ("timeline", {"to": "9999-12-31T23:59:59Z"}, "to"),
    ("timeline", {"to": "2000-01-01T00:00:00Z"}, "to"),
    ("timeline", {"from": far(10), "to": far(9)}, "to"),  # before from
    ("timeline", {"from": far(1), "to": far(100)}, "to"),  # longer than 92 days
    ("timeline", {"priority_class": "0"}, "priority_class"),
]


@pytest.mark.parametrize(("view", "params", "field"), BAD_TIMES, ids=lambda value: str(value)[:30])
@pytest.mark.django_db
def test_bad_times_and_classes_are_a_400_naming_the_parameter(world: World, view: str, params: dict[str, str], field: str) -> None:
    refused(world.client("nlp_member").get(f"/api/v1/quotas/{total(world).pk}/{view}/", params), field)
