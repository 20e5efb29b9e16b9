"""Pending changes of the rules: a quota's numbers or a priority class, proposed by one platform
admin and applied only once another approves (``GPUPORTAL_FOUR_EYES``; docs/quotas.md, "Four-eyes
on the rules"), or applied at once as an emergency with a stated reason. Quota windows have their
own proposal and decision (``allocations.windows.services``). Imported by ``allocations.models`` so
that Django registers the model with the app."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kernel.limits import TEXT_LIMIT

REASON_LIMIT = 500
"""An emergency's stated reason: from 1 to this many characters."""


class RuleChangeKind(models.TextChoices):
    QUOTA_SET = "quota.set", "Set a department's quota (created, or replaced)"
    QUOTA_UPDATE = "quota.update", "Change some of a quota's numbers"
    QUOTA_DELETE = "quota.delete", "Remove a quota"
    PRIORITY_CLASS_CREATE = "priority_class.create", "Create a priority class"
    PRIORITY_CLASS_UPDATE = "priority_class.update", "Change a priority class"
    PRIORITY_CLASS_DELETE = "priority_class.delete", "Remove a priority class"


class RuleChangeState(models.TextChoices):
    PENDING = "pending", "Pending approval by another platform admin"
    APPLIED = "applied", "Applied (approved, or an emergency)"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn by its proposer"


class RuleChange(models.Model):
    """One proposed change of the rules. ``proposed`` holds what the change sets, as the API takes it
    (numbers as strings); ``before`` what the rule was when it was proposed (for the approver)."""

    kind = models.CharField(max_length=32, choices=RuleChangeKind.choices)
    state = models.CharField(max_length=16, choices=RuleChangeState.choices, default=RuleChangeState.PENDING)
    # The targets are kept by id without a constraint: the record outlives a removed quota or class
    # (its id stays, as in the audit log), and removing one writes no row of its changes.
    quota = models.ForeignKey(
        "allocations.Quota", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="rule_changes", help_text="The quota it changes (null for a new quota).",
    )
    priority_class = models.ForeignKey(
        "allocations.PriorityClass", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="rule_changes", help_text="The priority class it changes (null for a new class).",
    )
    department = models.ForeignKey(
        "tenants.Department", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="rule_changes", help_text="A quota change's department (whose readers may read it).",
    )
    proposed = models.JSONField(default=dict, blank=True, help_text="What the change sets, as the catalogue takes it.")
    before = models.JSONField(default=dict, blank=True)
    emergency = models.BooleanField(default=False, help_text="Applied at once, without a second admin, for its reason.")
    reason = models.TextField(blank=True, max_length=REASON_LIMIT)
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="proposed_rule_changes")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_rule_changes"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True, max_length=TEXT_LIMIT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "kind"])]

    def __str__(self) -> str:
        return f"rule change #{self.pk} ({self.kind}, {self.state})"
