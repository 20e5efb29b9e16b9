"""The GPU inventory: clusters, their nodes and each node's GPUs."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from clusters.mig_layout import is_pinned_layout
from kernel.clock import clock_now
from tenants.models import NAMESPACE_SLUG_VALIDATOR


class ClusterDriverKind(models.TextChoices):
    MANIFESTS = "manifests", "Manifests folder (GitOps / embedded default)"
    KUBERNETES = "kubernetes", "Kubernetes API (server-side apply)"


class Cluster(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[NAMESPACE_SLUG_VALIDATOR])
    display_name = models.CharField(max_length=200, blank=True)
    driver = models.CharField(max_length=16, choices=ClusterDriverKind.choices, default=ClusterDriverKind.MANIFESTS)
    is_active = models.BooleanField(default=True)
    # Encrypted at rest (clusters.crypto); written only through cluster_kubeconfig_set, never returned.
    kubeconfig_encrypted = models.BinaryField(blank=True, default=b"", editable=False)
    use_hami = models.BooleanField(
        default=False, help_text="HAMi schedules nvidia.com/gpu: quotas also carry limits.nvidia.com/gpumem and gpucores."
    )
    use_volcano = models.BooleanField(default=False, help_text="Render a Volcano Queue per department.")
    pin_bookings = models.BooleanField(
        default=True,
        help_text=(
            "Pods of a project run only on the nodes (and, under HAMi, the GPUs) its allocations booked: node labels "
            "and admission policies (needs Kubernetes 1.36 or later: MutatingAdmissionPolicy v1)."
        ),
    )
    # The memory kept free on every shared GPU (MPS, time-slicing, HAMi and Volcano vGPU): a share of
    # the GPU's memory plus an amount per unit sharing it (docs/sharing.md). A flavor may override both.
    sharing_reserve_percent = models.PositiveSmallIntegerField(
        default=15, validators=[MaxValueValidator(90)],
        help_text="Percent of a shared GPU's memory that no unit may book.",
    )
    sharing_reserve_per_unit_mib = models.PositiveIntegerField(
        default=200, validators=[MaxValueValidator(65536)],
        help_text="MiB of a shared GPU's memory kept free for each unit sharing it (CUDA context overhead).",
    )
    gpu_operator_namespace = models.CharField(
        max_length=63, default="gpu-operator", validators=[NAMESPACE_SLUG_VALIDATOR],
        help_text="Namespace of the device-plugin and MIG-manager ConfigMaps.",
    )
    # Monitoring (docs/observability.md): where the cluster's Prometheus answers queries (the
    # utilisation tick reads dcgm-exporter's series there), and whether the portal pushes its
    # PrometheusRule (the Prometheus Operator's kind) and into which namespace, with which labels
    # (the Prometheus's ruleSelector must match them).
    prometheus_url = models.URLField(
        max_length=500, blank=True,
        help_text="Prometheus HTTP API base URL (e.g. http://prometheus.monitoring:9090); empty: utilisation from the node agents only.",
    )
    prometheus_rule_namespace = models.CharField(
        max_length=63, blank=True, validators=[NAMESPACE_SLUG_VALIDATOR],
        help_text="Namespace the portal's PrometheusRule is applied to; empty: no PrometheusRule is pushed.",
    )
    prometheus_rule_labels = models.JSONField(
        default=dict, blank=True, help_text="Extra labels of the PrometheusRule, matched by the Prometheus's ruleSelector."
    )
    # How users reach the cluster with kubectl (docs/using.md): the API server's address as users
    # see it, its CA and the OIDC client the API server trusts. All three of URL, issuer and client
    # set: the allocation page shows a kubelogin snippet; else it says to ask the platform team.
    user_api_server_url = models.URLField(
        max_length=500, blank=True, help_text="The API server's URL as users reach it (https://...); empty: not shown.",
    )
    user_ca_certificate = models.TextField(
        max_length=20000, blank=True, help_text="PEM CA certificate of the API server users reach (empty: their trust store).",
    )
    user_oidc_issuer_url = models.URLField(
        max_length=500, blank=True, help_text="OIDC issuer the API server trusts (its --oidc-issuer-url).",
    )
    user_oidc_client = models.CharField(
        max_length=200, blank=True, help_text="OIDC client id users sign in with (the API server's --oidc-client-id).",
    )
    last_sync_at = models.DateTimeField(null=True, blank=True)
    # Moved forward by every change of the cluster's reservations, in the change's transaction
    # (allocations.booking.state: the placement state each process keeps is brought up to it).
    placement_version = models.BigIntegerField(default=0, editable=False)
    # Pushes that ended in an error, ever (the counter behind gpuportal_cluster_push_failures_total).
    push_failures = models.PositiveBigIntegerField(default=0, editable=False)
    last_sync_error = models.TextField(blank=True)
    last_drift_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def has_kubeconfig(self) -> bool:
        return bool(self.kubeconfig_encrypted)


class NodeSharing(models.TextChoices):
    """How a node's whole GPUs are offered: one mode per node (the device plugin's rule)."""

    EXCLUSIVE = "exclusive", "Whole GPUs"
    TIMESLICE = "timeslice", "Time-slicing replicas"
    MPS = "mps", "CUDA MPS replicas"
    MIG = "mig", "MIG partitions (mixed strategy)"


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    cpu_millicores = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    is_schedulable = models.BooleanField(default=True)
    sharing = models.CharField(max_length=16, choices=NodeSharing.choices, default=NodeSharing.EXCLUSIVE)
    sharing_replicas = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Replicas per GPU (mps, timeslice).")
    # The chosen MIG layout, as mig-parted groups: [{"devices": [0, 1], "mig-devices": {"1g.10gb": 7}}].
    # Empty: the layout the placement engine booked (reservations), see delivery.selectors.node_plans.
    mig_layout = models.JSONField(default=list, blank=True)
    # What the node agent last reported (telemetry keeps them current): flavors with minimums are
    # offered only on nodes that meet them.
    driver_version = models.CharField(max_length=80, blank=True, help_text="NVIDIA driver version the node agent reported.")
    cuda_version = models.CharField(max_length=16, blank=True, help_text="CUDA driver API version the node agent reported.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Moved forward by database triggers whenever the row or one of its GPUs changes, however it is
    # written (clusters/stamps.py): how a kept placement state sees the inventory move.
    inventory_stamp = models.BigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name_per_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"

    def clean(self) -> None:
        """The combinations the NVIDIA device plugin accepts (gpu-sharing-formats.md §1)."""
        shared = self.sharing in (NodeSharing.MPS, NodeSharing.TIMESLICE)
        if shared and (self.sharing_replicas is None or self.sharing_replicas < 2):
            raise ValidationError({"sharing_replicas": "MPS and time-slicing need at least 2 replicas per GPU."})
        if self.sharing == NodeSharing.MPS and self.sharing_replicas is not None and self.sharing_replicas > 48:
            raise ValidationError({"sharing_replicas": "The MPS control daemon accepts at most 48 replicas per GPU."})
        if not shared and self.sharing_replicas is not None:
            raise ValidationError({"sharing_replicas": "Only MPS and time-slicing nodes have replicas."})
        if self.mig_layout and self.sharing != NodeSharing.MIG:
            raise ValidationError({"mig_layout": "Only MIG nodes have a MIG layout."})
        if not is_pinned_layout(self.mig_layout):
            raise ValidationError(
                {"mig_layout": 'A list of {"devices": "all" or [indexes], "mig-devices": {"1g.10gb": 7, ...}} entries.'}
            )
        self._refuse_reconfiguring_booked_gpus()

    def _refuse_reconfiguring_booked_gpus(self) -> None:
        """GPU reservations were placed for the current configuration: changing how the node
        offers its GPUs under them would strand or double-book them."""
        if self.pk is None:
            return
        stored = Node.objects.filter(pk=self.pk).values("sharing", "sharing_replicas", "mig_layout").first()
        if stored is None:
            return
        changed = [name for name, value in stored.items() if getattr(self, name) != value]
        if not changed:
            return
        booked = self.reservations.filter(released_at__isnull=True).count()
        if booked:
            raise ValidationError(
                {changed[0]: f"Node {self.name} holds {booked} live GPU reservations; release them or move them "
                             "with placement_defrag before changing how its GPUs are offered."}
            )


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100)
    memory_mib = models.PositiveIntegerField()
    mig_capable = models.BooleanField(default=False)
    uuid = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["node__cluster__name", "node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node}/gpu{self.index} {self.model}"


class PushState(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ClusterPush(models.Model):
    """The transactional outbox: one row per change that must reach a cluster.

    Written in the transaction of the change itself, so a push can be late but never lost; a
    worker claims it (``claimed_until`` is its lease), applies, and records the outcome here.
    ``project`` empty means the cluster-wide objects (priority classes, queues, node configs).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pushes")
    project = models.ForeignKey("tenants.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    allocation = models.ForeignKey(
        "allocations.Allocation", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    state = models.CharField(max_length=16, choices=PushState.choices, default=PushState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    available_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # The clock's now, as every other instant of a push (``_succeeded`` compares it with a delivery's start).
    created_at = models.DateTimeField(default=clock_now, editable=False)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["state", "available_at"]), models.Index(fields=["cluster", "project", "state"])]

    def __str__(self) -> str:
        return f"push #{self.pk} {self.cluster_id}/{self.project_id or 'cluster'} {self.state}"


