"""Live feedback for a GPU request: GPU-equivalents, quota left, and whether and where it fits.

The quota numbers are the display's (``allocations.admission.quota_checks``): what holds now, or
over the request's interval moment by moment, against the limits the quota windows leave (approval
decides again, ``allocations.admission.planning``); the physical fit from the placement engine's dry run
(``allocations.booking.preview``) on each cluster approval would try. Everything is read
without locks: it describes the moment, and approval decides again under locks. ``where`` names
the cluster, nodes and GPUs the engine would choose now.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal

from allocations.booking.preview import ClusterFit, placement_preview
from allocations.models import Flavor, PriorityClass
from allocations.quotas.usage import Span, quota_checks
from clusters.models import Cluster
from kernel.reads import SharedReads
from tenants.access import department_chain
from tenants.models import Project


@dataclass(frozen=True)
class QuotaSegment:
    """``[start, end)`` of the request's interval, during which what is held and the limit stay."""

    start: datetime.datetime
    end: datetime.datetime
    in_use: Decimal
    limit: Decimal  # the limit in force × the priority class's oversubscription factor


@dataclass(frozen=True)
class QuotaLine:
    """One quota on the request's department chain, at the moment with the least room: now, or over
    the request's interval (its segments: what holds when, never grants that do not overlap added up)."""

    department: str
    what: str  # "a100 units" or "GPU-equivalents"
    requested: Decimal
    in_use: Decimal
    limit: Decimal  # effective limit: the limit in force (windows applied) × the priority class's factor
    segments: tuple[QuotaSegment, ...] = ()  # over the request's interval; none for the instant now

    @property
    def left(self) -> Decimal:
        return self.limit - self.in_use

    @property
    def left_after(self) -> Decimal:
        return self.limit - self.in_use - self.requested

    @property
    def fits(self) -> bool:
        return self.left_after >= 0


ClusterLine = ClusterFit

FREE_COUNT_LIMIT = 32
"""Free units are counted by placing units one after another; past this many (or the request's
quantity, if larger) the count stops and is shown as "at least"."""


@dataclass(frozen=True)
class RequestFeedback:
    flavor: Flavor | None = None
    quantity: int | None = None
    gpu_equivalents: Decimal | None = None
    quota: list[QuotaLine] = field(default_factory=list)
    quota_checked: bool = False
    clusters: list[ClusterLine] = field(default_factory=list)
    clusters_checked: bool = False
    where: list[str] = field(default_factory=list)

    @property
    def fits_quota(self) -> bool:
        return self.quota_checked and bool(self.quota) and all(line.fits for line in self.quota)

    @property
    def fits_physically(self) -> bool:
        return any(line.fits for line in self.clusters)

    @property
    def complete(self) -> bool:
        return self.quota_checked and self.clusters_checked


def _quota_lines(
    *, project: Project, flavor: Flavor, quantity: int, priority_class: PriorityClass, reads: SharedReads,
    span: Span | None,
) -> list[QuotaLine]:
    chain, parents = reads.once(("department chain", project.department_id), department_chain,
                                department_id=project.department_id)
    factor = priority_class.oversubscription_factor
    checks = quota_checks(chain=chain, parents=parents, flavor=flavor, quantity=quantity, factor=factor, reads=reads,
                          span=span)
    return [
        QuotaLine(
            department=check.department,
            what=f"{check.flavor} units" if check.flavor else "GPU-equivalents",
            requested=check.requested,
            in_use=check.in_use,
            limit=check.effective_limit,
            segments=tuple(
                QuotaSegment(segment.start, segment.end, segment.in_use,
                             (segment.effective.limit * factor).quantize(Decimal("0.0001")))
                for segment in check.segments
            ) if span is not None else (),
        )
        for check in checks
    ]


def _cluster_lines(
    *, flavor: Flavor, quantity: int, cluster: Cluster | None, reads: SharedReads, project: Project | None
) -> list[ClusterLine]:
    return placement_preview(flavor=flavor, quantity=quantity, cluster=cluster, free_limit=FREE_COUNT_LIMIT, reads=reads,
                             project=project)


def request_feedback(
    *,
    project: Project | None,
    flavor: Flavor | None,
    quantity: int | None,
    priority_class: PriorityClass | None,
    cluster: Cluster | None,
    reads: SharedReads | None = None,
    span: Span | None = None,
) -> RequestFeedback:
    """Everything that can be said about a request from the fields filled in so far. A page that
    gives feedback on many requests passes one ``reads``, so that their shared reads run once.
    ``span``: the request's interval, when known (its quota lines are then over it, else now)."""
    if flavor is None or quantity is None or quantity < 1:
        return RequestFeedback(flavor=flavor, quantity=quantity)
    reads = reads if reads is not None else SharedReads()
    equivalents = flavor.gpu_equivalents_for(quantity)
    quota: list[QuotaLine] = []
    if project is not None and priority_class is not None:
        quota = _quota_lines(project=project, flavor=flavor, quantity=quantity, priority_class=priority_class,
                             reads=reads, span=span)
    clusters = _cluster_lines(flavor=flavor, quantity=quantity, cluster=cluster, reads=reads, project=project)
    first_fit = next((line for line in clusters if line.fits), None)
    where = [f"cluster {first_fit.cluster}: {first_fit.where_label}"] if first_fit else []
    return RequestFeedback(
        flavor=flavor,
        quantity=quantity,
        gpu_equivalents=equivalents,
        quota=quota,
        quota_checked=project is not None and priority_class is not None,
        clusters=clusters,
        clusters_checked=True,
        where=where,
    )
