"""Flavors, quotas, priority classes and allocations (grants of GPU capacity to a project)."""

from __future__ import annotations

import re
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from allocations.models.versions import minimum_errors
from kernel.limits import QUANTITY_MAX, TEXT_LIMIT
from tenants.models import NAMESPACE_SLUG_VALIDATOR, Department, Project

# A Kubernetes extended resource name: a DNS-1123 subdomain prefix, '/', a name of at most 63 characters.
EXTENDED_RESOURCE_VALIDATOR = RegexValidator(
    regex=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    message="Must be a Kubernetes extended resource name such as nvidia.com/gpu or nvidia.com/mig-1g.10gb.",
)


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Exclusive whole GPU"
    MIG = "mig", "MIG slice"
    MPS = "mps", "CUDA MPS replica"
    TIMESLICE = "timeslice", "Time-slicing replica"
    VGPU = "vgpu", "HAMi vGPU (memory + core limits)"
    VOLCANO_VGPU = "volcano-vgpu", "Volcano vGPU (memory + core limits)"


SHARED_MODES = (SharingMode.MPS, SharingMode.TIMESLICE, SharingMode.VGPU, SharingMode.VOLCANO_VGPU)
"""Modes whose units share one GPU's memory: the memory reserve applies to them (docs/sharing.md)."""


class PlacementPolicy(models.TextChoices):
    BINPACK = "binpack", "Binpack: fill busy GPUs and nodes first (training)"
    SPREAD = "spread", "Spread: prefer empty GPUs and nodes (services)"


