"""Each GPU's busy fraction now: the utilisation overlay of the GPU map (``frontend.gpu_map``)."""

from __future__ import annotations

import datetime
import re
from collections import defaultdict
from dataclasses import dataclass

from django.http import Http404

from allocations.catalogue.selectors import live_reservations_on
from clusters.selectors import cluster_get
from kernel.clock import clock_now
from telemetry.models import ObservedGpu
from telemetry.utilisation_reads import ROW_SECONDS, User, chosen_usage, readable_departments

FRESH = datetime.timedelta(minutes=15)  # a bucket begun longer ago than this is not "now"
_MIG_COMPUTE = re.compile(r"^([1-7])g\.")
MIG_COMPUTE_SLICES = 7
LOW, HIGH = 30, 90  # per cent


@dataclass(frozen=True)
class GpuBusy:
    """A GPU's busy fraction now; ``ratio`` None: unknown (no fresh reading)."""

    ratio: float | None
    source: str = ""  # "agent": the node agent's reading of the GPU; "allocations": its holders' usage
    at: datetime.datetime | None = None

    @property
    def percent(self) -> int | None:
        return round(self.ratio * 100) if self.ratio is not None else None

    @property
    def level(self) -> str:
        """unknown; low (below 30 %: mostly idle); high (from the overload alert's 90 %); else mid.
        Read from the percentage shown, so that a GPU labelled 90 % is high."""
        if self.percent is None:
            return "unknown"
        return "low" if self.percent < LOW else "high" if self.percent >= HIGH else "mid"

    @property
    def label(self) -> str:
        return f"busy {self.percent} %" if self.percent is not None else "busy: unknown"


def _mig_share(profile: str) -> float:
    match = _MIG_COMPUTE.match(profile)
    return int(match.group(1)) / MIG_COMPUTE_SLICES if match else 1.0


def gpu_busy_overlay(*, user: User, cluster_id: int, now: datetime.datetime | None = None) -> dict[tuple[str, int], GpuBusy]:
    """Each GPU's busy fraction now, by (node name, GPU index), for those who read every department.

    From the node agent's newest reading of the GPU while the node's reports are fresh; else from
    the newest 5-minute bucket (begun within the last 15 minutes) of the allocations holding it: the sum of
    activity × compute share of its MIG instances, or for a whole or shared GPU the highest of its
    holders' activities (the exporters read a shared GPU as one device); unknown when any holder's
    newest bucket is unknown or too old, and for a free GPU without a reading. A booking that
    starts after ``now`` does not hold the GPU yet and counts for nothing. Four queries.
    """
    if readable_departments(user) is not None:
        raise Http404("Only those who read every department see the GPUs' activity.")
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    moment = now or clock_now()
    overlay: dict[tuple[str, int], GpuBusy] = {}
    for node, index, percent, seen, stale_at in ObservedGpu.objects.filter(
        node__cluster=cluster, is_present=True, gpu__isnull=False
    ).values_list("node__name", "gpu__index", "gpu_percent", "last_seen_at", "node__telemetry__stale_at"):
        if percent is not None and stale_at is not None and stale_at > moment:
            overlay[(node, index)] = GpuBusy(ratio=min(1.0, percent / 100), source="agent", at=seen)
    holders: dict[tuple[str, int], list[tuple[int, float | None]]] = defaultdict(list)
    # What holds the GPU now, as the map draws it: a booking that starts later (or has ended and
    # not yet expired) holds nothing now and has no reading, so it must not make the GPU unknown.
    for allocation_id, node, indices, profile in live_reservations_on(cluster=cluster).filter(
        allocation__starts_at__lte=moment, allocation__ends_at__gt=moment
    ).values_list("allocation_id", "node__name", "gpu_indices", "mig_profile"):
        for index in indices or []:
            holders[(node, int(index))].append((allocation_id, _mig_share(profile) if profile else None))
    newest: dict[int, tuple[float | None, datetime.datetime]] = {}
    wanted = {allocation_id for held in holders.values() for allocation_id, _share in held}
    for allocation_id, activity, bucket_start in (
        chosen_usage().filter(allocation_id__in=wanted, bucket_start__gte=moment - FRESH)
        .order_by("allocation_id", "-bucket_start").values_list("allocation_id", "activity", "bucket_start")
    ):  # fmt: skip
        newest.setdefault(allocation_id, (activity, bucket_start + datetime.timedelta(seconds=ROW_SECONDS)))
    for key, held in holders.items():
        if key in overlay:
            continue
        readings = [(newest.get(allocation_id, (None, None)), share) for allocation_id, share in held]
        if any(activity is None for (activity, _at_), _share in readings):
            overlay[key] = GpuBusy(ratio=None)
            continue
        shares = [(float(activity or 0), share) for (activity, _at_), share in readings]
        mig = [activity * share for activity, share in shares if share is not None]
        whole = [activity for activity, share in shares if share is None]
        ratio = min(1.0, sum(mig) + (max(whole) if whole else 0.0))
        oldest = min(at for (_activity, at), _share in readings if at is not None)
        overlay[key] = GpuBusy(ratio=ratio, source="allocations", at=oldest)
    return overlay
