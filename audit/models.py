"""The audit log: one row per state change, written in the same transaction as the change."""

from __future__ import annotations

from django.db import models


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    DENIED = "denied", "Denied"
    FAILURE = "failure", "Failure"


class AuditEvent(models.Model):
    occurred_at = models.DateTimeField(db_index=True)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    department_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    details = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.SUCCESS)
    request_id = models.CharField(max_length=64, blank=True)
    source_ip = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=512, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.id} {self.action} by {self.actor_username or '-'}"
