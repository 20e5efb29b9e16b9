"""Quota windows: a quota's guarantee and/or limit changed for a period (docs/quotas.md, "Quota
windows"). Imported by ``allocations.models`` so that Django registers them with the app."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from kernel.limits import TEXT_LIMIT
from kernel.times import minute_utc


class WindowKind(models.TextChoices):
    TEMPORARY = "temporary", "Temporary (from begins_at to ends_at)"
    RECURRING = "recurring", "Recurring (an RFC 5545 RRULE in a time zone, each occurrence lasting duration)"


class WindowState(models.TextChoices):
    PENDING = "pending", "Pending approval"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


class ShrinkPolicy(models.TextChoices):
    WAIT = "wait", "Wait: no new admission above the new value; holding grants run to their end"
    RECLAIM = "reclaim", "Reclaim: grants above the new value are reclaimed, with their notice"


class QuotaWindow(models.Model):
    """A change of ``quota``'s guarantee and/or limit while the window is in force: by a delta or
    to an absolute value, field by field. With ``priority_class`` it limits that class's share of
    the department's quota instead (a day/night split between training and evaluation classes)."""

    quota = models.ForeignKey("allocations.Quota", on_delete=models.CASCADE, related_name="windows")
    priority_class = models.ForeignKey(
        "allocations.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="quota_windows"
    )
    kind = models.CharField(max_length=16, choices=WindowKind.choices)
    state = models.CharField(max_length=16, choices=WindowState.choices, default=WindowState.PENDING)
    begins_at = models.DateTimeField(help_text="Temporary: when it starts. Recurring: the first occurrence's start (DTSTART).")
    ends_at = models.DateTimeField(
        null=True, blank=True, help_text="Temporary: when it ends. Recurring: no occurrence starts at or after it (optional)."
    )
    rrule = models.CharField(max_length=500, blank=True, help_text="Recurring: an RFC 5545 RRULE such as FREQ=DAILY.")
    timezone = models.CharField(max_length=64, blank=True, help_text="Recurring: the IANA time zone its occurrences follow.")
    duration_minutes = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(60 * 24 * 366)],
        help_text="Recurring: how long each occurrence lasts.",
    )
    guaranteed_delta = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    limit_delta = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    guaranteed = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(Decimal("0"))]
    )
    limit = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(Decimal("0"))]
    )
    shrink_policy = models.CharField(max_length=16, choices=ShrinkPolicy.choices, default=ShrinkPolicy.WAIT)
    justification = models.TextField(blank=True, max_length=TEXT_LIMIT)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="requested_quota_windows"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_quota_windows"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True, max_length=TEXT_LIMIT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "kind"])]
        constraints = [
            models.CheckConstraint(
                condition=~(models.Q(guaranteed_delta__isnull=False) & models.Q(guaranteed__isnull=False)),
                name="quota_window_guaranteed_delta_or_value",
            ),
            models.CheckConstraint(
                condition=~(models.Q(limit_delta__isnull=False) & models.Q(limit__isnull=False)),
                name="quota_window_limit_delta_or_value",
            ),
        ]

    def __str__(self) -> str:
        return f"window #{self.pk} of {self.quota_id} ({self.kind}, {self.state})"


class EdgeKind(models.TextChoices):
    BEGIN = "begin", "Begins"
    END = "end", "Ends"


class QuotaWindowEdge(models.Model):
    """One edge of a window that the tick applied: at most once (the unique constraint), with the
    effective values before and after. A shrink under ``reclaim`` whose grants were being changed
    (row-locked) at the edge is recorded with its reclaim pending, which later ticks take up until
    it is met (``allocations.windows.tick``)."""

    window = models.ForeignKey(QuotaWindow, on_delete=models.CASCADE, related_name="edges")
    at = models.DateTimeField(help_text="When the edge falls (the occurrence's start or end).")
    kind = models.CharField(max_length=8, choices=EdgeKind.choices)
    applied_at = models.DateTimeField(auto_now_add=True)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    reclaimed = models.JSONField(default=list, help_text="Grants the edge reclaimed (shrink policy reclaim).")
    reclaim_pending = models.BooleanField(
        default=False, help_text="Its reclaim is not met yet: grants in the way were being changed; later ticks try again."
    )

    class Meta:
        ordering = ["at", "pk"]
        constraints = [models.UniqueConstraint(fields=["window", "at", "kind"], name="quota_window_edge_once")]
        indexes = [models.Index(fields=["at"], condition=models.Q(reclaim_pending=True),
                                name="quota_window_edge_pending")]

    def __str__(self) -> str:
        return f"{self.kind} of window #{self.window_id} at {minute_utc(self.at)}"
