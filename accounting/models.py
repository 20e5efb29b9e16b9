"""Usage accounting: GPU-equivalent-hours per allocation and UTC hour (docs/accounting.md)."""

from __future__ import annotations

from django.db import models


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
        return f"#{self.allocation_id} {self.hour:%Y-%m-%dT%H}"
