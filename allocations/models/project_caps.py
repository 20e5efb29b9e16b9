"""Project caps: a department admin's split of the department's quota among its projects
(docs/quotas.md, "Project caps"). Imported by ``allocations.models`` so that Django registers it."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models


class ProjectQuota(models.Model):
    """The most a project's grants may hold at any moment: units of one flavor, or GPU-equivalents
    across all flavors when ``flavor`` is empty. A ceiling only: it guarantees nothing, and the
    department's own quotas still apply on top of it."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="caps")
    flavor = models.ForeignKey(
        "allocations.Flavor", null=True, blank=True, on_delete=models.PROTECT, related_name="project_caps"
    )
    limit = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal("0"))])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "flavor"], name="project_quota_unique_flavor"),
            models.UniqueConstraint(
                fields=["project"], condition=models.Q(flavor__isnull=True), name="project_quota_unique_total"
            ),
            models.CheckConstraint(condition=models.Q(limit__gte=0), name="project_quota_limit_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.project}/{self.flavor or 'gpu-equivalents'} ≤ {self.limit}"
