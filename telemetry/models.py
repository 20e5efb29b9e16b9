"""What the GPU node agents report, and the tokens they report with.

The inventory (``clusters.Cluster``/``Node``/``Gpu``) is what the portal plans and reserves on;
these tables are what the agents observed: GPU state keyed by UUID with presence and the latest
readings, MIG devices, utilisation samples in three tiers, and per node the reporting state
(order, staleness, MIG mismatch).
"""

from __future__ import annotations

import datetime

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from kernel.times import ISO_MINUTE, ISO_SECOND

NODE_NAME_VALIDATOR = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z",
    "A Kubernetes node name: lower-case letters, digits, '-' and '.' (a DNS-1123 subdomain).",
)


class NodeToken(models.Model):
    """A node agent's credential for one node of one cluster. Only the secret's hash is kept."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="telemetry_tokens")
    node_name = models.CharField(max_length=253, validators=[NODE_NAME_VALIDATOR])
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "node_name", "-created_at", "-pk"]
        indexes = [models.Index(fields=["cluster", "node_name"])]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.node_name} token {self.key_id[:6]}…"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class NodeReportState(models.Model):
    """Per node: the last accepted report's header, staleness and MIG flags."""

    node = models.OneToOneField("clusters.Node", on_delete=models.CASCADE, primary_key=True, related_name="telemetry")
    token = models.ForeignKey(NodeToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    agent_version = models.CharField(max_length=64, blank=True)
    agent_started_at = models.DateTimeField(null=True, blank=True)
    sequence = models.PositiveBigIntegerField(null=True, blank=True)
    collected_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    # received_at + max(3 × interval, 90 s), fixed when the report is accepted: stale from then on.
    stale_at = models.DateTimeField(null=True, blank=True, db_index=True)
    interval_seconds = models.PositiveIntegerField(default=30)
    undelivered_reports = models.PositiveIntegerField(default=0)
    reports_accepted = models.PositiveBigIntegerField(default=0)
    reports_discarded = models.PositiveBigIntegerField(default=0)
    driver_version = models.CharField(max_length=80, blank=True)
    cuda_driver_version = models.CharField(max_length=16, blank=True)
    errors = models.JSONField(default=list, blank=True)
    # Kept by the stale-marking task (and cleared by the next report); reads use is_stale_at.
    is_stale = models.BooleanField(default=False)
    stale_since = models.DateTimeField(null=True, blank=True)
    mig_mismatch = models.BooleanField(default=False)
    mig_reset_pending = models.BooleanField(default=False)
    mig_detail = models.JSONField(default=dict, blank=True)
    unidentified_gpus = models.JSONField(default=list, blank=True)  # indexes of GPUs reported without a UUID
    # The last report carried custody (pod_devices, or why they could not be read): the custody
    # ledger reads every report while this holds, and a report of an agent that never carries it
    # costs the ledger nothing (docs/custody.md).
    custody_reported = models.BooleanField(default=False)

    class Meta:
        ordering = ["node_id"]

    def __str__(self) -> str:
        return f"report state of node {self.node_id}"

    def is_stale_at(self, now: datetime.datetime) -> bool:
        """Stale when no report arrived for max(3 × interval, 90 s); a node never heard from is too."""
        return self.stale_at is None or now >= self.stale_at


class MigModeName(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DISABLED = "disabled", "Disabled"


class ObservedGpu(models.Model):
    """One physical GPU as its node's agent reported it, keyed by UUID. A GPU missing from a report
    is kept, marked absent (reservations refer to it through the inventory)."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="telemetry_gpus")
    uuid = models.CharField(max_length=64)
    gpu = models.ForeignKey(
        "clusters.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="telemetry_observations"
    )
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=96, blank=True)
    is_present = models.BooleanField(default=True)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    absent_since = models.DateTimeField(null=True, blank=True)
    memory_total_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    memory_used_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    mig_mode_current = models.CharField(max_length=8, choices=MigModeName.choices, blank=True)
    mig_mode_pending = models.CharField(max_length=8, choices=MigModeName.choices, blank=True)
    gpu_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    memory_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    temperature_celsius = models.PositiveSmallIntegerField(null=True, blank=True)
    power_usage_milliwatts = models.PositiveIntegerField(null=True, blank=True)
    power_limit_milliwatts = models.PositiveIntegerField(null=True, blank=True)
    ecc_errors = models.JSONField(null=True, blank=True)
    processes = models.JSONField(null=True, blank=True)
    unsupported = models.JSONField(default=list, blank=True)
    errors = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["node_id", "index", "pk"]
        constraints = [models.UniqueConstraint(fields=["node", "uuid"], name="telemetry_gpu_unique_uuid_per_node")]

    def __str__(self) -> str:
        return f"{self.node_id}/{self.uuid}"


class ObservedMigInstance(models.Model):
    """A MIG device that exists on a GPU now (the last report's list)."""

    gpu = models.ForeignKey(ObservedGpu, on_delete=models.CASCADE, related_name="mig_instances")
    slot = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, blank=True)
    profile = models.CharField(max_length=32, blank=True)
    gpu_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    compute_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    gpu_instance_slices = models.PositiveSmallIntegerField(null=True, blank=True)
    compute_instance_slices = models.PositiveSmallIntegerField(null=True, blank=True)
    multiprocessor_count = models.PositiveSmallIntegerField(null=True, blank=True)
    memory_total_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    memory_used_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["gpu_id", "slot"]
        constraints = [models.UniqueConstraint(fields=["gpu", "slot"], name="telemetry_mig_unique_slot_per_gpu")]

    def __str__(self) -> str:
        return f"{self.gpu_id} slot {self.slot} {self.profile}"


class SampleTier(models.IntegerChoices):
    RAW = 0, "raw"
    FIVE_MINUTES = 1, "5m"
    HOUR = 2, "1h"


class GpuSample(models.Model):
    """Readings of one GPU: raw (one per report, ``at`` = collected_at) or the mean over a bucket
    (``at`` = the bucket's start, ``samples`` = how many raw samples it averages)."""

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey(ObservedGpu, on_delete=models.CASCADE, related_name="samples")
    tier = models.PositiveSmallIntegerField(choices=SampleTier.choices)
    at = models.DateTimeField()
    samples = models.PositiveIntegerField(default=1)
    gpu_percent = models.FloatField(null=True, blank=True)
    memory_percent = models.FloatField(null=True, blank=True)
    memory_used_bytes = models.FloatField(null=True, blank=True)
    temperature_celsius = models.FloatField(null=True, blank=True)
    power_milliwatts = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["gpu_id", "tier", "at"]
        constraints = [models.UniqueConstraint(fields=["gpu", "tier", "at"], name="telemetry_sample_unique")]
        indexes = [models.Index(fields=["tier", "at"], name="telemetry_sample_tier_at")]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.get_tier_display()} {self.at:{ISO_SECOND}}"


class SampleRollup(models.Model):
    """How far each downsampled tier has been computed (the start of the first bucket not yet final)."""

    tier = models.PositiveSmallIntegerField(choices=SampleTier.choices, primary_key=True)
    rolled_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.get_tier_display()} until {self.rolled_until:{ISO_MINUTE}}"


