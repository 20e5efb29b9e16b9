"""Live feedback for a GPU request: GPU-equivalents, quota left, and whether and where it fits.

The quota lines are a view of the decision approval would make on the request now
(``allocations.admission.planning.admission_decide``, read by ``frontend.outlook.admission_read``):
its checks over the request's own interval, each with the verdict that decision reached on it
(``Decision.quota_fits``), and the segments of what holds within it. The page's "On approval"
outlook reads the same decision, so the two cannot disagree; no other rule says whether a quota is
exceeded, and a request whose dates are not known yet has no quota lines. The physical fit comes
from the placement engine's dry run (``allocations.booking.preview``) on each cluster approval
would try. Everything is read without locks: it describes the moment, and approval decides again
under locks. ``where`` names the cluster, nodes and GPUs the engine would choose now.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from allocations.booking.preview import ClusterFit, placement_preview
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Flavor
from allocations.quotas.usage import DecidedReads, checks_with_segments
from allocations.quotas.wording import counted_words
from clusters.models import Cluster
from frontend.outlook import Admission, admission_read
from kernel.reads import SharedReads
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
    """One of the decision's quota checks: the numbers of its binding step (the moment of the
    request's interval with the least room), the decision's verdict on it, and its segments (what
    holds when, never grants that do not overlap added up)."""

    department: str
    what: str  # "a100 units", "GPU-equivalents", or "gpu-preemptible's share of a100 units"
    requested: Decimal
    in_use: Decimal  # what admission counts in the binding step (the grants it would reclaim left out)
    limit: Decimal  # effective limit: the limit in force (windows applied) × the priority class's factor
    fits: bool  # the decision's verdict (Decision.quota_fits), not worked out again here
    segments: tuple[QuotaSegment, ...] = ()

    @property
    def left(self) -> Decimal:
        return self.limit - self.in_use

    @property
    def left_after(self) -> Decimal:
        return self.limit - self.in_use - self.requested


ClusterLine = ClusterFit

FREE_COUNT_LIMIT = 32
"""Free units are those that placing units one after another would book (counted without placing
them where the engine can, ``placement.placing.free_units``); past this many (or the request's
quantity, if larger) the count stops and is shown as "at least"."""


@dataclass(frozen=True)
class RequestFeedback:
    flavor: Flavor | None = None
    quantity: int | None = None
    gpu_equivalents: Decimal | None = None
    quota: list[QuotaLine] = field(default_factory=list)
    quota_refusal: str = ""  # the decision refused it before any quota line (no quota, a project's cap)
    reclaims: bool = False  # the decision fits it by reclaiming grants: its lines count them as gone
    clusters: list[ClusterLine] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    admission: Admission | None = field(default=None, compare=False)  # the decision the quota lines show

    @property
    def quota_checked(self) -> bool:
        return self.admission is not None


def _what(check: dict[str, Any]) -> str:
    return counted_words(check["flavor"], check.get("priority_class"))


def _decided(admission: Admission) -> DecidedReads | None:
    """What the request's decision read (``Decision.decided``), so that its quota lines read none
    of it again; None (read them) when it has none, or when the request holds itself: the
    decision leaves the request's own grant out, and the segments count it."""
    allocation, decided = admission.allocation, admission.decision.decided
    if decided is None or (allocation.pk is not None and allocation.state in HOLDING_STATES):
        return None
    return decided


def quota_lines(admission: Admission) -> list[QuotaLine]:
    """The quota lines of a request: its decision's checks, each with the decision's verdict."""
    allocation, decision = admission.allocation, admission.decision
    if not decision.checks:
        return []
    factor = allocation.priority_class.oversubscription_factor
    timed = checks_with_segments(allocation=allocation, checks=decision.checks, decided=_decided(admission))
    return [
        QuotaLine(
            department=str(check["department"]), what=_what(check), requested=Decimal(check["requested"]),
            in_use=Decimal(check["in_use"]), limit=Decimal(check["effective_limit"]), fits=fits,
            segments=tuple(
                QuotaSegment(segment["from"], segment["until"], Decimal(segment["in_use"]),
                             (Decimal(segment["limit"]) * factor).quantize(Decimal("0.0001")))
                for segment in check["segments"]
            ),
        )
        for check, fits in zip(timed, decision.quota_fits, strict=True)
    ]


def _quota_refusal(admission: Admission, lines: list[QuotaLine]) -> str:
    """Why the decision refused the request before any quota line (no quota, a project's cap)."""
    found = admission.decision.refusal
    return found.message if found is not None and not lines else ""


def decision_feedback(admission: Admission) -> RequestFeedback:
    """The quota part of a request's feedback, from its decision alone: no dry run, for a page that
    shows where the request fits already (a row of the approvals queue read on its own)."""
    allocation = admission.allocation
    lines = quota_lines(admission)
    return RequestFeedback(
        flavor=allocation.flavor, quantity=allocation.quantity,
        gpu_equivalents=allocation.flavor.gpu_equivalents_for(allocation.quantity), quota=lines,
        quota_refusal=_quota_refusal(admission, lines), reclaims=bool(admission.decision.victims), admission=admission,
    )


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
    cluster: Cluster | None,
    reads: SharedReads | None = None,
    request: Allocation | None = None,
    admission: Admission | None = None,
) -> RequestFeedback:
    """Everything that can be said about a request from the fields filled in so far. A page that
    gives feedback on many requests passes one ``reads``, so that their shared reads run once.
    ``request``: the request as approval would see it, once every field that approval depends on
    parses (a pending allocation, or ``frontend.outlook.request_allocation``'s unsaved one): the
    decision approval would make on it is read after the dry run, whose placements it reuses, and
    its checks are the quota lines (``admission``: that decision, when the caller read it already)."""
    if flavor is None or quantity is None or quantity < 1:
        return RequestFeedback(flavor=flavor, quantity=quantity)
    reads = reads if reads is not None else SharedReads()
    equivalents = flavor.gpu_equivalents_for(quantity)
    clusters = _cluster_lines(flavor=flavor, quantity=quantity, cluster=cluster, reads=reads, project=project)
    first_fit = next((line for line in clusters if line.fits), None)
    where = [f"cluster {first_fit.cluster}: {first_fit.where_label}"] if first_fit else []
    if admission is None and request is not None:
        admission = admission_read(allocation=request, reads=reads)
    lines: list[QuotaLine] = []
    refusal = ""
    if admission is not None:
        lines = quota_lines(admission)
        refusal = _quota_refusal(admission, lines)
    return RequestFeedback(
        flavor=flavor,
        quantity=quantity,
        gpu_equivalents=equivalents,
        quota=lines,
        quota_refusal=refusal,
        reclaims=admission is not None and bool(admission.decision.victims),
        clusters=clusters,
        where=where,
        admission=admission,
    )
