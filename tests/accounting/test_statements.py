"""Statements: closed once a month's margin has passed, per department and currency, with lines
that add up, a SHA-256 that closing again does not change, an audit event; corrections are lines
of their own; rate cards never overlap; who reads what."""

from __future__ import annotations

import datetime
from decimal import ROUND_HALF_UP, Decimal

import pytest

from accounting.charges import NO_CURRENCY, charges, month_bounds, statement_sha256
from accounting.models import LineKind, RateCard, Statement, StatementLine, UsageHour
from accounting.rate_cards import rate_card_create, rate_card_end
from accounting.rolling import usage_hours_roll
from accounting.statements import (
    department_charges,
    department_hours,
    departments_charges,
    month_cards,
    month_of,
    statement_correct,
    statements_close,
    statements_close_due,
)
from audit.models import AuditEvent
from kernel.errors import Conflict, FieldError, NotAllowed
from tests.conftest import World
from tests.telemetry.usage_history import HOUR, fill, grant

pytestmark = pytest.mark.django_db
UTC = datetime.UTC
START, END = month_bounds("2026-10")
AFTER = END + datetime.timedelta(hours=12)


@pytest.fixture
def october(world: World) -> None:
    """nlp: 2 A100 from 20 October to the month's end (284 hours), half busy; vision: 1 H100 for its
    last 10 hours, unmeasured. A100 at 2.50 EUR per granted hour until the 25th, 3.00 after;
    H100 at 4.00 EUR per used hour."""
    since = datetime.datetime(2026, 10, 20, 4, tzinfo=UTC)
    nlp = grant(world, since=since, quantity=2, until=END)
    fill(nlp, start=since, end=END, activity=0.5)
    grant(world, since=END - 10 * HOUR, project="seg", flavor="h100", until=END)
    platform = world.users["platform"]
    middle = datetime.datetime(2026, 10, 25, tzinfo=UTC)
    rate_card_create(actor=platform, flavor_id=world.a100.pk, price_per_gpu_hour=Decimal("2.5"), currency="EUR",
                     valid_from=START, valid_to=middle)  # fmt: skip
    rate_card_create(actor=platform, flavor_id=world.a100.pk, price_per_gpu_hour=Decimal("3"), currency="EUR", valid_from=middle)
    rate_card_create(actor=platform, flavor_id=world.h100.pk, price_per_gpu_hour=Decimal("4"), currency="EUR",
                     valid_from=START, basis="used")  # fmt: skip


def test_closing_a_month_writes_each_departments_statement_with_lines_that_add_up(world: World, october: None) -> None:
    closed = statements_close(period="2026-10", now=AFTER)

    assert sorted(statement.department.slug for statement in closed) == ["nlp", "vision"]
    nlp = Statement.objects.get(department=world.nlp)
    lines = list(nlp.lines.order_by("number").values_list("kind", "rate_card__price_per_gpu_hour", "gpu_hours", "amount"))
    # 2 GPUs from the 20th 04:00 to the 25th (116 h), then to the month's end (7 days = 168 h).
    assert lines == [
        ("charge", Decimal("2.5000"), Decimal("232.000000"), Decimal("580.00")),
        ("charge", Decimal("3.0000"), Decimal("336.000000"), Decimal("1008.00")),
    ]
    assert nlp.total == Decimal("1588.00") == sum(amount for *_, amount in lines)
    vision = Statement.objects.get(department=world.vision)
    assert vision.total == Decimal("0.00")  # used basis, nothing measured: no busy hours to bill
    event = AuditEvent.objects.get(action="statement.closed", target_id=str(nlp.pk))
    assert event.after["sha256"] == nlp.sha256 and event.after["total"] == "1588.00" and event.department_id == world.nlp.pk


def test_closing_again_changes_nothing_and_the_hash_is_the_lines_hash(world: World, october: None) -> None:
    statements_close(period="2026-10", now=AFTER)
    first = {statement.pk: statement.sha256 for statement in Statement.objects.all()}

    assert statements_close(period="2026-10", now=AFTER + HOUR) == []
    assert {statement.pk: statement.sha256 for statement in Statement.objects.all()} == first
    assert AuditEvent.objects.filter(action="statement.closed").count() == 2
    nlp = Statement.objects.get(department=world.nlp)
    again = department_charges(department_id=world.nlp.pk, start=START, end=END)["EUR"]
    assert statement_sha256(department="nlp", period_start=START, currency="EUR", lines=again.lines) == nlp.sha256


def test_a_month_closes_by_itself_after_its_margin_and_not_before(world: World, october: None) -> None:
    assert statements_close_due(now=END + datetime.timedelta(hours=5)) == []
    assert len(statements_close_due(now=END + datetime.timedelta(hours=6))) == 2
    assert statements_close_due(now=END + datetime.timedelta(hours=7)) == []
    with pytest.raises(FieldError, match="not ended"):
        statements_close(period=month_of(AFTER), now=AFTER)


