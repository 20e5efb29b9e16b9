"""Pure arithmetic of a statement (no Django): the hours of one department and month priced by
the rate cards in force, as lines, their total and their SHA-256.

An hour is priced by the flavor's rate card whose validity holds the hour's start; it bills the
hour's granted or used GPU-equivalent-hours as the card says. Hours of one project and flavor
under one card make one line: hours summed exactly, the amount rounded once, half up, to cents.
Hours no card prices make an ``unpriced`` line (rate and amount 0) in the statement of currency
``XXX`` (ISO 4217's "no currency"), so that they are seen, not lost. The hash is over the
statement's canonical JSON (sorted keys, no spaces, decimals as strings): computed again from the
same hours and cards it is the same.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENTS = Decimal("0.01")
NO_CURRENCY = "XXX"


@dataclass(frozen=True)
class Hour:
    hour: datetime.datetime
    project: str  # the project's slug
    flavor: str  # the flavor's name
    granted: Decimal
    used: Decimal


@dataclass(frozen=True)
class Card:
    id: int
    flavor: str
    price: Decimal
    currency: str
    basis: str  # "granted" or "used"
    valid_from: datetime.datetime
    valid_to: datetime.datetime | None

    def holds(self, moment: datetime.datetime) -> bool:
        return self.valid_from <= moment and (self.valid_to is None or moment < self.valid_to)


@dataclass(frozen=True)
class Line:
    number: int
    kind: str  # "charge" or "unpriced"
    project: str
    flavor: str
    rate_card: int | None
    basis: str
    gpu_hours: Decimal
    rate: Decimal
    amount: Decimal

    def canonical(self) -> dict[str, object]:
        return {
            "number": self.number, "kind": self.kind, "project": self.project, "flavor": self.flavor,
            "rate_card": self.rate_card, "basis": self.basis, "gpu_hours": str(self.gpu_hours), "rate": str(self.rate),
            "amount": str(self.amount),
        }  # fmt: skip


@dataclass(frozen=True)
class Charges:
    currency: str
    lines: tuple[Line, ...]

    @property
    def total(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))


Sums = Mapping[tuple[str, str, "Card | None"], tuple[Decimal, Decimal]]
"""(project, flavor, card or None for unpriced) -> (granted, used) GPU-equivalent-hours."""


def hour_sums(
    hours: Iterable[Hour], cards: Sequence[Card]
) -> dict[tuple[str, str, Card | None], tuple[Decimal, Decimal]]:
    """Each hour under the flavor's card in force at its start (or none), summed per project,
    flavor and card."""
    by_flavor: dict[str, list[Card]] = defaultdict(list)
    for each in cards:
        by_flavor[each.flavor].append(each)
    sums: dict[tuple[str, str, Card | None], tuple[Decimal, Decimal]] = {}
    for hour in hours:
        pricing = next((card for card in by_flavor.get(hour.flavor, ()) if card.holds(hour.hour)), None)
        granted, used = sums.get((hour.project, hour.flavor, pricing), (Decimal(0), Decimal(0)))
        sums[(hour.project, hour.flavor, pricing)] = (granted + hour.granted, used + hour.used)
    return sums


def charges(hours: Iterable[Hour], cards: Sequence[Card]) -> dict[str, Charges]:
    """The department's lines per currency (module docstring), from its hours one by one."""
    return charges_from_sums(hour_sums(hours, cards))


def charges_from_sums(sums: Sums) -> dict[str, Charges]:
    """The lines per currency from hours already summed per project, flavor and card (what
    ``hour_sums`` gives, or the database's sums of the same)."""
    billed: dict[tuple[str, str, str, Card | None], Decimal] = {}
    for (project, flavor, card), (granted, used) in sums.items():
        currency = card.currency if card is not None else NO_CURRENCY
        billed[(currency, project, flavor, card)] = used if card is not None and card.basis == "used" else granted
    found: dict[str, list[Line]] = defaultdict(list)
    ordered = sorted(billed.items(), key=lambda item: (item[0][0], item[0][1], item[0][2], _card_key(item[0][3])))
    for (currency, project, flavor, priced_by), gpu_hours in ordered:
        lines = found[currency]
        number = len(lines) + 1
        if priced_by is None:
            lines.append(
                Line(
                    number, "unpriced", project, flavor, None, "granted", gpu_hours, Decimal("0.0000"), Decimal("0.00")
                )
            )
            continue
        amount = (gpu_hours * priced_by.price).quantize(CENTS, rounding=ROUND_HALF_UP)
        lines.append(
            Line(number, "charge", project, flavor, priced_by.id, priced_by.basis, gpu_hours, priced_by.price, amount)
        )
    return {currency: Charges(currency=currency, lines=tuple(lines)) for currency, lines in found.items()}


def statement_sha256(*, department: str, period_start: datetime.datetime, currency: str, lines: Sequence[Line]) -> str:
    document = {
        "department": department, "period_start": period_start.astimezone(datetime.UTC).isoformat(),
        "currency": currency, "total": str(sum((line.amount for line in lines), Decimal("0.00"))),
        "lines": [line.canonical() for line in lines],
    }  # fmt: skip
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def month_bounds(period: str) -> tuple[datetime.datetime, datetime.datetime]:
    """``YYYY-MM`` as the month's [first instant, next month's first instant) in UTC."""
    try:
        year, month = (int(part) for part in period.split("-"))
        start = datetime.datetime(year, month, 1, tzinfo=datetime.UTC)
    except ValueError:
        raise ValueError(f"{period!r} is not a month (YYYY-MM)") from None
    if len(period) != 7:
        raise ValueError(f"{period!r} is not a month (YYYY-MM)")
    end = datetime.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=datetime.UTC)
    return start, end


def _card_key(card: Card | None) -> tuple[int, datetime.datetime]:
    if card is None:
        return (0, datetime.datetime.min.replace(tzinfo=datetime.UTC))
    return (1, card.valid_from)
