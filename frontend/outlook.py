"""What approving a request would do now, as the portal says it: admitted or refused (and why),
the grants it would reclaim (whose, why, with how much notice) and when it would start.

Both the request form (before submitting) and the approver (before approving) ask
``allocations.admission.planning.admission_decide``, the function approval itself decides with, read
without locks: it describes the moment, and approval decides again under its locks.

A request that is not saved yet is asked about as an unsaved ``Allocation`` with primary key 0,
which no row has (ids start at 1). Not ``None``: admission counts a grant already reclaimed *for
the request* as promised to it (``reclaimed_for_id == allocation.pk``), and with ``None`` every
grant that is reclaimed for nobody would match, so the request would see no grant at all and
always fit.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from allocations.admission.planning import Decision, admission_decide
from allocations.admission.reasons import ReasonCode, refusal_reasons
from allocations.booking.preview import candidate_clusters, preview_states
from allocations.booking.reservations import placement_workload
from allocations.models import Allocation, AllocationState, Flavor, PriorityClass
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.reads import SharedReads
from kernel.words import counted
from tenants.access import access_for
from tenants.models import Department, Project

User = AbstractBaseUser | AnonymousUser

UNSAVED_PK = 0
"""The primary key of a request asked about before it is saved (see the module docstring)."""

WHY_LABELS = {
    "borrowed": "borrowed beyond its department's guarantee",
    "oversubscribed": "held beyond a department's limit",
    "lower-priority": "lower priority than this request",
}


@dataclass(frozen=True)
class ReclaimLine:
    """One grant approval would take."""

    allocation_id: int
    project: str
    department: str
    flavor: str
    quantity: int
    priority_class: str
    state: str
    why: str  # borrowed, oversubscribed, lower-priority
    notice_minutes: int
    readable: bool  # the viewer may open it (its department is theirs to read)
    other_department: bool  # not the request's own department
    units: int | None = None  # how many of its units go (None: all of them)
    own: bool = False  # the viewer requested it

    @property
    def why_label(self) -> str:
        return WHY_LABELS.get(self.why, self.why)

    @property
    def notice_label(self) -> str:
        """How long it keeps running: a grant that has not started, or a preemptible one, goes at once."""
        if self.notice_minutes <= 0 or self.state == AllocationState.SCHEDULED:
            return "reclaimed at once"
        return f"runs {counted(self.notice_minutes, 'more minute')}"

    @property
    def label(self) -> str:
        part = f"{self.units} of its " if self.units is not None and self.units < self.quantity else ""
        return (f"#{self.allocation_id} {part}{self.quantity} × {self.flavor} of {self.project} "
                f"(department {self.department}, {self.priority_class}): {self.why_label}; {self.notice_label}")


@dataclass(frozen=True)
class AdmissionOutlook:
    admitted: bool
    reclaim: list[ReclaimLine] = field(default_factory=list)
    refusal: str = ""  # why approval would be refused now (empty when admitted)
    refusal_code: str = ""
    starts: str | None = None  # now, at-start, after-notice (admitted only)
    reason_code: str = ""  # why it waits, as docs/pending.md codes it (read off the same decision)

    @property
    def needs_confirmation(self) -> bool:
        """A request that would take others' grants, or that cannot be approved as things stand."""
        return bool(self.reclaim) or not self.admitted

    @property
    def summary(self) -> str:
        if not self.admitted:
            return f"As things stand, approval would be refused: {self.refusal}"
        if not self.reclaim:
            return "Approval would reclaim nothing: it fits within the quotas and on the GPUs."
        count = len(self.reclaim)
        whose = " from other departments" if all(line.other_department for line in self.reclaim) else ""
        return f"Approval would reclaim {counted(count, 'grant')}{whose}"

    @property
    def starts_label(self) -> str:
        return {
            "now": "It would reach the cluster at once.",
            "at-start": "It would wait, scheduled, for its start.",
            "after-notice": "It would start once the grants it reclaims have run out their notice.",
        }.get(self.starts or "", "")

    @property
    def confirmation_label(self) -> str:
        if not self.admitted:
            return ("I understand that, as things stand, this request cannot be approved; "
                    "submit it anyway for my department admin to decide.")
        if all(line.own for line in self.reclaim):
            return "I understand that approving this request would take my own grants listed."
        if any(line.own for line in self.reclaim):
            return ("I understand that approving this request would take the grants listed: mine, and others' "
                    "from the people who hold them.")
        return "I understand that approving this request would take the grants listed from the people who hold them."


