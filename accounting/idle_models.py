"""Idle-GPU reclamation: the policies that say when a grant counts as idle and what follows, and
the cases that follow one grant up the ladder (docs/accounting.md, "Idle grants"). Imported by
``accounting.models`` so that Django registers them with the app."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from kernel.limits import TEXT_LIMIT

WEEK_MINUTES = 7 * 24 * 60


class IdleAction(models.TextChoices):
    NOTIFY = "notify", "Notify: warn the owner and the department's admins, take nothing"
    RECLAIM = "reclaim", "Reclaim: after the warning and its grace, the grant is reclaimed (with its class's notice)"


class IdlePolicy(models.Model):
    """When a grant counts as idle, and what happens then.

    A 5-minute bucket of a grant is *idle* when its activity (the busy fraction of its devices) is
    below ``threshold``, *busy* otherwise, and *unknown* when nothing covered it well enough; a grant
    that has been idle for ``window_minutes`` of known buckets since it was last busy (unknown ones
    pause the clock) is warned; ``grace_minutes`` of known idle buckets later, with the newest data
    still idle, ``action`` follows. The owner may keep it ``max_keeps`` times in 7 days, each time
    for ``keep_hours``. A grant's policy is the most specific active one that applies: the nearest
    department (its subtree), then a priority class, then a cluster, then the newest.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    department = models.ForeignKey(
        "tenants.Department", null=True, blank=True, on_delete=models.PROTECT, related_name="idle_policies",
        help_text="Applies to this department's subtree; empty: to every department.",
    )
    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="idle_policies",
        help_text="Applies on this cluster only; empty: on every cluster.",
    )
    priority_class = models.ForeignKey(
        "allocations.PriorityClass", null=True, blank=True, on_delete=models.PROTECT, related_name="idle_policies",
        help_text="Applies to grants of this priority class only; empty: to every class.",
    )
    threshold = models.FloatField(
        default=0.05, validators=[MinValueValidator(0.001), MaxValueValidator(1.0)],
        help_text="A bucket whose activity (0..1) is below this is idle.",
    )
    window_minutes = models.PositiveIntegerField(
        default=120, validators=[MinValueValidator(15), MaxValueValidator(WEEK_MINUTES)],
        help_text="Known idle minutes since the grant was last busy before it is warned.",
    )
    grace_minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(5), MaxValueValidator(WEEK_MINUTES)],
        help_text="Known idle minutes after the warning before the action.",
    )
    action = models.CharField(max_length=8, choices=IdleAction.choices, default=IdleAction.NOTIFY)
    max_keeps = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(50)], help_text="Keeps per grant in any 7 days (0: no keeping)."
    )
    keep_hours = models.PositiveSmallIntegerField(
        default=24, validators=[MinValueValidator(1), MaxValueValidator(168)],
        help_text="How long a keep holds off the next case.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "idle policies"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(threshold__gt=0, threshold__lte=1), name="accounting_idle_policy_threshold"
            ),
            models.CheckConstraint(condition=models.Q(window_minutes__gte=15), name="accounting_idle_policy_window"),
            models.CheckConstraint(condition=models.Q(grace_minutes__gte=5), name="accounting_idle_policy_grace"),
        ]

    def __str__(self) -> str:
        return self.name

    def as_evidence(self) -> dict[str, object]:
        """The numbers a case was judged by (kept with the case: a policy may change later)."""
        return {
            "policy": self.pk, "name": self.name, "threshold": self.threshold, "window_minutes": self.window_minutes,
            "grace_minutes": self.grace_minutes, "action": self.action, "max_keeps": self.max_keeps,
            "keep_hours": self.keep_hours,
        }  # fmt: skip


class IdleState(models.TextChoices):
    """observing: idle for half its window; warned: idle for the window, the owner and the
    department's admins told; kept: by its owner, with a reason; exempted: by an admin, until a
    date; cleared: busy again, the grant ended, or no policy applies any more; reclaimed: through
    the reclaim path after the grace; released: by its owner or an admin from the case."""

    OBSERVING = "observing", "Observing"
    WARNED = "warned", "Warned"
    KEPT = "kept", "Kept"
    EXEMPTED = "exempted", "Exempted"
    CLEARED = "cleared", "Cleared"
    RECLAIMED = "reclaimed", "Reclaimed"
    RELEASED = "released", "Released"


OPEN_STATES: frozenset[str] = frozenset({IdleState.OBSERVING, IdleState.WARNED})


class IdleCase(models.Model):
    """One grant's idle period, followed up the ladder: observing → warned → kept / exempted /
    cleared / reclaimed / released. A grant has at most one open case. ``idle_since`` is the start
    of the idle streak that opened it; ``idle_minutes`` the known idle minutes of that streak at the
    last evaluation; ``action_due_at`` when the action may come at the earliest (it waits while the
    data is unknown). ``rearm_at``, on a closed case, is when the grant may be watched again (a
    keep's or an exemption's end). Written only by ``accounting.idle`` services, each change audited.
    """

    id = models.BigAutoField(primary_key=True)
    allocation = models.ForeignKey("allocations.Allocation", on_delete=models.PROTECT, related_name="idle_cases")
    policy = models.ForeignKey(IdlePolicy, on_delete=models.PROTECT, related_name="cases")
    state = models.CharField(max_length=10, choices=IdleState.choices, default=IdleState.OBSERVING)
    opened_at = models.DateTimeField()
    idle_since = models.DateTimeField()
    idle_minutes = models.PositiveIntegerField(default=0)
    last_evaluated_at = models.DateTimeField()
    warned_at = models.DateTimeField(null=True, blank=True)
    action_due_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    rearm_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, max_length=TEXT_LIMIT, help_text="Why it was kept, exempted or closed.")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Who kept, exempted or released it.",
    )
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation"], condition=models.Q(state__in=["observing", "warned"]),
                name="accounting_idle_case_one_open",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "opened_at"], name="accounting_idle_state"),
            models.Index(fields=["allocation", "closed_at"], name="accounting_idle_allocation"),
        ]

    def __str__(self) -> str:
        return f"idle case #{self.pk} of #{self.allocation_id} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES
