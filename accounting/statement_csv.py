"""A statement's lines as CSV, for people's spreadsheets (docs/accounting.md, "Statements").

The CSV is a reading of the stored statement, not the sealed record: the statement's SHA-256 (sent
in ``X-Statement-SHA256``) is over its canonical JSON (``accounting/charges.py``), with the hours
to 6 places, so how the CSV writes them changes no hash. Each rate card is named by its validity
(and its description), with its id in a column of its own; hours are written to ``HOURS_PLACES``
places (the amounts were computed from the exact hours); a ``total`` row closes the lines (the
statement's total) and, when corrections follow, a ``balance`` row."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from accounting.models import LineKind, RateCard, Statement, StatementLine
from accounting.rate_cards import rate_card_validity_words
from audit.export import csv_cell

HOURS_PLACES = 4
_HOURS = Decimal(1).scaleb(-HOURS_PLACES)
COLUMNS = ["number", "kind", "project", "flavor", "rate_card", "rate_card_id", "basis", "gpu_hours", "rate", "amount",
           "reason"]  # fmt: skip


def hours_text(hours: Decimal) -> str:
    """``12.3457``: GPU-equivalent-hours to ``HOURS_PLACES`` places, half up."""
    return str(hours.quantize(_HOURS, rounding=ROUND_HALF_UP))


def rate_card_label(card: RateCard | None) -> str:
    """``from 2026-10-01 00:00 to 2026-10-25 00:00 UTC (autumn price)``; empty without a card."""
    if card is None:
        return ""
    validity = rate_card_validity_words(card.valid_from, card.valid_to)
    return f"{validity} ({card.description})" if card.description else validity


def _line_row(line: StatementLine) -> list[object]:
    text = [csv_cell(value) for value in (line.kind, line.project.slug, line.flavor.name, rate_card_label(line.rate_card),
                                          line.basis, line.reason)]  # fmt: skip
    kind, project, flavor, card, basis, reason = text  # free text defused; numbers written as numbers
    return [line.number, kind, project, flavor, card, line.rate_card_id or "", basis, hours_text(line.gpu_hours),
            line.rate, line.amount, reason]  # fmt: skip


def _sum_row(kind: str, lines: Iterable[StatementLine]) -> list[object]:
    """The hours summed exactly, then written as a line's are, and the amounts summed."""
    hours, amount = Decimal(0), Decimal("0.00")
    for line in lines:
        hours, amount = hours + line.gpu_hours, amount + line.amount
    return ["", kind, "", "", "", "", "", hours_text(hours), "", amount, ""]


def statement_csv(statement: Statement) -> str:
    """The header, one row per line in order, ``total`` (the charge and unpriced lines: the
    statement's total) and, after corrections, ``balance`` (every line)."""
    lines = list(statement.lines.all())  # prefetched in order, with their projects, flavors and cards
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    writer.writerows(_line_row(line) for line in lines)
    writer.writerow(_sum_row("total", (line for line in lines if line.kind != LineKind.CORRECTION)))
    if any(line.kind == LineKind.CORRECTION for line in lines):
        writer.writerow(_sum_row("balance", lines))
    return out.getvalue()
