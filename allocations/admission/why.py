"""Why a request is still waiting, and until when (docs/pending.md): one answer for a request
made (``allocation_why``) or not yet made (``request_simulate``), both read-only.

It is assembled around one call of admission (``planning.admission_decide``): the reasons are read
off its verdict (``reasons``), the quota lines are its checks (every level on the department's
chain, the parent's included) with the limit in force now beside the one over the interval, and
the alternatives and the estimate are admission's verdicts on the request changed or moved
(``why_alternatives``, ``why_estimate``). Who holds the capacity in the way is told as far as the
reader may see (``why_holders``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User

from allocations.admission import reasons as why_reasons
from allocations.admission.headroom import QuotaLevel, quota_chains
from allocations.admission.planning import Decision, admission_decide, admission_reads
from allocations.admission.reasons import Reason, ReasonCode, Verdict
from allocations.admission.why_alternatives import alternatives_find
from allocations.admission.why_estimate import RELIABILITY, Estimate, earliest_start
from allocations.admission.why_holders import holders_read
from allocations.admission.why_queue import queue_position
from allocations.admission.why_windows import outside_window
from allocations.booking.preview import candidate_clusters
from allocations.booking.reservations import placement_workload
from allocations.booking.state import ClusterState, cluster_state
from allocations.catalogue.states import reclaim_pending_q
from allocations.models import Allocation, AllocationState
from allocations.quotas.wording import counted_words
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.numbers import plain
from kernel.reads import SharedReads
from notifications.recipients import department_admins, platform_admins
from placement import Workload
from tenants.access import DepartmentTree, access_for
from tenants.models import Department


@dataclass
class Why:
    """The whole answer (``as_dict`` is the API's body)."""

    allocation: int | None
    state: str
    primary: Reason
    secondary: list[Reason] = field(default_factory=list)
    quota: list[dict[str, Any]] = field(default_factory=list)
    holders: dict[str, Any] | None = None
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    queue: dict[str, Any] | None = None
    estimate: Estimate | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "allocation": self.allocation, "state": self.state, "reason": self.primary.as_dict(),
            "secondary": [reason.as_dict() for reason in self.secondary], "quota": self.quota,
            "holders": self.holders, "alternatives": self.alternatives, "queue": self.queue,
            "estimate": self.estimate.as_dict() if self.estimate is not None else None,
        }


def _clusters(allocation: Allocation) -> list[Cluster]:
    return list(candidate_clusters(flavor=allocation.flavor, cluster=allocation.cluster))


@dataclass
class _Decider:
    """Admission's verdict on the request and its variants, reading each cluster's placement state
    and each flavor's placement workload once for all of them (as a page's preview does)."""

    clusters: list[Cluster]
    states: dict[int, ClusterState] = field(default_factory=dict)
    workloads: dict[int, Workload] = field(default_factory=dict)
    reads: SharedReads = field(default_factory=SharedReads)  # the department tree and the quotas, read once

    def __call__(self, allocation: Allocation) -> Decision:
        clusters = _clusters(allocation) if allocation.cluster is not None else self.clusters
        for cluster in clusters:
            if cluster.pk not in self.states:
                self.states[cluster.pk] = cluster_state(cluster=cluster)
        flavor = allocation.flavor
        if flavor.pk not in self.workloads:
            self.workloads[flavor.pk] = placement_workload(include=flavor)
        return admission_decide(allocation=allocation, clusters=clusters, workload=self.workloads[flavor.pk],
                                states={cluster.pk: self.states[cluster.pk] for cluster in clusters}, reads=self.reads)


def _deciders(allocation: Allocation, tree: DepartmentTree | None) -> tuple[list[str], bool]:
    """Who may decide (the nearest admins of the department's chain, less the requester; else the
    platform admins), and whether the requester is one of its admins (four-eyes)."""
    department_id = allocation.project.department_id
    ids = department_admins(department_id=department_id, exclude=allocation.requested_by_id, tree=tree) or platform_admins()
    names = sorted(User.objects.filter(pk__in=ids).values_list("username", flat=True))
    requester = allocation.requested_by_id
    requester_decides = bool(settings.GPUPORTAL_FOUR_EYES) and requester is not None and access_for(
        User(pk=requester), tree=tree).can_administer_department(department_id)
    return names, requester_decides


def _quota_lines(allocation: Allocation, decision: Decision, tree: DepartmentTree) -> list[dict[str, Any]]:
    """Admission's lines, each with whether it fits and the limit in force now (``headroom``)."""
    now_levels: dict[tuple[str, str], QuotaLevel] = {}
    for chain in quota_chains(department_ids=[allocation.project.department_id], parents=dict(tree.parents)):
        for group in chain.groups:
            for found in group:
                now_levels[(found.department, found.what)] = found
    lines = []
    for line, fits in zip(decision.checks, decision.quota_fits, strict=False):
        out = dict(line)
        out["fits"] = fits
        flavor = line.get("flavor")
        level: QuotaLevel | None = None if "priority_class" in line else now_levels.get((str(line["department"]),
                                                                      counted_words(str(flavor) if flavor else None)))
        if level is not None:
            out["limit_now"], out["in_use_now"] = plain(level.limit), plain(level.holds)
        lines.append(out)
    return lines