def test_a_correction_is_a_line_of_its_own_and_the_charges_stay(world: World, october: None) -> None:
    statements_close(period="2026-10", now=AFTER)
    nlp = Statement.objects.get(department=world.nlp)
    with pytest.raises(NotAllowed):
        statement_correct(actor=world.users["nlp_admin"], statement_id=nlp.pk, project_id=world.llm.pk,
                          flavor_id=world.a100.pk, gpu_hours=Decimal(0), amount=Decimal("-80"), reason="outage")  # fmt: skip
    with pytest.raises(FieldError, match="project"):
        statement_correct(actor=world.users["platform"], statement_id=nlp.pk, project_id=world.seg.pk,
                          flavor_id=world.a100.pk, gpu_hours=Decimal(0), amount=Decimal("-80"), reason="outage")  # fmt: skip
    line = statement_correct(actor=world.users["platform"], statement_id=nlp.pk, project_id=world.llm.pk,
                             flavor_id=world.a100.pk, gpu_hours=Decimal(-16), amount=Decimal("-40.00"),
                             reason="node outage on the 28th")  # fmt: skip

    assert (line.number, line.kind) == (3, LineKind.CORRECTION)
    nlp.refresh_from_db()
    assert nlp.total == Decimal("1588.00")
    charges = StatementLine.objects.filter(statement=nlp, kind=LineKind.CHARGE).order_by("number")
    assert [line.amount for line in charges] == [Decimal("580.00"), Decimal("1008.00")]
    assert AuditEvent.objects.get(action="statement.corrected").after["amount"] == "-40.00"


def test_rate_cards_of_a_flavor_never_overlap_and_are_for_platform_admins(world: World, october: None) -> None:
    platform = world.users["platform"]
    with pytest.raises(Conflict, match=r"already has rate card #\d+ from 2026-10-25 00:00 UTC: end it first"):
        rate_card_create(actor=platform, flavor_id=world.a100.pk, price_per_gpu_hour=Decimal(1), currency="EUR",
                         valid_from=datetime.datetime(2026, 12, 1, tzinfo=UTC))  # fmt: skip
    with pytest.raises(Conflict, match=r"#\d+ from 2026-10-01 00:00 to 2026-10-25 00:00 UTC: end it first"):
        rate_card_create(actor=platform, flavor_id=world.a100.pk, price_per_gpu_hour=Decimal(1), currency="EUR",
                         valid_from=datetime.datetime(2026, 9, 1, tzinfo=UTC), valid_to=datetime.datetime(2026, 10, 10, tzinfo=UTC))  # fmt: skip
    with pytest.raises(NotAllowed):
        rate_card_create(actor=world.users["nlp_admin"], flavor_id=world.mig.pk, price_per_gpu_hour=Decimal(1),
                         currency="EUR", valid_from=START)  # fmt: skip
    with pytest.raises(FieldError, match="ISO 4217"):
        rate_card_create(actor=platform, flavor_id=world.mig.pk, price_per_gpu_hour=Decimal(1), currency="eur", valid_from=START)
    open_ended = RateCard.objects.get(flavor=world.a100, valid_to__isnull=True)
    rate_card_end(actor=platform, rate_card_id=open_ended.pk, valid_to=datetime.datetime(2026, 12, 1, tzinfo=UTC))
    with pytest.raises(FieldError, match=r"^The card already ends at 2026-12-01 00:00 UTC\.$"):
        rate_card_end(actor=platform, rate_card_id=open_ended.pk, valid_to=datetime.datetime(2026, 12, 5, tzinfo=UTC))
    rate_card_create(actor=platform, flavor_id=world.a100.pk, price_per_gpu_hour=Decimal(1), currency="EUR",
                     valid_from=datetime.datetime(2026, 12, 1, tzinfo=UTC))  # fmt: skip
    assert AuditEvent.objects.filter(action="rate_card.created").count() == 4
    assert AuditEvent.objects.filter(action="rate_card.ended").count() == 1