class Flavor(models.Model):
    """A GPU model plus a sharing mode, as requested by users and advertised by the cluster.

    ``gpu_equivalents`` is the weight of one unit in whole GPUs: one currency shared by whole
    GPUs, MIG slices and fractions, used for department totals and accounting.
    """

    name = models.SlugField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    display_name = models.CharField(max_length=200)
    gpu_model = models.CharField(max_length=100, help_text="GPU product as GPU feature discovery labels it.")
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices)
    resource_name = models.CharField(max_length=253, validators=[EXTENDED_RESOURCE_VALIDATOR])
    mig_profile = models.CharField(max_length=32, blank=True, help_text="MIG profile such as 1g.10gb (mig only).")
    replicas = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Replicas per GPU (mps and timeslice only)."
    )
    memory_mib = models.PositiveIntegerField(help_text="GPU memory of one unit in MiB.")
    compute_percent = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(100)], help_text="Share of the GPU's compute of one unit."
    )
    gpu_equivalents = models.DecimalField(
        max_digits=6,
        decimal_places=4,
        validators=[MinValueValidator(Decimal("0.0001")), MaxValueValidator(Decimal("1"))],
    )
    cpu_millicores_per_unit = models.PositiveIntegerField(default=8000)
    memory_mib_per_unit = models.PositiveIntegerField(default=65536)
    # Overrides of the cluster's memory reserve for this flavor's units (null: the cluster's).
    reserve_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(90)],
        help_text="Percent of a shared GPU's memory kept free (null: the cluster's setting).",
    )
    reserve_per_unit_mib = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(65536)],
        help_text="MiB kept free per unit sharing a GPU (null: the cluster's setting).",
    )
    placement_policy = models.CharField(
        max_length=16, choices=PlacementPolicy.choices, default=PlacementPolicy.BINPACK,
        help_text="Where units go: binpack (training) or spread (services).",
    )
    min_driver_version = models.CharField(
        max_length=32, blank=True, help_text="Lowest NVIDIA driver version (e.g. 535.104.05) a node must report."
    )
    min_cuda_version = models.CharField(
        max_length=16, blank=True, help_text="Lowest CUDA driver API version (e.g. 12.2) a node must report."
    )
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def gpu_equivalents_for(self, quantity: int) -> Decimal:
        """What ``quantity`` units of this flavor weigh in GPU-equivalents (the database's side of
        the same sum is ``allocations.quotas.usage``'s aggregate)."""
        return self.gpu_equivalents * quantity

    def clean(self) -> None:
        """The combinations the real components accept (see gpu-sharing-formats.md)."""
        errors: dict[str, str] = {}
        mode = self.sharing_mode
        if mode == SharingMode.MIG and not MIG_PROFILE_PATTERN.match(self.mig_profile or ""):
            errors["mig_profile"] = "A MIG flavor needs a profile such as 1g.10gb or 3g.40gb."
        if mode != SharingMode.MIG and self.mig_profile:
            errors["mig_profile"] = "Only MIG flavors have a MIG profile."
        if mode in (SharingMode.MPS, SharingMode.TIMESLICE):
            if self.replicas is None or self.replicas < 2:
                errors["replicas"] = "MPS and time-slicing flavors need at least 2 replicas per GPU."
            elif mode == SharingMode.MPS and self.replicas > 48:
                errors["replicas"] = "The MPS control daemon accepts at most 48 replicas per GPU."
        elif self.replicas is not None:
            errors["replicas"] = "Only MPS and time-slicing flavors have replicas."
        errors.update(self._volcano_vgpu_errors())
        if mode == SharingMode.EXCLUSIVE and self.gpu_equivalents is not None and self.gpu_equivalents != 1:
            errors["gpu_equivalents"] = "An exclusive whole-GPU flavor weighs exactly 1 GPU-equivalent."
        if mode == SharingMode.EXCLUSIVE and self.compute_percent not in (None, 100):
            errors["compute_percent"] = "An exclusive whole-GPU flavor has 100 % of the compute."
        errors.update(minimum_errors(min_driver_version=self.min_driver_version, min_cuda_version=self.min_cuda_version))
        if errors:
            raise ValidationError(errors)

    def _volcano_vgpu_errors(self) -> dict[str, str]:
        """A Volcano vGPU unit is one ``volcano.sh/vgpu-number`` with ``memory_mib`` as its
        ``volcano.sh/vgpu-memory`` and ``compute_percent`` as its ``volcano.sh/vgpu-cores``
        (gpu-sharing-formats.md §4); the name is Volcano's, and only Volcano vGPU flavors use it."""
        volcano = self.sharing_mode == SharingMode.VOLCANO_VGPU
        if volcano and self.resource_name != VOLCANO_VGPU_RESOURCE:
            return {"resource_name": f"A Volcano vGPU flavor's resource is {VOLCANO_VGPU_RESOURCE}."}
        if not volcano and self.resource_name == VOLCANO_VGPU_RESOURCE:
            return {"resource_name": f"Only Volcano vGPU flavors use {VOLCANO_VGPU_RESOURCE}."}
        return {}


VOLCANO_VGPU_RESOURCE = "volcano.sh/vgpu-number"
MIG_PROFILE_PATTERN = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?$")


class PreemptionPolicy(models.TextChoices):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority", "Preempt lower priority"
    NEVER = "Never", "Never"


class PriorityClass(models.Model):
    """A Kubernetes PriorityClass plus how far it may oversubscribe a department's quota."""

    name = models.CharField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    value = models.IntegerField(validators=[MinValueValidator(-2147483648), MaxValueValidator(1000000000)])
    preemption_policy = models.CharField(
        max_length=32, choices=PreemptionPolicy.choices, default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    )
    oversubscription_factor = models.DecimalField(
        max_digits=5, decimal_places=2, default=Decimal("1.00"), validators=[MinValueValidator(Decimal("1.00"))]
    )
    description = models.CharField(max_length=500, blank=True)
    notice_minutes = models.PositiveIntegerField(
        default=15,
        validators=[MaxValueValidator(10080)],
        help_text="How long a grant of this class keeps running after it is chosen for reclaim.",
    )
    preemptible = models.BooleanField(
        default=False, help_text="Grants of this class are reclaimed without notice (a notice of 0 minutes)."
    )

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name

    @property
    def notice(self) -> int:
        """Minutes of notice a reclaimed grant of this class gets (0 when preemptible)."""
        return 0 if self.preemptible else int(self.notice_minutes)


