"""The platform overview: what a platform admin checks first, on one page. Each cluster with its
health (sync, deliveries, node reports), its allocation and how busy its GPUs are now; the
decisions waiting, with their counts; the failed pushes; and the signals of trouble the portal
has. The portal receives no firing alerts (Prometheus and Alertmanager send those elsewhere:
docs/observability.md), so the signals are its own: sync errors, failed pushes, nodes whose
reports stopped, failed allocations.

Every read goes through the selectors of the apps that own the data, with a fixed number of
queries whatever the number of rows (``tests/foundation/test_query_budgets.py``); the busy
reading costs a fixed number per active cluster (``telemetry.gpu_busy``), as the GPU map does."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.models import User
from django.db.models import Count, F, Q, QuerySet, Sum

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation
from allocations.models.rule_changes import RuleChangeState
from allocations.models.windows import WindowState
from allocations.rules.changes import rule_change_list
from allocations.windows.services import quota_window_list
from clusters.models import ClusterPush, PushState
from clusters.selectors import cluster_list
from frontend.selectors import ClusterHealth, cluster_health_list, pending_changes_for_decision, pending_for_decision
from frontend.utilisation import percent
from telemetry.gpu_busy import gpu_busy_overlay
from telemetry.models import NodeReportState

FAILED_SHOWN = 10


@dataclass(frozen=True)
class ClusterOverview:
    health: ClusterHealth
    reporting: int  # nodes whose agent has reported at least once
    stale: int  # of those, nodes whose reports stopped
    held: Decimal  # GPU-equivalents the grants holding now hold on it
    busy: float | None  # mean busy fraction of the GPUs with a reading now; None: no reading
    busy_read: int  # GPUs with a reading now

    @property
    def allocated(self) -> float | None:
        """The share of its GPUs held now (None: it has no GPU)."""
        return min(1.0, float(self.held) / self.health.gpus) if self.health.gpus else None

    @property
    def allocated_text(self) -> str:
        return percent(self.allocated)

    @property
    def busy_text(self) -> str:
        return percent(self.busy)

    @property
    def status(self) -> str:
        """The sync health, with nodes that stopped reporting above a push still on its way."""
        if self.stale and self.health.status not in ("error", "inactive"):
            return "stale nodes"
        return self.health.status


@dataclass(frozen=True)
class PendingDecisions:
    requests: int
    changes: int
    rule_changes: int
    windows: int

    @property
    def total(self) -> int:
        return self.requests + self.changes + self.rule_changes + self.windows


@dataclass(frozen=True)
class Signal:
    """One sign of trouble, with where to look."""

    text: str
    cluster_id: int | None = None


@dataclass(frozen=True)
class PlatformOverview:
    clusters: list[ClusterOverview]
    pending: PendingDecisions
    failed_pushes: list[ClusterPush]
    failed_push_count: int
    signals: list[Signal]


def _node_reports(cluster_ids: list[int], now: datetime.datetime) -> dict[int, tuple[int, int]]:
    """Cluster id → (nodes reporting, of them stale now), in one grouped query."""
    rows = (NodeReportState.objects.filter(node__cluster_id__in=cluster_ids).values("node__cluster_id")
            .annotate(reporting=Count("pk"), stale=Count("pk", filter=Q(is_stale=True) | Q(stale_at__lte=now)))
            .order_by())  # fmt: skip
    return {row["node__cluster_id"]: (row["reporting"], row["stale"]) for row in rows}


def _held(cluster_ids: list[int], now: datetime.datetime) -> dict[int, Decimal]:
    """Cluster id → GPU-equivalents held there now, in one grouped query."""
    rows = (Allocation.objects.filter(cluster_id__in=cluster_ids, state__in=HOLDING_STATES, starts_at__lte=now,
                                      ends_at__gt=now)
            .values("cluster_id").annotate(held=Sum(F("quantity") * F("flavor__gpu_equivalents"))).order_by())  # fmt: skip
    return {row["cluster_id"]: Decimal(row["held"] or 0) for row in rows}


def _busy(*, user: User, health: ClusterHealth, now: datetime.datetime) -> tuple[float | None, int]:
    """The mean busy fraction of an active cluster's GPUs with a reading now, and how many."""
    if not health.cluster.is_active or not health.gpus:
        return None, 0
    ratios = [busy.ratio for busy in gpu_busy_overlay(user=user, cluster_id=health.cluster.pk, now=now).values()
              if busy.ratio is not None]
    return (sum(ratios) / len(ratios) if ratios else None), len(ratios)


def cluster_overviews(*, user: User, now: datetime.datetime) -> list[ClusterOverview]:
    healths = cluster_health_list(user=user)
    ids = [health.cluster.pk for health in healths]
    reports, held = _node_reports(ids, now), _held(ids, now)
    rows = []
    for health in healths:
        reporting, stale = reports.get(health.cluster.pk, (0, 0))
        busy, read = _busy(user=user, health=health, now=now)
        rows.append(ClusterOverview(health=health, reporting=reporting, stale=stale,
                                    held=held.get(health.cluster.pk, Decimal(0)), busy=busy, busy_read=read))
    return rows


def pending_decisions(*, user: User) -> PendingDecisions:
    return PendingDecisions(
        requests=pending_for_decision(user=user).count(),
        changes=pending_changes_for_decision(user=user).count(),
        rule_changes=rule_change_list(user=user, state=RuleChangeState.PENDING).count(),
        windows=quota_window_list(user=user, state=WindowState.PENDING).count(),
    )


def failed_pushes(*, user: User) -> QuerySet[ClusterPush]:
    """The failed deliveries to the clusters ``user`` reads, newest first."""
    return (ClusterPush.objects.filter(cluster__in=cluster_list(user=user).values("pk"), state=PushState.FAILED)
            .select_related("cluster", "project").order_by("-pk"))  # fmt: skip


def signals_of(clusters: list[ClusterOverview]) -> list[Signal]:
    """The signs of trouble the portal has, cluster by cluster."""
    found: list[Signal] = []
    for row in clusters:
        cluster, name = row.health.cluster, row.health.cluster.display_name or row.health.cluster.name
        if not cluster.is_active:
            continue
        if cluster.last_sync_error:
            found.append(Signal(f"{name}: the last sync failed: {cluster.last_sync_error[:200]}", cluster.pk))
        if row.health.pushes_failed:
            found.append(Signal(f"{name}: {row.health.pushes_failed} failed push(es)", cluster.pk))
        if row.stale:
            found.append(Signal(f"{name}: {row.stale} of {row.reporting} node(s) stopped reporting", cluster.pk))
        if row.health.failed:
            found.append(Signal(f"{name}: {row.health.failed} allocation(s) failed to reach it", cluster.pk))
    return found


def platform_overview(*, user: User, now: datetime.datetime) -> PlatformOverview:
    clusters = cluster_overviews(user=user, now=now)
    failed = failed_pushes(user=user)
    return PlatformOverview(
        clusters=clusters, pending=pending_decisions(user=user), failed_pushes=list(failed[:FAILED_SHOWN]),
        failed_push_count=sum(row.health.pushes_failed for row in clusters), signals=signals_of(clusters),
    )
