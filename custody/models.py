"""The custody ledger and the working state that feeds it.

``CustodyEvent`` is the ledger (its table and indexes are ``custody.schema``): append-only (triggers refuse UPDATE, DELETE and TRUNCATE; the
application's role holds SELECT and INSERT only), one hash chain per node (``chain_seq``,
``prev_hash``, ``hash``: ``custody.chain``). Its rows name clusters, nodes, projects and grants by
value and by number, never through a foreign key, so nothing deleted elsewhere can reach them.

``CustodyNodeState``, ``CustodyHolding`` and ``CustodyAlarm`` are working state, rewritten as reports
arrive: what the last accepted report of each node said, the intervals open now, the alarms raised
now. Nothing in them is evidence; everything they decide is written to the ledger or the audit log.
"""

from __future__ import annotations

from django.db import models


class EventKind(models.TextChoices):
    OPENED = "opened", "Interval opened"
    CLOSED = "closed", "Interval closed"
    GAP = "gap", "Gap in reports"


class StartObserved(models.TextChoices):
    APPEARED = "appeared", "First report that showed it; the report before did not"
    AFTER_GAP = "after_gap", "First report that showed it after a gap (or the node's first report)"


class EndObserved(models.TextChoices):
    GONE = "gone", "Last report that showed it; the next report showed it gone"
    GAP = "gap", "Last report that showed it; a gap followed"


class Attribution(models.TextChoices):
    GRANTED = "granted", "The pod's project holds a grant booked on this GPU"
    UNGRANTED = "ungranted", "No grant of the pod's project (or no project) is booked on this GPU"
    FOREIGN = "foreign_project", "The GPU is booked to another project's grant"
    AMBIGUOUS = "ambiguous", "Several grants of the pod's project are booked on this GPU"


class Confidence(models.TextChoices):
    HIGH = "high", "Both ends bounded by adjacent reports, pod UID known, clock in sync"
    MEDIUM = "medium", "One end bounded by a gap, or the pod UID or clock offset unknown"
    LOW = "low", "Neither end bounded by adjacent reports"


class GapCause(models.TextChoices):
    LOST_REPORT = "lost_report", "A report's sequence number was skipped"
    AGENT_RESTART = "agent_restart", "The agent started again (a restart or a node reboot)"
    LATE_REPORT = "late_report", "No report for more than the allowed number of intervals"
    POD_RESOURCES_ERROR = "pod_resources_error", "The agent could not read the kubelet's PodResources"
    NOT_REPORTED = "not_reported", "The report carried no custody (no pod_devices)"
    REPORTS_STOPPED = "reports_stopped", "The node stopped reporting"


class AlarmKind(models.TextChoices):
    UNGRANTED = "ungranted", "A GPU in use by a pod with no grant for that device or project"
    FOREIGN = "foreign_project", "A pod of one project on a GPU booked to another"
    UNUSED = "grant_unused", "A grant's booked GPUs held by none of its project's pods"
    REPORTS_STOPPED = "reports_stopped", "A node whose reports stopped"