class Quota(models.Model):
    """A department's guaranteed amount and hard limit of one flavor (units), or of GPU-equivalents
    across all flavors when ``flavor`` is empty. A quota covers the department's whole subtree."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="quotas")
    guaranteed = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal("0"))])
    limit = models.DecimalField(max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal("0"))])
    lending_limit = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="How much of its unused guarantee the department lends to its siblings (empty: all of it).",
    )

    class Meta:
        ordering = ["department__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["department", "flavor"], name="quota_unique_department_flavor"),
            models.UniqueConstraint(
                fields=["department"], condition=models.Q(flavor__isnull=True), name="quota_unique_department_total"
            ),
            models.CheckConstraint(condition=models.Q(guaranteed__lte=models.F("limit")), name="quota_guaranteed_le_limit"),
            models.CheckConstraint(
                condition=models.Q(lending_limit__isnull=True) | models.Q(lending_limit__lte=models.F("guaranteed")),
                name="quota_lending_le_guaranteed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.department}/{self.flavor or 'gpu-equivalents'}"


class AllocationState(models.TextChoices):
    PENDING = "pending", "Pending approval"
    SCHEDULED = "scheduled", "Scheduled"
    APPROVED = "approved", "Approved"
    PROVISIONING = "provisioning", "Provisioning"
    ACTIVE = "active", "Active"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    RELEASED = "released", "Released"
    EXPIRED = "expired", "Expired"
    RECLAIMING = "reclaiming", "Reclaiming"
    RECLAIMED = "reclaimed", "Reclaimed"


class Allocation(models.Model):
    """A request for, and once approved a grant of, GPU capacity to a project on one cluster."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="allocations")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="allocations")
    quantity = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(QUANTITY_MAX)])
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="allocations")
    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="allocations"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    justification = models.TextField(max_length=TEXT_LIMIT)
    state = models.CharField(max_length=16, choices=AllocationState.choices, default=AllocationState.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="requested_allocations"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_allocations"
    )
    decision_comment = models.TextField(blank=True, max_length=TEXT_LIMIT)
    decided_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True, max_length=4000)
    original_ends_at = models.DateTimeField(
        null=True, blank=True, help_text="The end when the grant was approved: self-service renewal is measured from it."
    )
    reclaim_deadline = models.DateTimeField(null=True, blank=True)
    reclaim_reason = models.TextField(blank=True, max_length=4000)
    reclaimed_for = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reclaimed_grants",
        help_text="The request whose admission reclaims this grant.",
    )
    reclaim_units = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="A partial reclaim: how many of its units it gives back at reclaim_deadline (empty: none, or "
        "the whole grant while reclaiming).",
    )
    reclaim_from_state = models.CharField(
        max_length=16, blank=True, help_text="Reclaiming: the state it had, given back if the reclaim is called off."
    )
    # Why it has not started, as last read (docs/pending.md): derived, rewritten by the periodic
    # refresh (allocations.admission.why_refresh), never a decision; /metrics counts it.
    waiting_reason = models.CharField(max_length=32, blank=True, editable=False)
    waiting_reason_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "ends_at"]),
            models.Index(fields=["project", "state"]),
            models.Index(fields=["flavor", "state"]),
            models.Index(fields=["state", "starts_at"]),
            models.Index(fields=["state", "reclaim_deadline"]),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(ends_at__gt=models.F("starts_at")), name="allocation_ends_after_start"),
            models.CheckConstraint(condition=models.Q(quantity__gte=1), name="allocation_quantity_positive"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.project} {self.quantity}×{self.flavor} ({self.state})"

    @property
    def department(self) -> Department:
        return self.project.department


class Reservation(models.Model):
    """One unit of an allocation booked on concrete GPUs by the placement engine.

    Written when the allocation is approved, under the same locks as the quota check; released
    (``released_at`` set, the row kept as history) when the allocation is released or expires,
    or when a defragmentation plan moves the unit (the new place is a new row).
    ``gpu_indices`` has one index per GPU the unit spans; ``mig_start`` is the first memory
    slice of a MIG instance; ``gpu_milli`` the share of each GPU in thousandths (0 for MIG).
    """

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="reservations")
    unit = models.PositiveIntegerField(help_text="Which unit of the allocation (0-based).")
    node = models.ForeignKey("clusters.Node", on_delete=models.PROTECT, related_name="reservations")
    gpu_indices = models.JSONField(default=list)
    gpu_milli = models.PositiveIntegerField(validators=[MaxValueValidator(1000)])
    mig_profile = models.CharField(max_length=32, blank=True)
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True)
    cpu_millicores = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    policy = models.CharField(max_length=32, blank=True, help_text="Engine policy (or 'pinned layout') that chose it.")
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.CharField(max_length=32, blank=True)
    changed_version = models.BigIntegerField(
        default=0, db_index=True,
        help_text="The cluster's placement version that booked or released it last (allocations.booking.state).",
    )

    class Meta:
        ordering = ["allocation_id", "unit", "pk"]
        indexes = [models.Index(fields=["node", "released_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "unit"], condition=models.Q(released_at__isnull=True),
                name="reservation_one_live_row_per_unit",
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.node_id}:{self.gpu_indices}"
        return f"#{self.allocation_id}/{self.unit} @ {where}" + (" (released)" if self.released_at else "")


class ChangeKind(models.TextChoices):
    RENEW = "renew", "Renewal"
    RESIZE = "resize", "Resize"


class ChangeState(models.TextChoices):
    PENDING = "pending", "Pending approval"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


class AllocationChange(models.Model):
    """A change to a grant that needs a department admin: a renewal beyond the self-service
    window, or more units. Applied (re-admitted) when approved; the allocation keeps its current
    terms until then."""

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="changes")
    kind = models.CharField(max_length=16, choices=ChangeKind.choices)
    state = models.CharField(max_length=16, choices=ChangeState.choices, default=ChangeState.PENDING)
    ends_at = models.DateTimeField(null=True, blank=True, help_text="The new end (renewals).")
    quantity = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(QUANTITY_MAX)], help_text="The new quantity (resizes)."
    )
    justification = models.TextField(blank=True, max_length=TEXT_LIMIT)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="requested_changes")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="decided_changes"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True, max_length=TEXT_LIMIT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation"], condition=models.Q(state="pending"), name="allocation_change_one_pending",
            ),
            models.CheckConstraint(
                condition=(models.Q(kind="renew", ends_at__isnull=False, quantity__isnull=True)
                           | models.Q(kind="resize", quantity__isnull=False, ends_at__isnull=True)),
                name="allocation_change_kind_fields",
            ),
        ]

    def __str__(self) -> str:
        return f"change #{self.pk} of #{self.allocation_id}: {self.kind} ({self.state})"


from allocations.models.fair_share import FairShare  # noqa: E402 - registered with this app
from allocations.models.project_caps import ProjectQuota  # noqa: E402 - registered with this app
from allocations.models.rule_changes import RuleChange, RuleChangeKind, RuleChangeState  # noqa: E402 - registered with this app
from allocations.models.windows import (  # noqa: E402 - registered with this app; they refer to the models above
    EdgeKind,
    QuotaWindow,
    QuotaWindowEdge,
    ShrinkPolicy,
    WindowKind,
    WindowState,
)

__all__ = [
    "Allocation", "AllocationChange", "AllocationState", "ChangeKind", "ChangeState", "EdgeKind", "FairShare", "Flavor",
    "PreemptionPolicy", "PriorityClass", "ProjectQuota", "Quota", "QuotaWindow",
    "RuleChange", "RuleChangeKind", "RuleChangeState", "QuotaWindowEdge", "Reservation", "SharingMode",
    "ShrinkPolicy", "WindowKind", "WindowState",
]
