"""The department usage page's accounting: the last 30 days' GPU-hours of the admin's departments
(measured and used apart from granted, in numbers and as a chart by day), the grants that sat idle
longest, and their closed statements, whose CSV the session reads."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from accounting.idle_models import IdleCase, IdlePolicy, IdleState
from accounting.models import Statement
from accounting.rate_cards import rate_card_create
from accounting.rolling import usage_hours_roll
from accounting.statements import month_of, statements_close
from tests.conftest import World
from tests.frontend.conftest import Login
from tests.telemetry.usage_history import HOUR, aligned_now, fill, grant

pytestmark = pytest.mark.django_db


def test_an_admin_sees_their_departments_gpu_hours_and_statements_and_downloads_the_csv(world: World, login: Login) -> None:
    now = aligned_now()
    last_month_end = now.replace(day=1)
    since = last_month_end - 30 * HOUR
    nlp = grant(world, since=since, quantity=2)
    fill(nlp, start=since, end=since + 10 * HOUR, activity=0.5)
    grant(world, since=since, project="seg", flavor="h100")
    rate_card_create(actor=world.users["platform"], flavor_id=world.a100.pk, price_per_gpu_hour=Decimal("2"),
                     currency="EUR", valid_from=since - datetime.timedelta(days=40))  # fmt: skip
    usage_hours_roll(start=since, end=now, now=now)
    statements_close(period=month_of(since), now=now)
    statement = Statement.objects.get(department=world.nlp, currency="EUR")

    html = login("nlp_admin").get("/usage/").content.decode()

    assert 'id="gpu-hours"' in html and '<th scope="row">nlp</th>' in html
    assert '<th scope="row">vision</th>' not in html  # another department's hours
    assert statement.sha256[:12] in html and f"/api/v1/statements/{statement.pk}/lines.csv" in html
    csv = login("nlp_admin").get(f"/api/v1/statements/{statement.pk}/lines.csv")
    assert csv.status_code == 200 and csv["X-Statement-SHA256"] == statement.sha256
    assert statement.sha256[:12] not in login("vision_admin").get("/usage/").content.decode()


def test_the_page_charts_each_day_and_ranks_the_grants_that_sat_idle_longest(world: World, login: Login) -> None:
    now = aligned_now()
    since = now - 20 * HOUR
    lazy = grant(world, since=since, quantity=2)
    busy = grant(world, since=since)
    hidden = grant(world, since=since, project="seg", flavor="h100")
    fill(lazy, start=since, end=now, activity=0.02)
    fill(busy, start=since, end=now, activity=0.9)
    fill(hidden, start=since, end=now, activity=0.0)
    usage_hours_roll(start=since, end=now, now=now)
    case = IdleCase.objects.create(
        allocation=lazy, policy=IdlePolicy.objects.create(name="page"), state=IdleState.WARNED, opened_at=now,
        idle_since=since, idle_minutes=600, last_evaluated_at=now, warned_at=now, action_due_at=now + HOUR,
    )  # fmt: skip

    html = login("nlp_admin").get("/usage/").content.decode()

    assert 'id="usage-nlp"' in html and "granted and busy per day, nlp" in html
    rows = html.split('id="idle-grants"')[1].split("</table>")[0]
    assert rows.index(f"#{lazy.pk}<") < rows.index(f"#{busy.pk}<")  # 39.2 idle hours before 2
    assert f"#{hidden.pk}<" not in rows  # vision's grant is not nlp's admin's to see
    assert f"#case-{case.pk}" in rows and "Warned" in rows
