"""The utilisation tick: one row per allocation per 5-minute bucket (``AllocationUsage``).

``allocations_utilisation_tick`` reads the bucket that ended last (``now`` floored to 5 minutes,
minus 5 minutes) for every allocation that held devices during it (a reservation overlapping the
bucket, of an allocation whose interval overlaps it), and upserts its row on the unique key
(allocation, bucket_start, source): running it again for the same bucket writes the same rows.

Per cluster with a Prometheus (``Cluster.prometheus_url``) it sends the queries of
``telemetry.usage.queries`` (three, six with HAMi), evaluated at the bucket's end; then the node
agents' samples of the booked GPUs (the 5-minute tier, else the raw samples of the bucket) fill in
what the exporters do not cover, and are the only source of clusters without a Prometheus. A
Prometheus that fails or warns counts as no data for this bucket (logged), never as idle. Rows
older than GPUPORTAL_UTILISATION_RETENTION_DAYS are deleted. Metrics, not state changes: nothing
is audited.
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q

from allocations.models import Reservation, SharingMode
from clusters.dcgm import MIB
from clusters.models import Cluster, Gpu
from kernel.clock import clock_now
from kernel.locks import references_key_share
from telemetry import conf
from telemetry.models import AllocationUsage, GpuSample, NodeReportState, ObservedGpu, SampleTier
from telemetry.usage import queries
from telemetry.usage.attribution import AgentReading, Booking, ClusterReadings, Device, dcgm_readings, hami_readings
from telemetry.usage.prometheus import PrometheusClient, PrometheusError

log = logging.getLogger(__name__)

BUCKET = datetime.timedelta(seconds=queries.BUCKET_SECONDS)
TRIM_BATCH = 5000
_UPDATED = ["cluster", "department", "devices", "coverage", "activity", "granted_gpu_eq", "used_gpu_eq",
            "memory_used_bytes", "memory_granted_bytes"]  # fmt: skip


@dataclass
class TickOutcome:
    bucket_start: datetime.datetime
    rows: int = 0
    queries: int = 0
    trimmed: int = 0
    clusters: dict[str, str] = field(default_factory=dict)  # cluster name → what answered

    def as_dict(self) -> dict[str, Any]:
        return {"bucket_start": self.bucket_start.isoformat(), "rows": self.rows, "queries": self.queries,
                "trimmed": self.trimmed, "clusters": dict(self.clusters)}  # fmt: skip


@dataclass
class _Held:
    """An allocation's part of the bucket, gathered from its reservations."""

    cluster_id: int
    department_id: int
    booking: Booking
    units: set[int]
    gpu_equivalents: float
    memory_mib: int


def bucket_of(moment: datetime.datetime) -> datetime.datetime:
    """The start of the last 5-minute bucket that ended at or before ``moment``."""
    epoch = int(moment.timestamp())
    end = epoch - epoch % queries.BUCKET_SECONDS
    return datetime.datetime.fromtimestamp(end, tz=datetime.UTC) - BUCKET


def allocations_utilisation_tick(
    *, now: datetime.datetime | None = None, client_for: Callable[[Cluster], PrometheusClient] | None = None
) -> TickOutcome:
    """Write the utilisation rows of the bucket that just ended (see the module's docstring)."""
    moment = now or clock_now()
    start = bucket_of(moment)
    end = start + BUCKET
    outcome = TickOutcome(bucket_start=start)
    held = _held(start=start, end=end)
    node_ids = {device.node_id for item in held.values() for device in item.booking.devices}
    agent = _agent_readings(node_ids=node_ids, start=start, end=end)
    by_cluster: dict[int, list[tuple[int, _Held]]] = defaultdict(list)
    for allocation_id, item in held.items():
        by_cluster[item.cluster_id].append((allocation_id, item))
    min_coverage = conf.utilisation_min_coverage()
    rows: list[AllocationUsage] = []
    for cluster in Cluster.objects.filter(pk__in=list(by_cluster)).order_by("name"):
        readings = _cluster_readings(cluster, at=end, agent=agent, outcome=outcome, client_for=client_for)
        readings.resolve([item.booking for _id, item in by_cluster[cluster.pk]])
        for allocation_id, item in by_cluster[cluster.pk]:
            figures = readings.figures(item.booking, min_coverage=min_coverage)
            granted = round(item.gpu_equivalents * len(item.units), 6)
            rows.append(AllocationUsage(
                allocation_id=allocation_id, cluster_id=cluster.pk, department_id=item.department_id,
                bucket_start=start, source=figures.source, devices=figures.devices, coverage=figures.coverage,
                activity=figures.activity, granted_gpu_eq=granted,
                used_gpu_eq=round(figures.activity * granted, 6) if figures.activity is not None else None,
                memory_used_bytes=figures.memory_used_bytes, memory_granted_bytes=item.memory_mib * MIB * len(item.units),
            ))  # fmt: skip
    with transaction.atomic():
        # The keys of the rows (grant, cluster, department) are checked at COMMIT, row after row:
        # lock what they point to first, in the global order (kernel.locks), or the tick holds a
        # cluster's KEY SHARE while it waits for a department an approval holds (and the approval
        # waits for the cluster).
        references_key_share(transaction.get_connection(), rows)
        AllocationUsage.objects.bulk_create(
            rows, batch_size=1000, update_conflicts=True, unique_fields=["allocation", "bucket_start", "source"],
            update_fields=_UPDATED,
        )  # fmt: skip
    outcome.rows = len(rows)
    outcome.trimmed = allocation_usage_trim(now=moment)
    return outcome


