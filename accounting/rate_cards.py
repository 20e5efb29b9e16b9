"""Rate cards: the price of a flavor's GPU-equivalent-hour over a validity (platform admins;
audited). A flavor's validities never overlap, so every hour has at most one price."""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Q

from accounting.models import Basis, RateCard
from allocations.models import Flavor
from audit import actions
from audit.services import audit_record
from kernel.errors import Conflict, FieldError
from kernel.times import minute_utc, span_utc
from tenants.access import require_platform_admin

User = AbstractBaseUser | AnonymousUser
_CURRENCY = re.compile(r"[A-Z]{3}")


def rate_card_validity_words(valid_from: datetime.datetime, valid_to: datetime.datetime | None) -> str:
    """``from 2026-01-01 00:00 UTC`` (open-ended) or ``from 2026-01-01 00:00 to 2026-02-01 00:00 UTC``."""
    return f"from {span_utc(valid_from, valid_to)}" if valid_to is not None else f"from {minute_utc(valid_from)}"


def _state(card: RateCard) -> dict[str, object]:
    return {
        "flavor": card.flavor_id, "price_per_gpu_hour": str(card.price_per_gpu_hour), "currency": card.currency,
        "basis": card.basis, "valid_from": card.valid_from.isoformat(),
        "valid_to": card.valid_to.isoformat() if card.valid_to else None,
    }  # fmt: skip


def _refuse_overlap(*, flavor: Flavor, valid_from: datetime.datetime, valid_to: datetime.datetime | None,
                    excluding: int | None = None) -> None:  # fmt: skip
    overlapping = RateCard.objects.filter(flavor=flavor).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=valid_from))
    if valid_to is not None:
        overlapping = overlapping.filter(valid_from__lt=valid_to)
    if excluding is not None:
        overlapping = overlapping.exclude(pk=excluding)
    clash = overlapping.order_by("valid_from").first()
    if clash is not None:
        raise Conflict(
            f"Flavor {flavor.name} already has rate card #{clash.pk} "
            f"{rate_card_validity_words(clash.valid_from, clash.valid_to)}: end it first.",
            fields={"valid_from": [f"overlaps rate card #{clash.pk}"]},
        )


def rate_card_create(
    *, actor: User, flavor_id: int, price_per_gpu_hour: Decimal, currency: str, valid_from: datetime.datetime,
    valid_to: datetime.datetime | None = None, basis: str = Basis.GRANTED, description: str = "",
) -> RateCard:  # fmt: skip
    require_platform_admin(actor, to="set prices")
    if not _CURRENCY.fullmatch(currency):
        raise FieldError("currency", "An ISO 4217 code: three upper-case letters, e.g. EUR.")
    if price_per_gpu_hour < 0:
        raise FieldError("price_per_gpu_hour", "A price cannot be negative.")
    if basis not in Basis.values:
        raise FieldError("basis", f"One of {', '.join(Basis.values)}.")
    if valid_to is not None and valid_to <= valid_from:
        raise FieldError("valid_to", "Must be after valid_from.")
    with transaction.atomic():
        flavor = Flavor.objects.select_for_update().filter(pk=flavor_id).first()  # one card at a time per flavor
        if flavor is None:
            raise FieldError("flavor", f"No flavor {flavor_id}.")
        _refuse_overlap(flavor=flavor, valid_from=valid_from, valid_to=valid_to)
        card = RateCard.objects.create(
            flavor=flavor, price_per_gpu_hour=price_per_gpu_hour, currency=currency, basis=basis, valid_from=valid_from,
            valid_to=valid_to, description=description,
        )  # fmt: skip
        audit_record(actor=actor, action=actions.RATE_CARD_CREATED, target=card, after=_state(card))
    return card


def rate_card_end(*, actor: User, rate_card_id: int, valid_to: datetime.datetime) -> RateCard:
    """End a card's validity at ``valid_to`` (earlier than it ends now, after it begins)."""
    require_platform_admin(actor, to="end rate cards")
    with transaction.atomic():
        card = RateCard.objects.select_for_update().filter(pk=rate_card_id).first()
        if card is None:
            raise FieldError("rate_card", f"No rate card {rate_card_id}.")
        if valid_to <= card.valid_from:
            raise FieldError("valid_to", "Must be after the card's valid_from.")
        if card.valid_to is not None and valid_to >= card.valid_to:
            raise FieldError("valid_to", f"The card already ends at {minute_utc(card.valid_to)}.")
        before = _state(card)
        card.valid_to = valid_to
        card.save(update_fields=["valid_to"])
        audit_record(actor=actor, action=actions.RATE_CARD_ENDED, target=card, before=before, after=_state(card))
    return card
