"""Each department's fair-share shares and decayed usage. Imported by ``allocations.models`` so
that Django registers it with the app."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

SHARES_MAX = 1_000_000


class FairShare(models.Model):
    """A department's weight among its siblings (``shares``) and its own projects' usage, decayed:
    GPU-equivalent-hours, each moment weighed by ``0.5^(age / half-life)``, as of ``as_of`` (the
    last tick; ``allocations.fair_share.services.fair_share_tick``). A department without a row has
    1 share and no usage; so has a row whose ``as_of`` is empty (its shares were set before any
    tick counted it)."""

    department = models.OneToOneField(
        "tenants.Department", primary_key=True, on_delete=models.CASCADE, related_name="fair_share"
    )
    shares = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(SHARES_MAX)])
    usage = models.FloatField(default=0.0, help_text="Decayed GPU-equivalent-hours of the department's own projects.")
    as_of = models.DateTimeField(null=True, blank=True, help_text="When usage was last decayed and added to.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(shares__gte=1, shares__lte=SHARES_MAX), name="fair_share_shares_range"
            ),
            models.CheckConstraint(condition=models.Q(usage__gte=0), name="fair_share_usage_not_negative"),
        ]

    def __str__(self) -> str:
        return f"fair share of department #{self.department_id}: {self.shares} shares, {self.usage:.3f} GPU-eq-h"
