"""Usage accounting: GPU-equivalent-hours per allocation and UTC hour (docs/accounting.md)."""

from __future__ import annotations

from django.db import models

from kernel.times import DAY, ISO_HOUR, MONTH


class UsageHour(models.Model):
    """What one allocation held and used over one UTC hour, in GPU-equivalent-hours.

    ``granted`` comes from the grant itself (its units' live reservations inside its period,
    weighted by the flavor's GPU-equivalents), so it is exact whether or not anything was measured.
    ``measured`` is the part of ``granted`` that had a known reading, ``used`` the busy part of
    that (from the 5-minute utilisation rows; unknown is never idle). ``coverage`` =
    measured / granted. Department, project, flavor and cluster are copied from the allocation so
    that roll-ups are sums without joins. Written only by ``accounting.rolling.usage_hours_roll``,
    which replaces an hour's rows whole when late data arrives within the margin.
    """

    id = models.BigAutoField(primary_key=True)
    allocation = models.ForeignKey("allocations.Allocation", on_delete=models.PROTECT, related_name="usage_hours")
    hour = models.DateTimeField(help_text="The UTC hour's start.")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="+")
    department = models.ForeignKey("tenants.Department", on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey("allocations.Flavor", on_delete=models.PROTECT, related_name="+")
    granted = models.DecimalField(max_digits=20, decimal_places=6, help_text="GPU-equivalent-hours held.")
    measured = models.DecimalField(max_digits=20, decimal_places=6, help_text="GPU-equivalent-hours held with a known reading.")
    used = models.DecimalField(max_digits=20, decimal_places=6, help_text="GPU-equivalent-hours busy (within the measured part).")
    rolled_at = models.DateTimeField()

    class Meta:
        ordering = ["hour", "allocation_id"]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "hour"], name="accounting_usage_hour_unique"),
            models.CheckConstraint(
                condition=models.Q(granted__gte=0, measured__gte=0, used__gte=0),
                name="accounting_usage_hour_not_negative",
            ),
        ]
        indexes = [
            models.Index(fields=["department", "hour"], name="accounting_hour_dept"),
            models.Index(fields=["project", "hour"], name="accounting_hour_project"),
            models.Index(fields=["cluster", "hour"], name="accounting_hour_cluster"),
            models.Index(fields=["hour"], name="accounting_hour_at"),
        ]

    def __str__(self) -> str:
        return f"#{self.allocation_id} {self.hour:{ISO_HOUR}}"


class UsageDay(models.Model):
    """The ``UsageHour`` rows of one UTC day summed per department, project, flavor and cluster:
    what the usage API reads for whole days (a month of a department is 31 rows per project and
    flavor instead of 744 per grant). Written only by ``accounting.rolling.usage_hours_roll``, in the
    same transaction as the hours it sums, so a day always equals the sum of its hours."""

    id = models.BigAutoField(primary_key=True)
    day = models.DateTimeField(help_text="The UTC day's start.")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="+")
    department = models.ForeignKey("tenants.Department", on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey("allocations.Flavor", on_delete=models.PROTECT, related_name="+")
    granted = models.DecimalField(max_digits=22, decimal_places=6)
    measured = models.DecimalField(max_digits=22, decimal_places=6)
    used = models.DecimalField(max_digits=22, decimal_places=6)

    class Meta:
        ordering = ["day", "department_id", "project_id", "flavor_id", "cluster_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "department", "project", "flavor", "cluster"], name="accounting_usage_day_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["department", "day"], name="accounting_day_dept"),
            models.Index(fields=["project", "day"], name="accounting_day_project"),
            models.Index(fields=["cluster", "day"], name="accounting_day_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.department_id}/{self.project_id}/{self.flavor_id} {self.day:{DAY}}"


class Basis(models.TextChoices):
    GRANTED = "granted", "GPU-equivalent-hours granted"
    USED = "used", "GPU-equivalent-hours used (busy, where measured)"


class RateCard(models.Model):
    """The price of a flavor's GPU-equivalent-hour over a validity, and what it bills: what was
    granted or what was used. Validities of one flavor never overlap (``rate_card_create``)."""

    id = models.BigAutoField(primary_key=True)
    flavor = models.ForeignKey("allocations.Flavor", on_delete=models.PROTECT, related_name="rate_cards")
    price_per_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, help_text="ISO 4217 code, upper case.")
    basis = models.CharField(max_length=8, choices=Basis.choices, default=Basis.GRANTED)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True, help_text="Exclusive; empty: open-ended.")
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["flavor_id", "valid_from"]
        constraints = [
            models.CheckConstraint(condition=models.Q(price_per_gpu_hour__gte=0), name="accounting_rate_not_negative"),
            models.CheckConstraint(
                condition=models.Q(valid_to__isnull=True) | models.Q(valid_to__gt=models.F("valid_from")),
                name="accounting_rate_valid_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor_id}: {self.price_per_gpu_hour} {self.currency}/{self.basis} from {self.valid_from:{DAY}}"


class Statement(models.Model):
    """A department's statement for one UTC calendar month and currency, written when it closes:
    its charge lines and their SHA-256 never change after; corrections are lines of their own."""

    id = models.BigAutoField(primary_key=True)
    department = models.ForeignKey("tenants.Department", on_delete=models.PROTECT, related_name="statements")
    period_start = models.DateTimeField(help_text="The month's first instant (UTC).")
    period_end = models.DateTimeField(help_text="The next month's first instant (UTC).")
    currency = models.CharField(max_length=3)
    total = models.DecimalField(max_digits=20, decimal_places=2, help_text="The charge lines' sum.")
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the charge lines, canonical JSON (docs/accounting.md).")
    closed_at = models.DateTimeField()

    class Meta:
        ordering = ["-period_start", "department_id", "currency"]
        constraints = [
            models.UniqueConstraint(fields=["department", "period_start", "currency"], name="accounting_statement_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.department_id} {self.period_start:{MONTH}} {self.currency}"


class LineKind(models.TextChoices):
    CHARGE = "charge", "charge"
    CORRECTION = "correction", "correction"
    UNPRICED = "unpriced", "hours no rate card priced"


class StatementLine(models.Model):
    """One line: a project's GPU-equivalent-hours of one flavor under one rate card, and the amount."""

    id = models.BigAutoField(primary_key=True)
    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    number = models.PositiveIntegerField(help_text="1, 2, …: the line's place in the statement.")
    kind = models.CharField(max_length=10, choices=LineKind.choices)
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey("allocations.Flavor", on_delete=models.PROTECT, related_name="+")
    rate_card = models.ForeignKey(RateCard, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    basis = models.CharField(max_length=8, choices=Basis.choices)
    gpu_hours = models.DecimalField(max_digits=20, decimal_places=6)
    rate = models.DecimalField(max_digits=12, decimal_places=4)
    amount = models.DecimalField(max_digits=20, decimal_places=2)
    reason = models.CharField(max_length=500, blank=True, help_text="Why (a correction).")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["statement_id", "number"]
        constraints = [models.UniqueConstraint(fields=["statement", "number"], name="accounting_line_number_unique")]

    def __str__(self) -> str:
        return f"{self.statement_id}#{self.number}"


from accounting.idle_models import (  # noqa: E402 - registered with this app; they refer to the models above
    OPEN_STATES,
    IdleAction,
    IdleCase,
    IdlePolicy,
    IdleState,
)

__all__ = [
    "OPEN_STATES", "Basis", "IdleAction", "IdleCase", "IdlePolicy", "IdleState", "LineKind", "RateCard", "Statement",
    "StatementLine", "UsageDay", "UsageHour",
]
