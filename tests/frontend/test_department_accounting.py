"""The department usage page's accounting: the last 30 days' GPU-hours of the admin's departments
(measured and used apart from granted) and their closed statements, whose CSV the session reads."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

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