def test_statements_are_read_by_the_departments_admins_and_auditors_and_downloaded_as_csv(
    world: World, october: None
) -> None:
    statements_close(period="2026-10", now=AFTER)
    nlp = Statement.objects.get(department=world.nlp)
    listed = {persona: [row["department_slug"] for row in world.client(persona).get("/api/v1/statements/").json()["results"]]
              for persona in ("nlp_member", "nlp_admin", "vision_admin", "auditor", "platform")}  # fmt: skip
    assert listed == {"nlp_member": [], "nlp_admin": ["nlp"], "vision_admin": ["vision"], "auditor": ["nlp", "vision"],
                      "platform": ["nlp", "vision"]}  # fmt: skip
    assert world.client("nlp_member").get(f"/api/v1/statements/{nlp.pk}/").status_code == 403
    assert world.client("vision_admin").get(f"/api/v1/statements/{nlp.pk}/").status_code == 404
    detail = world.client("nlp_admin").get(f"/api/v1/statements/{nlp.pk}/").json()
    assert detail["period"] == "2026-10" and detail["total"] == "1588.00" and len(detail["lines"]) == 2

    csv = world.client("auditor").get(f"/api/v1/statements/{nlp.pk}/lines.csv")
    assert csv.status_code == 200 and csv["X-Statement-SHA256"] == nlp.sha256
    rows = csv.content.decode().splitlines()
    assert rows[0] == "number,kind,project,flavor,rate_card,rate_card_id,basis,gpu_hours,rate,amount,reason"
    cards = RateCard.objects.filter(flavor=world.a100).order_by("valid_from")
    # each card named by its validity (its id in a column of its own), hours to 4 places, and a total row
    assert rows[1].startswith(f"1,charge,nlp-llm,a100,from 2026-10-01 00:00 to 2026-10-25 00:00 UTC,{cards[0].pk},granted,")
    assert rows[2].startswith(f"2,charge,nlp-llm,a100,from 2026-10-25 00:00 UTC,{cards[1].pk},granted,")
    assert [len(row.split(",")[7].split(".")[1]) for row in rows[1:]] == [4, 4, 4]
    hours = sum((line.gpu_hours for line in nlp.lines.all()), Decimal(0)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    assert rows[-1] == f",total,,,,,,{hours},,1588.00," and len(rows) == 4
    assert world.client("platform").get("/api/v1/statements/", {"period": "2026-13"}).status_code == 400

    draft = world.client("nlp_admin").get("/api/v1/statements/preview/", {"department": str(world.nlp.pk), "period": "2026-10"})
    assert draft.status_code == 200 and draft.json()["statements"][0]["total"] == "1588.00"
    assert UsageHour.objects.filter(department=world.nlp).exists()


def test_closing_rolls_the_days_the_roll_up_missed_and_the_late_tail(world: World, october: None) -> None:
    """A month the roll-up kept up with costs only its tail at close; a day it missed is rolled."""
    usage_hours_roll(start=START, end=END, now=AFTER)
    UsageHour.objects.filter(hour__gte=datetime.datetime(2026, 10, 22, tzinfo=UTC),
                             hour__lt=datetime.datetime(2026, 10, 23, tzinfo=UTC)).delete()  # fmt: skip
    statements_close(period="2026-10", now=AFTER)
    assert Statement.objects.get(department=world.nlp).total == Decimal("1588.00")
    assert UsageHour.objects.filter(department=world.nlp, hour__gte=START, hour__lt=END).count() == 284


def test_a_corrections_reason_cannot_run_as_a_formula_in_the_csv(world: World, october: None) -> None:
    statements_close(period="2026-10", now=AFTER)
    nlp = Statement.objects.get(department=world.nlp)
    statement_correct(actor=world.users["platform"], statement_id=nlp.pk, project_id=world.llm.pk, flavor_id=world.a100.pk,
                      gpu_hours=Decimal(0), amount=Decimal("-1.00"), reason='=HYPERLINK("http://x")')  # fmt: skip
    rows = world.client("platform").get(f"/api/v1/statements/{nlp.pk}/lines.csv").content.decode().splitlines()
    correction, total, balance = rows[-3:]
    assert correction.startswith("3,correction,nlp-llm,a100,,,granted,") and ",-1.00,\"'=HYPERLINK(" in correction
    assert total.startswith(",total,") and total.endswith(",1588.00,")
    assert balance.startswith(",balance,") and balance.endswith(",1587.00,")  # the total and the corrections


def test_the_sums_in_sql_are_the_hours_summed_one_by_one(world: World, october: None) -> None:
    """``department_charges`` sums in the database what ``charges.charges`` sums hour by hour: the
    same lines for a price change mid-month, the used basis and hours no card prices; summed for
    several departments at once, each gets the same."""
    since = datetime.datetime(2026, 10, 27, 7, tzinfo=UTC)
    mig = grant(world, since=since, flavor="mig", quantity=3, until=END - 2 * HOUR)  # no card prices MIG slices
    fill(mig, start=since, end=END - 2 * HOUR, activity=0.25)
    usage_hours_roll(start=START, end=END, now=AFTER)
    together = departments_charges(department_ids=[world.nlp.pk, world.vision.pk], start=START, end=END)
    for department in (world.nlp, world.vision):
        in_sql = department_charges(department_id=department.pk, start=START, end=END)
        one_by_one = charges(department_hours(department_id=department.pk, start=START, end=END),
                             month_cards(start=START, end=END))  # fmt: skip
        assert in_sql == one_by_one and in_sql
        assert together[department.pk] == in_sql  # the close reads every department in one query
    assert {line.kind for line in department_charges(department_id=world.nlp.pk, start=START, end=END)[NO_CURRENCY].lines} == {
        "unpriced"
    }