def _held(*, start: datetime.datetime, end: datetime.datetime) -> dict[int, _Held]:
    """The allocations holding devices during [start, end), by id, with their bookings."""
    reservations = (
        Reservation.objects.filter(created_at__lt=end, allocation__starts_at__lt=end, allocation__ends_at__gt=start)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values_list(
            "allocation_id", "unit", "node_id", "node__cluster_id", "node__cluster__use_hami", "gpu_indices",
            "gpu_milli", "mig_profile", "mig_start", "allocation__project__slug", "allocation__project__department_id",
            "allocation__flavor__gpu_equivalents", "allocation__flavor__memory_mib", "allocation__flavor__sharing_mode",
            "allocation__flavor__compute_percent",
        )
        .order_by("allocation_id", "unit", "pk")
    )  # fmt: skip
    rows = list(reservations)
    uuids = _gpu_uuids(node_ids={row[2] for row in rows})
    held: dict[int, _Held] = {}
    devices: dict[int, dict[tuple[Any, ...], Device]] = defaultdict(dict)
    for (allocation_id, unit, node_id, cluster_id, use_hami, indices, milli, profile, mig_start, namespace, department_id,
         gpu_equivalents, memory_mib, sharing, compute_percent) in rows:  # fmt: skip
        hami = bool(use_hami) and sharing == SharingMode.VGPU
        item = held.get(allocation_id)
        if item is None:
            booking = Booking(allocation_id=allocation_id, namespace=namespace, devices=(), hami=hami,
                              compute_share=(compute_percent or 100) / 100)  # fmt: skip
            item = held[allocation_id] = _Held(
                cluster_id, department_id, booking, set(), float(gpu_equivalents), memory_mib
            )
        item.units.add(unit)
        for index in indices or []:
            device = Device(
                node_id=node_id, gpu_index=int(index), uuid=uuids.get((node_id, int(index)), ""), mig_profile=profile or "",
                mig_start=mig_start, shared=not profile and (milli or 0) < 1000,
            )  # fmt: skip
            devices[allocation_id].setdefault((node_id, int(index), profile, mig_start), device)
    for allocation_id, item in held.items():
        booking = item.booking
        item.booking = Booking(allocation_id, booking.namespace, tuple(devices[allocation_id].values()), booking.hami,
                               booking.compute_share)  # fmt: skip
    return held


def _gpu_uuids(*, node_ids: set[int]) -> dict[tuple[int, int], str]:
    """(node, GPU index) → UUID: the inventory's, else what the node's agent reported."""
    found: dict[tuple[int, int], str] = {}
    for node_id, index, uuid in ObservedGpu.objects.filter(node_id__in=node_ids, is_present=True).values_list(
        "node_id", "index", "uuid"
    ):
        found[(node_id, index)] = uuid
    for node_id, index, uuid in Gpu.objects.filter(node_id__in=node_ids).values_list("node_id", "index", "uuid"):
        if uuid:
            found[(node_id, index)] = uuid
    return found