class UsageSource(models.TextChoices):
    """Where a utilisation bucket was read (docs/observability.md, "Sources")."""

    DCGM = "dcgm", "dcgm-exporter through Prometheus"
    HAMI = "hami", "HAMi's vGPU monitor through Prometheus"
    AGENT = "agent", "the portal's node agent"


class AllocationUsage(models.Model):
    """How much of one allocation was used over one 5-minute bucket, from one source.

    ``activity`` is the mean busy fraction of the allocation's devices (0..1: SM active, else
    graphics engine active, else GPU utilisation / 100), ``None`` when the bucket's data did not
    cover enough of it (``coverage`` < the threshold): missing data is unknown, never idle.
    ``granted_gpu_eq`` is what the allocation held in GPU-equivalents during the bucket and
    ``used_gpu_eq`` = activity × granted (``None`` when unknown). Memory is in bytes, against the
    memory the allocation's share entitles it to. ``cluster`` and ``department`` are copied from
    the allocation so that the charts aggregate without joins.
    """

    id = models.BigAutoField(primary_key=True)
    allocation = models.ForeignKey("allocations.Allocation", on_delete=models.CASCADE, related_name="usage")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    department = models.ForeignKey("tenants.Department", on_delete=models.CASCADE, related_name="+")
    bucket_start = models.DateTimeField()
    source = models.CharField(max_length=8, choices=UsageSource.choices)
    devices = models.PositiveSmallIntegerField(default=0, help_text="Booked devices the bucket's data covered.")
    coverage = models.FloatField(help_text="Fraction of the expected samples present (0..1).")
    activity = models.FloatField(null=True, blank=True)
    granted_gpu_eq = models.FloatField()
    used_gpu_eq = models.FloatField(null=True, blank=True)
    memory_used_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    memory_granted_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["allocation_id", "bucket_start", "source"]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "bucket_start", "source"], name="telemetry_usage_unique"),
        ]
        indexes = [
            models.Index(fields=["cluster", "bucket_start"], name="telemetry_usage_cluster_at"),
            models.Index(fields=["department", "bucket_start"], name="telemetry_usage_dept_at"),
        ]

    def __str__(self) -> str:
        return f"#{self.allocation_id} {self.source} {self.bucket_start:{ISO_MINUTE}}"
