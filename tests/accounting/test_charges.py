"""A statement's arithmetic (``accounting.charges``): the card in force prices each hour, the
lines add up to the total, amounts are rounded once, unpriced hours are shown, and the hash is the
same when computed again and different when anything changes."""

from __future__ import annotations

import dataclasses
import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.charges import NO_CURRENCY, Card, Hour, charges, month_bounds, statement_sha256

UTC = datetime.UTC
NOV = datetime.datetime(2026, 11, 1, tzinfo=UTC)
MID = datetime.datetime(2026, 11, 16, tzinfo=UTC)


def hour(at: datetime.datetime, *, project: str = "llm", flavor: str = "a100", granted: str = "2", used: str = "1") -> Hour:
    return Hour(at, project, flavor, Decimal(granted), Decimal(used))


def card(id: int, *, flavor: str = "a100", price: str = "2.5000", basis: str = "granted", since: datetime.datetime = NOV,
         until: datetime.datetime | None = None, currency: str = "EUR") -> Card:  # fmt: skip
    return Card(id, flavor, Decimal(price), currency, basis, since, until)


def test_a_price_change_mid_month_splits_the_hours_between_the_cards() -> None:
    hours = [hour(MID - datetime.timedelta(hours=1)), hour(MID), hour(MID + datetime.timedelta(hours=5))]
    cards = [card(1, until=MID), card(2, price="3.0000", since=MID)]
    (found,) = charges(hours, cards).values()
    assert [(line.rate_card, line.gpu_hours, line.amount) for line in found.lines] == [
        (1, Decimal(2), Decimal("5.00")), (2, Decimal(4), Decimal("12.00")),
    ]  # fmt: skip
    assert found.total == Decimal("17.00") and found.currency == "EUR"


def test_a_card_on_the_used_basis_bills_the_busy_hours_and_unpriced_hours_are_shown() -> None:
    hours = [hour(MID, used="0.333333"), hour(MID, flavor="h100"), hour(MID, project="seg")]
    found = charges(hours, [card(1, basis="used", price="1.0000")])
    eur, none = found["EUR"], found[NO_CURRENCY]
    assert [(line.project, line.gpu_hours, line.amount) for line in eur.lines] == [
        ("llm", Decimal("0.333333"), Decimal("0.33")), ("seg", Decimal(1), Decimal("1.00")),
    ]  # fmt: skip
    assert [(line.kind, line.flavor, line.gpu_hours, line.amount) for line in none.lines] == [
        ("unpriced", "h100", Decimal(2), Decimal("0.00"))
    ]


def test_amounts_round_half_up_once_per_line() -> None:
    hours = [hour(NOV + datetime.timedelta(hours=index), granted="0.001") for index in range(5)]  # 0.005 in all
    (found,) = charges(hours, [card(1, price="1.0000")]).values()
    assert found.lines[0].amount == Decimal("0.01")  # not 5 × round(0.001) = 0


_AMOUNTS = st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False, allow_infinity=False)


@given(
    rows=st.lists(st.tuples(st.integers(0, 719), st.sampled_from(["llm", "seg", "asr"]), st.sampled_from(["a100", "h100"]),
                            _AMOUNTS, _AMOUNTS), max_size=30),
    price=st.decimals(min_value=0, max_value=100, places=4, allow_nan=False, allow_infinity=False),
)  # fmt: skip
def test_the_lines_add_up_to_the_total_and_the_hash_is_stable(
    rows: list[tuple[int, str, str, Decimal, Decimal]], price: Decimal
) -> None:
    hours = [Hour(NOV + datetime.timedelta(hours=at), project, flavor, granted, used) for at, project, flavor, granted, used in rows]
    cards = [card(1, price=str(price), until=MID), card(2, flavor="h100", basis="used", since=NOV)]
    found = charges(hours, cards)
    billed = sum((line.gpu_hours for found_charges in found.values() for line in found_charges.lines), Decimal(0))
    assert billed == sum((h.used if h.flavor == "h100" else h.granted for h in hours), Decimal(0))
    for currency, found_charges in found.items():
        assert found_charges.total == sum((line.amount for line in found_charges.lines), Decimal(0))
        assert [line.number for line in found_charges.lines] == list(range(1, len(found_charges.lines) + 1))
        again = charges(list(reversed(hours)), list(reversed(cards)))[currency]
        first = statement_sha256(department="nlp", period_start=NOV, currency=currency, lines=found_charges.lines)
        assert statement_sha256(department="nlp", period_start=NOV, currency=currency, lines=again.lines) == first
        if found_charges.lines:
            changed = dataclasses.replace(found_charges.lines[0], amount=found_charges.lines[0].amount + Decimal("0.01"))
            lines = (changed, *found_charges.lines[1:])
            assert statement_sha256(department="nlp", period_start=NOV, currency=currency, lines=lines) != first


def test_a_period_is_a_calendar_month_in_utc() -> None:
    assert month_bounds("2026-12") == (datetime.datetime(2026, 12, 1, tzinfo=UTC), datetime.datetime(2027, 1, 1, tzinfo=UTC))
    for bad in ("2026-13", "2026-1", "november", "2026-11-01"):
        with pytest.raises(ValueError, match="not a month"):
            month_bounds(bad)
