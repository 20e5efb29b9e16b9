"""Bounds on a quota window's RRULE (``allocations.quotas.rrule_bounds``): each refused with a 400
naming ``rrule`` that states the bound, wherever a window is asked for; a hostile rule stored before
the bounds stays readable and every list and calendar that expands it walks its budget at most; and no
accepted rule makes a list or calendar request walk more than a page's worth (a property). The work is
counted in starts walked, never timed: a loaded machine slows a request, not the count.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.models import Quota
from allocations.models.windows import QuotaWindow, WindowState
from allocations.quotas import walking, windows
from allocations.windows import services as window_services
from kernel.errors import FieldError
from tests.conftest import World

EVERY_SECOND = (  # the 437 characters of the report: a daily rule that fires every second
    "FREQ=DAILY;BYHOUR=" + ",".join(str(h) for h in range(24)) + ";BYMINUTE=" + ",".join(str(m) for m in range(60))
    + ";BYSECOND=" + ",".join(str(s) for s in range(60))
)
EVERY_MINUTE = "FREQ=DAILY;BYHOUR=" + ",".join(str(h) for h in range(24)) + ";BYMINUTE=" + ",".join(str(m) for m in range(60))
EVALUATIONS_PER_WINDOW = 3  # a list evaluates a window's rule at most this often, a calendar too
HOSTILE_WORK = 4 * windows.PAGE_BUDGET  # starts a request may walk over three hostile rules (1,615 measured
# for the calendar); walked start by start, the every-second rule alone is 86,400 starts a day


def total(world: World) -> Quota:
    return Quota.objects.get(department=world.nlp, flavor__isnull=True)


def recurring(world: World, rule: str, **more: Any) -> dict[str, Any]:
    return {"quota": total(world).pk, "kind": "recurring", "begins_at": timezone.now().isoformat(), "rrule": rule,
            "timezone": "Europe/Berlin", "duration": "PT1H", "limit_delta": "2", "justification": "test", **more}


def refused_on_rrule(world: World, rule: str, persona: str = "nlp_admin") -> str:
    response = world.client(persona).post("/api/v1/quota-windows/", recurring(world, rule), format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"]["fields"].keys() == {"rrule"}, body
    assert not QuotaWindow.objects.exists()
    message: str = body["error"]["fields"]["rrule"][0]
    return message


@pytest.mark.django_db
def test_the_reported_every_second_rule_is_a_400_naming_rrule_and_its_length(world: World) -> None:
    assert len(EVERY_SECOND) == 437
    message = refused_on_rrule(world, EVERY_SECOND)
    assert "at most 200 characters" in message


@pytest.mark.parametrize(("rule", "bound"), [
    ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=20;BYMINUTE=0;BYMONTH=" + ",".join(["1,2,3,4,5,6,7,8,9,10,11,12"] * 8),
     "at most 200 characters"),
    (EVERY_MINUTE.replace("BYHOUR=" + ",".join(str(h) for h in range(24)), "BYHOUR=8"), "at least 60 minutes apart"),
    ("FREQ=DAILY;BYHOUR=8;BYMINUTE=0,30", "at least 60 minutes apart"),
    ("FREQ=DAILY;BYHOUR=8;BYMINUTE=0;BYSECOND=0,1", "at least 60 minutes apart"),
    ("FREQ=DAILY;BYHOUR=" + ",".join(str(h) for h in range(24)) + ";BYMINUTE=0,30", "at most 24 times a day"),
    ("FREQ=DAILY;BYHOUR=0,4,8,12,16,20;BYMINUTE=0", "At most 3000 edges"),
    ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR,SA,SU;BYHOUR=1,5,9,13,17,21", "At most 3000 edges"),
], ids=["length", "every-minute-of-an-hour", "half-hourly", "seconds", "times-a-day", "edges-daily", "edges-weekly"])
@pytest.mark.django_db
def test_each_bound_is_a_400_naming_rrule_that_states_it(world: World, rule: str, bound: str) -> None:
    assert bound in refused_on_rrule(world, rule)
    assert bound in refused_on_rrule(world, rule, persona="platform")  # platform admins are bound too


@pytest.mark.django_db
def test_a_rule_within_the_bounds_is_accepted(world: World) -> None:
    for rule in ("FREQ=DAILY;BYHOUR=0,6,12,18;BYMINUTE=0", "FREQ=DAILY;BYHOUR=20;BYMINUTE=0",
                 "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8,18;BYMINUTE=0"):
        response = world.client("nlp_admin").post("/api/v1/quota-windows/", recurring(world, rule), format="json")
        assert response.status_code == 201, (rule, response.content)


@pytest.mark.django_db
def test_the_bounds_follow_the_settings_and_are_checked_across_days(world: World, settings: Any) -> None:
    settings.GPUPORTAL_WINDOW_RRULE_MAX_LENGTH = 30
    assert "at most 30 characters" in refused_on_rrule(world, "FREQ=DAILY;BYHOUR=20;BYMINUTE=0")
    settings.GPUPORTAL_WINDOW_RRULE_MAX_LENGTH = 200
    settings.GPUPORTAL_WINDOW_RRULE_MAX_EDGES = 100
    assert "At most 100 edges" in refused_on_rrule(world, "FREQ=DAILY;BYHOUR=20;BYMINUTE=0")
    settings.GPUPORTAL_WINDOW_RRULE_MAX_EDGES = 3000
    settings.GPUPORTAL_WINDOW_RRULE_MIN_INTERVAL_MINUTES = 90
    # 23:00 and 00:00 next day are an hour apart: only walking the rule finds it.
    message = refused_on_rrule(world, "FREQ=DAILY;BYHOUR=0,23;BYMINUTE=0")
    assert "at least 90 minutes apart; two start at" in message


@pytest.mark.django_db
def test_the_portal_form_shows_the_bound_next_to_the_rule(world: World) -> None:
    client = Client()
    client.force_login(User.objects.get(username="nlp_admin"))
    begins = timezone.now() + datetime.timedelta(hours=1)
    response = client.post(f"/calendar/{world.nlp.pk}/windows/", {
        "quota": total(world).pk, "kind": "recurring", "begins_at": f"{begins:%Y-%m-%dT%H:%M}", "rrule": "FREQ=DAILY;BYHOUR=8;BYMINUTE=0,30",
        "timezone": "UTC", "duration_minutes": "60", "limit_delta": "2", "shrink_policy": "wait", "justification": "x",
    })
    assert response.status_code == 400
    assert "at least 60 minutes apart" in response.content.decode()
    assert not QuotaWindow.objects.exists()


class Counted(walking._Walk):
    """A walk that tells the test the starts it took up and passed over."""

    made: list[Counted] = []

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        Counted.made.append(self)


def walked(client: Any, path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int, int]:
    """The response, the evaluations of rules it made and the starts they walked, in units of a
    start taken up (one passed over costs an eighth: ``walking.PASSED_PER_TAKEN``). Counting the
    work, not timing it: a loaded test machine slows a request, never the count."""
    Counted.made = []
    monkeypatch.setattr(windows, "_Walk", Counted)
    response = client.get(path)
    monkeypatch.undo()
    cost = sum(walk.taken + walk.passed // walking.PASSED_PER_TAKEN for walk in Counted.made)
    return response, len(Counted.made), cost


def store(world: World, rule: str, *, state: str = WindowState.APPROVED, minutes: int = 60) -> QuotaWindow:
    """A window saved as if from before the bounds: no check at all."""
    return QuotaWindow.objects.create(
        quota=total(world), kind="recurring", state=state, begins_at=timezone.now() - datetime.timedelta(days=30),
        rrule=rule, timezone="Europe/Berlin", duration_minutes=minutes, limit_delta=Decimal(2),
        requested_by=world.users["nlp_admin"], decided_by=world.users["platform"] if state == WindowState.APPROVED else None,
    )


def portal(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


@pytest.mark.django_db
def test_a_stored_hostile_rule_stays_readable_and_every_list_and_calendar_walks_its_budget_at_most(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = [store(world, EVERY_SECOND), store(world, EVERY_MINUTE, minutes=366 * 24 * 60),
              store(world, EVERY_SECOND, state=WindowState.PENDING)]
    api = world.client("nlp_member")
    response, evaluations, cost = walked(api, f"/api/v1/quota-windows/?department={world.nlp.pk}", monkeypatch)
    assert response.status_code == 200 and evaluations <= EVALUATIONS_PER_WINDOW * len(stored)
    assert cost <= HOSTILE_WORK, cost
    rows = {row["id"]: row for row in response.json()["results"]}
    assert {rows[w.pk]["rrule"] for w in stored} == {EVERY_SECOND, EVERY_MINUTE}  # nothing stored is lost
    assert rows[stored[0].pk]["in_force_now"] is True and rows[stored[1].pk]["in_force_now"] is True
    quota = total(world).pk
    for path in (f"/api/v1/quota-windows/{stored[0].pk}/", f"/api/v1/quotas/{quota}/effective/",
                 f"/api/v1/quotas/{quota}/timeline/", "/api/v1/quota-windows/shrinks/?within=10080",
                 f"/calendar/{world.nlp.pk}/"):
        client = portal(world, "nlp_member") if path.startswith("/calendar/") else api
        response, evaluations, cost = walked(client, path, monkeypatch)
        assert response.status_code == 200, path
        assert evaluations <= EVALUATIONS_PER_WINDOW * len(stored) and cost <= HOSTILE_WORK, (path, evaluations, cost)


def test_an_evaluation_never_walks_more_than_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)
    spec = windows.WindowSpec(id=1, kind="recurring", begins_at=now - datetime.timedelta(days=300), rrule=EVERY_SECOND,
                              timezone="Europe/Berlin", duration=datetime.timedelta(minutes=1), limit_delta=Decimal(1))
    Counted.made = []
    monkeypatch.setattr(windows, "_Walk", Counted)
    assert windows.in_force(spec, now, budget=windows.PAGE_BUDGET)
    steps = windows.timeline(guaranteed=Decimal(0), limit=Decimal(4), windows=[spec],
                             span=(now, now + datetime.timedelta(days=7)), budget=windows.PAGE_BUDGET)
    assert windows.next_edges(spec, now, count=3, within=datetime.timedelta(days=1830)) == []
    assert len(Counted.made) == 3
    assert all(walk.taken <= walk.budget + 1 and walk.passed <= walk.budget * walking.PASSED_PER_TAKEN + 1
               for walk in Counted.made), [(walk.taken, walk.passed) for walk in Counted.made]
    # A rule that dense, a minute or more long, is in force throughout: the budget's answer is its own.
    assert [(step.start, step.end, step.effective.limit) for step in steps] == [
        (now, now + datetime.timedelta(days=7), Decimal(5))]


# ------------------------------------------------------------------------------------ property

HOURS = st.lists(st.integers(0, 23), min_size=1, max_size=24, unique=True)


@st.composite
def rules(draw: st.DrawFn) -> str:
    """Rules of every shape the service reads, dense ones often (the bounds decide)."""
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]))
    parts = [f"FREQ={freq}"]
    if draw(st.booleans()):
        parts.append(f"INTERVAL={draw(st.integers(1, 3))}")
    parts.append("BYHOUR=" + ",".join(str(h) for h in sorted(draw(HOURS))))
    parts.append("BYMINUTE=" + ",".join(str(m) for m in sorted(draw(st.sets(st.sampled_from([0, 15, 30, 45]),
                                                                            min_size=1, max_size=2)))))
    if freq != "DAILY" and draw(st.booleans()):
        parts.append("BYDAY=" + ",".join(sorted(draw(st.sets(st.sampled_from(["MO", "TU", "WE", "TH", "FR", "SA", "SU"]),
                                                             min_size=1)))))
    if freq == "YEARLY" and draw(st.booleans()):
        parts.append("BYMONTH=" + ",".join(str(m) for m in sorted(draw(st.sets(st.integers(1, 12), min_size=1, max_size=3)))))
    return ";".join(parts)


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rule=rules(), minutes=st.sampled_from([1, 60, 12 * 60, 7 * 24 * 60, 366 * 24 * 60]),
       zone=st.sampled_from(["UTC", "Europe/Berlin", "Asia/Shanghai"]))
def test_no_accepted_rule_makes_a_list_or_calendar_request_walk_more_than_its_pages_worth(
    world: World, rule: str, minutes: int, zone: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    begins = timezone.now() - datetime.timedelta(days=20)
    try:
        window_services.rrule_check(rule, zone=zone, begins_at=begins.replace(second=0, microsecond=0))
    except FieldError as error:
        assert list(error.fields) == ["rrule"]
        return
    QuotaWindow.objects.all().delete()
    api, page = world.client("nlp_member"), portal(world, "nlp_member")
    for state in (WindowState.APPROVED, WindowState.PENDING):
        QuotaWindow.objects.create(
            quota=total(world), kind="recurring", state=state, begins_at=begins.replace(second=0, microsecond=0),
            rrule=rule, timezone=zone, duration_minutes=minutes, limit_delta=Decimal(-1),
            requested_by=world.users["nlp_admin"],
        )
    for client, path in ((api, f"/api/v1/quota-windows/?department={world.nlp.pk}"), (page, f"/calendar/{world.nlp.pk}/")):
        response, evaluations, cost = walked(client, path, monkeypatch)
        assert response.status_code == 200
        assert evaluations <= EVALUATIONS_PER_WINDOW * 2, (rule, minutes, zone, path, evaluations)
        assert cost <= 2 * django_settings.GPUPORTAL_WINDOW_RRULE_MAX_EDGES, (rule, minutes, zone, path, cost)


@settings(max_examples=25, deadline=None)
@given(hours=HOURS, minutes=st.sets(st.integers(0, 59), min_size=5), seconds=st.sets(st.integers(0, 59), min_size=1, max_size=3),
       extra=st.sampled_from(["", ";BYDAY=MO,WE", ";INTERVAL=2", ";UNTIL=20260320T101500", ";BYMONTH=3,4"]),
       zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]), length=st.sampled_from([1, 7, 60, 300]),
       offset=st.integers(-30, 24 * 30), hours_long=st.integers(1, 72), ends=st.none() | st.integers(5 * 1440, 40 * 1440))
def test_a_dense_rule_walked_day_by_day_gives_the_occurrences_walked_start_by_start(
    hours: list[int], minutes: set[int], seconds: set[int], extra: str, zone: str, length: int, offset: int,
    hours_long: int, ends: int | None,
) -> None:
    from allocations.quotas import walking
    rule = (f"FREQ=DAILY;BYHOUR={','.join(map(str, sorted(hours)))};BYMINUTE={','.join(map(str, sorted(minutes)))};"
            f"BYSECOND={','.join(map(str, sorted(seconds)))}{extra}")
    begins = datetime.datetime(2026, 3, 1, 7, 23, tzinfo=datetime.UTC)
    spec = windows.WindowSpec(id=1, kind="recurring", begins_at=begins, rrule=rule, timezone=zone,
                              ends_at=begins + datetime.timedelta(minutes=ends) if ends else None,
                              duration=datetime.timedelta(minutes=length), limit_delta=Decimal(1))
    start = begins + datetime.timedelta(hours=offset)
    end = start + datetime.timedelta(hours=hours_long)

    def inside(found: list[tuple[datetime.datetime, datetime.datetime]]) -> list[tuple[datetime.datetime, datetime.datetime]]:
        return [(max(b, start), min(f, end)) for b, f in found]

    dense = inside(windows.occurrences(spec, start, end, budget=10**9))
    keep = walking.DENSE
    walking.DENSE = 10**9
    walking._dense_day.cache_clear()
    try:
        plain = inside(windows.occurrences(spec, start, end, budget=10**9))
    finally:
        walking.DENSE = keep
        walking._dense_day.cache_clear()
    assert dense == plain