class ClusterDrift(models.Model):
    """An object found changed by hand on a cluster, and re-applied."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="drifts")
    kind = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    change = models.CharField(max_length=16)  # missing | changed
    fields = models.JSONField(default=list, blank=True)
    detected_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-detected_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.kind} {self.namespace}/{self.name} {self.change}"


class AppliedObject(models.Model):
    """A cluster-wide object as the portal last applied it: the hash of the inputs it was rendered
    from (``delivery.applied``). A push renders and applies only the objects whose inputs hash
    differently from this row, or that have none. The row is removed before its object is applied
    again and written after the apply succeeded, so a failed or interrupted apply leaves no row and
    the next push compares that object with the cluster. Hand edits on the cluster do not touch
    it: the periodic drift check compares everything with the cluster and rewrites these rows."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    input_hash = models.CharField(max_length=64)
    applied_at = models.DateTimeField(default=clock_now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind", "namespace", "name"], name="applied_object_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.kind} {self.namespace}/{self.name} {self.input_hash[:12]}"


class PendingPodsRead(models.Model):
    """The last read of what waits in one tenant namespace (``delivery.pending_pods``): how many
    pods (or refused controllers) wait there by pod reason code (docs/pending.md). The metric
    ``gpuportal_pending_pods{reason}`` sums these rows, so a scrape never calls a cluster."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    counts = models.JSONField(default=dict, blank=True)
    read_at = models.DateTimeField(default=clock_now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace"], name="pending_pods_read_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.namespace} {self.counts}"
