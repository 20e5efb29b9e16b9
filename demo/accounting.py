"""The demo's rate cards and accounting: prices for the three sharing modes (whole GPUs and MIG
slices billed on what was granted, HAMi's vGPUs on what was used), the week's GPU-equivalent-hours
rolled, and last month's statements closed when the week reaches back into it."""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.contrib.auth.models import User

from accounting.models import Basis, RateCard
from accounting.rate_cards import rate_card_create
from accounting.rolling import usage_hours_roll
from accounting.statements import statements_close_due
from allocations.models import Flavor
from kernel.clock import clock_now

VALID_FROM = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
# flavor: (EUR per GPU-equivalent-hour, basis)
PRICES: dict[str, tuple[str, str]] = {
    "a100-80gb": ("2.50", Basis.GRANTED), "h100-80gb": ("3.50", Basis.GRANTED),
    "a100-mig-1g-10gb": ("2.50", Basis.GRANTED), "a100-mig-3g-40gb": ("2.50", Basis.GRANTED),
    "h100-mps-4": ("3.50", Basis.GRANTED), "h100-timeslice-2": ("3.50", Basis.GRANTED),
    "h100-vgpu-10gb": ("4.00", Basis.USED),
}  # fmt: skip


def demo_accounting_seed(*, now: datetime.datetime | None = None) -> None:
    now = now or clock_now()
    admin = User.objects.get(username="admin")
    for flavor in Flavor.objects.filter(name__in=PRICES).exclude(pk__in=RateCard.objects.values("flavor_id")):
        price, basis = PRICES[flavor.name]
        rate_card_create(actor=admin, flavor_id=flavor.pk, price_per_gpu_hour=Decimal(price), currency="EUR",
                         valid_from=VALID_FROM, basis=basis, description="demo price")  # fmt: skip
    usage_hours_roll(start=now - datetime.timedelta(days=8), end=now, now=now)
    statements_close_due(now=now)