class CustodyEvent(models.Model):
    """One ledger row. ``opened``: an interval began (its start known). ``closed``: the whole
    interval, start and end, repeated so that a closed row answers alone. ``gap``: from when to
    when the node's custody is unknown, and why."""

    id = models.BigAutoField(primary_key=True)
    node_id = models.BigIntegerField()
    chain_seq = models.BigIntegerField()
    kind = models.CharField(max_length=8, choices=EventKind.choices)
    recorded_at = models.DateTimeField()
    cluster = models.CharField(max_length=63)
    node = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=96, blank=True)
    device_id = models.CharField(max_length=128, blank=True)
    resource = models.CharField(max_length=253, blank=True)
    sharing = models.CharField(max_length=16, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True)
    pod_uid = models.CharField(max_length=64, blank=True)
    container = models.CharField(max_length=253, blank=True)
    project_id = models.BigIntegerField(null=True)
    department_id = models.BigIntegerField(null=True)
    allocation_id = models.BigIntegerField(null=True)
    attribution = models.CharField(max_length=16, blank=True, choices=Attribution.choices)
    started_at = models.DateTimeField(null=True)
    start_observed = models.CharField(max_length=16, blank=True, choices=StartObserved.choices)
    ended_at = models.DateTimeField(null=True)
    end_observed = models.CharField(max_length=16, blank=True, choices=EndObserved.choices)
    gone_at = models.DateTimeField(null=True)
    confidence = models.CharField(max_length=8, blank=True, choices=Confidence.choices)
    gap_cause = models.CharField(max_length=24, blank=True, choices=GapCause.choices)
    opened_seq = models.BigIntegerField(null=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        managed = False  # hand-written DDL (custody.schema): Django's flush never empties the ledger
        db_table = "custody_event"
        ordering = ["node_id", "chain_seq"]

    def __str__(self) -> str:
        return f"{self.node}#{self.chain_seq} {self.kind} {self.device_id} {self.namespace}/{self.pod}"


class CustodyNodeState(models.Model):
    """What the node's last accepted report said, and the head of its ledger chain."""

    node = models.OneToOneField("clusters.Node", on_delete=models.CASCADE, related_name="custody_state")
    agent_started_at = models.DateTimeField(null=True)
    sequence = models.BigIntegerField(null=True)
    last_report_at = models.DateTimeField(null=True)
    interval_seconds = models.PositiveIntegerField(default=30)
    clock_offset_seconds = models.FloatField(null=True)
    custody_known = models.BooleanField(default=False, help_text="The last report carried custody without error.")
    gap_since = models.DateTimeField(null=True, help_text="When custody became unknown, while it is.")
    gap_cause = models.CharField(max_length=24, blank=True, choices=GapCause.choices)
    chain_seq = models.BigIntegerField(default=0)
    chain_head = models.CharField(max_length=64, blank=True)

    class Meta:
        db_table = "custody_node_state"

    def __str__(self) -> str:
        return f"custody of node {self.node_id} at #{self.chain_seq}"


class CustodyHolding(models.Model):
    """An interval open now: the container held the device in every report since ``opened_seq``."""

    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="custody_holdings")
    device_id = models.CharField(max_length=128)
    namespace = models.CharField(max_length=63)
    pod = models.CharField(max_length=253)
    pod_uid = models.CharField(max_length=64, blank=True)
    container = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=96, blank=True)
    resource = models.CharField(max_length=253, blank=True)
    sharing = models.CharField(max_length=16, blank=True)
    project_id = models.BigIntegerField(null=True)
    department_id = models.BigIntegerField(null=True)
    allocation_id = models.BigIntegerField(null=True)
    attribution = models.CharField(max_length=16, choices=Attribution.choices)
    opened_seq = models.BigIntegerField()
    started_at = models.DateTimeField()
    start_observed = models.CharField(max_length=16, choices=StartObserved.choices)

    class Meta:
        db_table = "custody_holding"
        constraints = [
            models.UniqueConstraint(
                fields=["node", "device_id", "namespace", "pod", "pod_uid", "container"], name="custody_holding_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container} holds {self.device_id}"


class CustodyAlarm(models.Model):
    """An alarm raised and not yet cleared (raising and clearing are audit events)."""

    kind = models.CharField(max_length=16, choices=AlarmKind.choices)
    key = models.CharField(max_length=600, help_text="What the alarm is about, unique per kind while raised.")
    node = models.ForeignKey("clusters.Node", null=True, on_delete=models.CASCADE, related_name="+")
    allocation_id = models.BigIntegerField(null=True)
    department_id = models.BigIntegerField(null=True)
    raised_at = models.DateTimeField()

    class Meta:
        db_table = "custody_alarm"
        constraints = [models.UniqueConstraint(fields=["kind", "key"], name="custody_alarm_unique")]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"
