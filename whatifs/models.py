"""A what-if: proposed changes of the rules replayed against a workload, current against proposed
(docs/twin.md, "What-if")."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class WhatIfState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class WorkloadSource(models.TextChoices):
    HISTORY = "history", "The portal's history"
    FILE = "file", "An uploaded workload file"


HISTORY_DAYS_MAX = 90


class WhatIf(models.Model):
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="what_ifs")
    department = models.ForeignKey(
        "tenants.Department", null=True, blank=True, on_delete=models.PROTECT, related_name="what_ifs",
        help_text="Whose what-if it is: who may read it (empty: the platform's, platform admins only).",
    )
    title = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(help_text="The proposed changes, as validated (whatifs.changes).")
    source = models.CharField(max_length=8, choices=WorkloadSource.choices)
    history_days = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(HISTORY_DAYS_MAX)]
    )
    history_until = models.DateTimeField(null=True, blank=True, help_text="The end of the history window.")
    workload = models.TextField(blank=True, help_text="An uploaded workload's text (the twin's format).")
    workload_format = models.CharField(max_length=8, blank=True)
    state = models.CharField(max_length=8, choices=WhatIfState.choices, default=WhatIfState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["department", "created_at"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(progress__lte=100), name="what_if_progress_le_100"),
        ]

    def __str__(self) -> str:
        return f"what-if #{self.pk} ({self.state})"