def _outlook(*, user: User, allocation: Allocation, decision: Decision) -> AdmissionOutlook:
    refusal = decision.refusal
    if refusal is not None:
        return AdmissionOutlook(admitted=False, refusal=refusal.message, refusal_code=refusal.code,
                                reason_code=refusal_reasons(refusal)[0].code.value)
    access = access_for(user)
    slugs = {victim.department for victim in decision.victims}
    ids = dict(Department.objects.filter(slug__in=slugs).values_list("slug", "pk")) if slugs else {}
    own = allocation.project.department_id
    requesters = dict(Allocation.objects.filter(pk__in=[victim.allocation_id for victim in decision.victims])
                      .values_list("pk", "requested_by_id")) if decision.victims else {}
    lines = [
        ReclaimLine(
            allocation_id=victim.allocation_id, project=victim.project, department=victim.department,
            flavor=victim.flavor, quantity=victim.quantity, priority_class=victim.priority_class, state=victim.state,
            why=victim.why, notice_minutes=victim.notice_minutes,
            readable=victim.department in ids and access.can_read_department(ids[victim.department]),
            other_department=ids.get(victim.department) != own, units=victim.gives_back,
            own=user.pk is not None and requesters.get(victim.allocation_id) == user.pk,
        )
        for victim in decision.victims
    ]
    # As the placement preview API says it (allocations/api/preview.py).
    waits = any(line.notice_minutes > 0 and line.state != AllocationState.SCHEDULED for line in lines)
    starts = "after-notice" if waits else ("at-start" if allocation.starts_at > clock_now() else "now")
    return AdmissionOutlook(admitted=True, reclaim=lines, starts=starts, reason_code=ReasonCode.AWAITING_DECISION.value)


@dataclass(frozen=True)
class Admission:
    """A request and the decision approval would make on it now: a page's outlook and its quota
    lines (``frontend.feedback``) are both read from this one decision, so they cannot disagree."""

    allocation: Allocation
    decision: Decision


def admission_read(*, allocation: Allocation, reads: SharedReads | None = None) -> Admission:
    """What approving this request would do now (a pending allocation, after ``allocation_get``, or
    ``request_allocation``'s unsaved one). A fixed number of queries: a few for the quota tree and
    the grants, three per candidate cluster. ``reads`` shares the clusters' kept placement states
    and the workload with the placement preview of the same page."""
    if reads is None:
        clusters = list(candidate_clusters(flavor=allocation.flavor, cluster=allocation.cluster))
        decision = admission_decide(allocation=allocation, clusters=clusters)
    else:
        clusters, states = preview_states(flavor=allocation.flavor, cluster=allocation.cluster, reads=reads)
        workload = reads.once(("workload", allocation.flavor.pk), placement_workload, include=allocation.flavor)
        decision = admission_decide(allocation=allocation, clusters=clusters, states=states, workload=workload,
                                    reads=reads)
    return Admission(allocation=allocation, decision=decision)


def outlook_of(*, user: User, admission: Admission) -> AdmissionOutlook:
    """The outlook of a decision read with ``admission_read``, as ``user`` may see it."""
    return _outlook(user=user, allocation=admission.allocation, decision=admission.decision)


def admission_outlook(*, user: User, allocation: Allocation, reads: SharedReads | None = None) -> AdmissionOutlook:
    """What approving this pending allocation would do now (call after ``allocation_get``)."""
    return outlook_of(user=user, admission=admission_read(allocation=allocation, reads=reads))


def request_allocation(
    *,
    project: Project,
    flavor: Flavor,
    quantity: int,
    priority_class: PriorityClass,
    cluster: Cluster | None,
    span: tuple[datetime.datetime | None, datetime.datetime],
) -> Allocation:
    """A request with these fields over ``span`` (its start, None for now, and its end), before it is
    submitted: unsaved, to ask ``admission_read`` about."""
    starts_at, ends_at = span
    start = starts_at or clock_now()
    return Allocation(
        pk=UNSAVED_PK, project=project, flavor=flavor, quantity=quantity, priority_class=priority_class,
        cluster=cluster, starts_at=start, ends_at=max(ends_at, start + datetime.timedelta(minutes=1)),
        state=AllocationState.PENDING,
    )


def request_outlook(
    *,
    user: User,
    project: Project,
    flavor: Flavor,
    quantity: int,
    priority_class: PriorityClass,
    cluster: Cluster | None,
    starts_at: datetime.datetime | None,
    ends_at: datetime.datetime,
    reads: SharedReads | None = None,
) -> AdmissionOutlook:
    """What approving a request with these fields would do now, before it is submitted."""
    allocation = request_allocation(project=project, flavor=flavor, quantity=quantity, priority_class=priority_class,
                                    cluster=cluster, span=(starts_at, ends_at))
    return admission_outlook(user=user, allocation=allocation, reads=reads)