def _agent_readings(
    *, node_ids: set[int], start: datetime.datetime, end: datetime.datetime
) -> dict[tuple[int, int], AgentReading]:
    """The node agents' readings of the bucket per (node, GPU index): the 5-minute mean when the
    roll-up made it, else the mean of the bucket's raw samples."""
    if not node_ids:
        return {}
    intervals = dict(NodeReportState.objects.filter(node_id__in=node_ids).values_list("node_id", "interval_seconds"))
    rolled: dict[tuple[int, int], tuple[int, float | None, float | None]] = {}
    raw: dict[tuple[int, int], list[tuple[float | None, float | None]]] = defaultdict(list)
    rows = (
        GpuSample.objects.filter(gpu__node_id__in=node_ids)
        .filter(Q(tier=SampleTier.FIVE_MINUTES, at=start) | Q(tier=SampleTier.RAW, at__gte=start, at__lt=end))
        .values_list("gpu__node_id", "gpu__index", "tier", "samples", "gpu_percent", "memory_used_bytes")
    )
    for node_id, index, tier, count, percent, memory in rows:
        if tier == SampleTier.FIVE_MINUTES:
            rolled[(node_id, index)] = (count, percent, memory)
        else:
            raw[(node_id, index)].append((percent, memory))
    for key, values in raw.items():
        if key not in rolled:
            percents = [percent for percent, _memory in values if percent is not None]
            memories = [memory for _percent, memory in values if memory is not None]
            rolled[key] = (len(percents), sum(percents) / len(percents) if percents else None,
                           sum(memories) / len(memories) if memories else None)  # fmt: skip
    return {
        (node_id, index): AgentReading(
            activity=percent / 100 if percent is not None else None, samples=count,
            expected=queries.BUCKET_SECONDS / max(1, intervals.get(node_id) or 30), memory_bytes=memory,
        )
        for (node_id, index), (count, percent, memory) in rolled.items()
    }  # fmt: skip


def _cluster_readings(
    cluster: Cluster, *, at: datetime.datetime, agent: dict[tuple[int, int], AgentReading], outcome: TickOutcome,
    client_for: Callable[[Cluster], PrometheusClient] | None,
) -> ClusterReadings:  # fmt: skip
    readings = ClusterReadings(
        measured=bool(cluster.prometheus_url), expected_samples=queries.BUCKET_SECONDS / conf.prometheus_scrape_seconds(),
        agent=agent,
    )  # fmt: skip
    if not cluster.prometheus_url:
        outcome.clusters[cluster.name] = "node agents only (no Prometheus)"
        return readings
    client = (
        client_for(cluster)
        if client_for is not None
        else PrometheusClient(cluster.prometheus_url, timeout=conf.prometheus_timeout())
    )
    notes: list[str] = []
    try:
        answers = _ask(client, queries.dcgm_queries(), at=at)
        if answers is None:
            notes.append("dcgm: Prometheus warned (no data)")
        else:
            readings.dcgm = dcgm_readings(answers["activity"], answers["coverage"], answers["memory"])
            generations = Counter(reading.generation() for reading in readings.dcgm.values() if reading.generation())
            notes.append(
                "dcgm: "
                + (", ".join(f"{name} ({count} devices)" for name, count in generations.most_common()) or "no series")
            )
        if cluster.use_hami:
            hami = _ask(client, queries.hami_queries(), at=at)
            readings.hami = (
                hami_readings(hami["activity"], hami["coverage"], hami["memory"]) if hami is not None else None
            )
            notes.append(
                f"hami: {len(readings.hami)} namespaces on devices"
                if readings.hami is not None
                else "hami: warned (no data)"
            )
    except PrometheusError as exc:
        log.warning("utilisation: cluster %s: %s", cluster.name, exc)
        notes.append(f"error: {exc}")
    finally:
        outcome.queries += client.queries
    outcome.clusters[cluster.name] = "; ".join(notes)
    return readings


def _ask(client: PrometheusClient, asked: dict[str, str], *, at: datetime.datetime) -> dict[str, Any] | None:
    """Each query's samples; None when the activity or coverage query warned (then the source has
    no data); a warned memory query leaves memory unknown."""
    answers: dict[str, Any] = {}
    for name, promql in asked.items():
        answers[name] = client.vector(promql, at=at)
        if answers[name] is None and name != "memory":
            return None
    return answers


def allocation_usage_trim(*, now: datetime.datetime | None = None) -> int:
    """Delete utilisation rows older than the retention, in batches."""
    cutoff = (now or clock_now()) - conf.utilisation_retention()
    total = 0
    while True:
        batch = list(AllocationUsage.objects.filter(bucket_start__lt=cutoff).values_list("id", flat=True)[:TRIM_BATCH])
        if not batch:
            return total
        total += AllocationUsage.objects.filter(id__in=batch).delete()[0]