def _holders(allocation: Allocation, primary: Reason, viewer: AbstractBaseUser | AnonymousUser,
             clusters: list[Cluster]) -> dict[str, Any] | None:
    access = access_for(viewer)
    interval = (allocation.starts_at, allocation.ends_at)
    if primary.code in (ReasonCode.QUOTA, ReasonCode.OUTSIDE_WINDOW) and primary.facts.get("level") == "department":
        slug = str(primary.facts.get("department"))
        found = list(Department.objects.filter(slug=slug).values_list("pk", flat=True))
        ids = sorted(access.tree.subtree(*found))
        return {"for": f"quota of department {slug}", **holders_read(access=access, interval=interval, department_ids=ids)}
    if primary.code == ReasonCode.NO_FIT:
        return {"for": f"{allocation.flavor.gpu_model} GPUs", **holders_read(
            access=access, interval=interval, cluster_ids=[cluster.pk for cluster in clusters],
            gpu_model=allocation.flavor.gpu_model)}
    return None


@dataclass(frozen=True)
class _Read:
    """The one decision and the reasons read off it."""

    clusters: list[Cluster]
    decision: Decision
    primary: Reason
    secondary: list[Reason]
    decide: _Decider


def _read(allocation: Allocation, now: datetime.datetime, tree: DepartmentTree | None = None) -> _Read:
    clusters = _clusters(allocation)
    decider = _Decider(clusters) if tree is None else _Decider(clusters, reads=admission_reads(tree=tree))
    decision = decider(allocation)
    deciders, requester_decides = _deciders(allocation, tree)
    notice = max((victim.notice_minutes for victim in decision.victims), default=0)
    verdict = Verdict(refusal=decision.refusal, reclaims=len(decision.victims), notice_minutes=notice,
                      starts_at=allocation.starts_at, now=now)
    primary, secondary = why_reasons.pending_reasons(verdict, deciders=deciders, requester_decides=requester_decides)
    if primary.code == ReasonCode.QUOTA:
        primary = outside_window(primary, allocation=allocation, now=now) or primary
    return _Read(clusters=clusters, decision=decision, primary=primary, secondary=secondary, decide=decider)


def _pending(allocation: Allocation, viewer: AbstractBaseUser | AnonymousUser, now: datetime.datetime) -> Why:
    tree = access_for(viewer).tree  # the tree the viewer's access check read: every part below reads it
    read = _read(allocation, now, tree)
    decision, primary, clusters = read.decision, read.primary, read.clusters
    why = Why(allocation=allocation.pk or None, state=allocation.state, primary=primary, secondary=read.secondary,
              quota=_quota_lines(allocation, decision, tree), queue=queue_position(allocation=allocation, tree=tree, now=now))
    if decision.admitted:
        why.estimate = Estimate(max(now, allocation.starts_at), "It fits now: it starts once approved (at its start "
                                "when that is later).", RELIABILITY)
        return why
    decide = read.decide
    why.holders = _holders(allocation, primary, viewer, clusters)
    why.alternatives = alternatives_find(allocation=allocation, decide=decide)
    why.estimate = earliest_start(allocation=allocation, decide=decide, cluster_ids=[cluster.pk for cluster in clusters],
                                  now=now, parents=dict(tree.parents))
    if why.estimate.starts_at is not None:
        why.alternatives.append({"kind": "later-start", "text": "The same request would be admitted starting then.",
                                 "flavor": allocation.flavor.name, "quantity": allocation.quantity, "cluster": None,
                                 "starts_at": why.estimate.starts_at.isoformat(), "quota": []})
    return why


def allocation_reason(*, allocation: Allocation, now: datetime.datetime | None = None) -> Reason:
    """Only the primary reason (one decision, no alternatives nor estimate): what /metrics counts."""
    now = now or clock_now()
    if allocation.state == AllocationState.PENDING:
        return _read(allocation, now).primary
    return _decided(allocation, now).primary


def _decided(allocation: Allocation, now: datetime.datetime) -> Why:
    """A request already approved that has not started: its start, its victims' notice, delivery."""
    if allocation.state == AllocationState.SCHEDULED:
        deadlines = [row for row in Allocation.objects.filter(reclaim_pending_q(), reclaimed_for_id=allocation.pk)
                     .values_list("reclaim_deadline", flat=True) if row is not None]
        until = max(deadlines, default=None)
        primary = why_reasons.scheduled_reason(starts_at=allocation.starts_at, notice_until=until, now=now)
        start = max(allocation.starts_at, until or allocation.starts_at)
        basis = "Its start, or the end of its victims' notice."
    else:
        cluster = allocation.cluster
        primary = why_reasons.delivery_reason(state=allocation.state, cluster=cluster.name if cluster else "?",
                                              last_error=cluster.last_sync_error if cluster else "")
        start, basis = now, "Approved: it starts when the cluster has taken it."
    return Why(allocation=allocation.pk, state=allocation.state, primary=primary,
               estimate=Estimate(max(start, now), basis, "The clock moves it at that moment; exact unless it is "
                                 "released or reclaimed first."))


def allocation_why(*, allocation: Allocation, viewer: AbstractBaseUser | AnonymousUser) -> Why:
    """Why ``allocation`` (pending, scheduled or on its way to the cluster) has not started, for ``viewer``."""
    now = clock_now()
    if allocation.state == AllocationState.PENDING:
        return _pending(allocation, viewer, now)
    return _decided(allocation, now)


def request_simulate(*, allocation: Allocation, viewer: AbstractBaseUser | AnonymousUser) -> Why:
    """The same answer for a request not yet made (``allocation`` unsaved, primary key 0): nothing is written."""
    return _pending(allocation, viewer, clock_now())
