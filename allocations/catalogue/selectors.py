"""Tenant-scoped reads of allocations, quotas and the catalogue."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Prefetch, Q, QuerySet
from django.http import Http404

from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, AllocationChange, ChangeState, Flavor, PriorityClass, Quota, Reservation
from tenants.access import access_for
from tenants.selectors import project_is_member

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from clusters.models import Cluster


def live_reservations_on(*, cluster: Cluster | None = None, node_ids: Iterable[int] | None = None) -> QuerySet[Reservation]:
    """The live reservations (not released: the GPU units booked now) on ``cluster`` and on the
    nodes ``node_ids``; every live reservation when neither is given. Unordered."""
    rows = Reservation.objects.filter(released_at__isnull=True)
    if cluster is not None:
        rows = rows.filter(node__cluster=cluster)
    if node_ids is not None:
        rows = rows.filter(node_id__in=list(node_ids))
    return rows


def reservations_held_between(
    *, start: datetime.datetime, end: datetime.datetime, fields: Sequence[str] = ()
) -> Iterator[tuple[datetime.datetime, datetime.datetime, tuple[Any, ...]]]:
    """Each reservation live inside its allocation's period at some time in [start, end): when it
    was (not clipped to the range) and the ``fields`` asked for. A unit is held exactly then: what
    the usage roll-up counts as granted and the fair-share tick as used. One query."""
    rows = Reservation.objects.filter(
        created_at__lt=end, allocation__starts_at__lt=end, allocation__ends_at__gt=start
    ).filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
    for created, released, starts, ends, *values in rows.values_list(
        "created_at", "released_at", "allocation__starts_at", "allocation__ends_at", *fields
    ):
        begin = max(created, starts)
        finish = min(ends, released) if released is not None else ends
        if finish > max(begin, start) and begin < end:
            yield begin, finish, tuple(values)


def live_reservations_prefetch() -> Prefetch[Any]:
    """The allocation's live reservations, with their nodes, as ``allocation.live_reservations``."""
    return Prefetch(
        "reservations",
        queryset=live_reservations_on().select_related("node").order_by("unit"),
        to_attr="live_reservations",
    )


def live_reservations(allocation: Allocation) -> list[Reservation]:
    """The allocation's live reservations with their nodes, by unit (prefetched by
    :func:`allocation_list`, else read now)."""
    prefetched: list[Reservation] | None = getattr(allocation, "live_reservations", None)
    if prefetched is not None:
        return prefetched
    return list(live_reservations_on().filter(allocation=allocation).select_related("node").order_by("unit"))


def pending_changes_prefetch() -> Prefetch[Any]:
    """The allocation's pending change (at most one), as ``allocation.pending_changes``."""
    return Prefetch("changes", queryset=AllocationChange.objects.filter(state=ChangeState.PENDING), to_attr="pending_changes")


def pending_changes(allocation: Allocation) -> list[AllocationChange]:
    """The allocation's pending change, as a list of at most one (prefetched by :func:`allocation_list`)."""
    prefetched: list[AllocationChange] | None = getattr(allocation, "pending_changes", None)
    if prefetched is not None:
        return prefetched
    return list(AllocationChange.objects.filter(allocation=allocation, state=ChangeState.PENDING))


class LiveUnits(TypedDict):
    live_units: int


if TYPE_CHECKING:
    HoldingAllocation = WithAnnotations[Allocation, LiveUnits]


def holding_with_live_units(*, cluster_ids: Iterable[int]) -> QuerySet[HoldingAllocation]:
    """Allocations that hold capacity on these clusters, each annotated with ``live_units``: how
    many of its units a live reservation books (fewer than ``quantity`` when granted before GPU
    placement existed)."""
    return Allocation.objects.filter(cluster_id__in=list(cluster_ids), state__in=HOLDING_STATES).annotate(
        live_units=Count("reservations", filter=Q(reservations__released_at__isnull=True))
    )


def unplaced_labels(allocations: Iterable[HoldingAllocation]) -> list[str]:
    """``#12: 2 × a100`` for each allocation of :func:`holding_with_live_units` with unbooked units."""
    return [
        f"#{allocation.pk}: {allocation.quantity - allocation.live_units} × {allocation.flavor.name}"
        for allocation in allocations
        if allocation.live_units < allocation.quantity
    ]


def allocation_list(
    *,
    user: AbstractBaseUser | AnonymousUser,
    state: list[str] | None = None,
    project_id: int | None = None,
    department_id: int | None = None,
    flavor_id: int | None = None,
    cluster_id: int | None = None,
    mine: bool = False,
) -> QuerySet[Allocation]:
    access = access_for(user)
    queryset = Allocation.objects.select_related(
        "project__department", "flavor", "priority_class", "cluster", "requested_by", "decided_by"
    ).prefetch_related(live_reservations_prefetch(), pending_changes_prefetch())
    if not access.reads_everything:
        queryset = queryset.filter(project__department_id__in=access.readable)
    if state:
        queryset = queryset.filter(state__in=state)
    if project_id is not None:
        queryset = queryset.filter(project_id=project_id)
    if department_id is not None:
        queryset = queryset.filter(project__department_id=department_id)
    if flavor_id is not None:
        queryset = queryset.filter(flavor_id=flavor_id)
    if cluster_id is not None:
        queryset = queryset.filter(cluster_id=cluster_id)
    if mine:
        queryset = queryset.filter(requested_by_id=user.pk)
    return queryset.order_by("-created_at", "-id")


def allocation_get(*, user: AbstractBaseUser | AnonymousUser, allocation_id: int) -> Allocation:
    try:
        return allocation_list(user=user).get(pk=allocation_id)
    except Allocation.DoesNotExist:
        raise Http404("No such allocation.") from None


def allocation_visible(*, user: AbstractBaseUser | AnonymousUser, allocation_id: int) -> Allocation:
    """The allocation with its project, when ``user`` may see it (404 otherwise): what an action's
    permission check reads, in one query (no related rows for an answer)."""
    access = access_for(user)
    queryset = Allocation.objects.select_related("project")
    if not access.reads_everything:
        queryset = queryset.filter(project__department_id__in=access.readable)
    try:
        return queryset.get(pk=allocation_id)
    except Allocation.DoesNotExist:
        raise Http404("No such allocation.") from None


def allocation_may_change(*, user: AbstractBaseUser | AnonymousUser, allocation: Allocation) -> bool:
    """Whether ``user`` may release or renew ``allocation``: its requester, a member of its project
    or an admin of its department (whether its state allows the change is asked separately)."""
    if access_for(user).can_administer_department(allocation.project.department_id):
        return True
    return allocation.requested_by_id == user.pk or project_is_member(project=allocation.project, user=user)


def flavor_list(*, user: AbstractBaseUser | AnonymousUser, active_only: bool = False) -> QuerySet[Flavor]:
    if not access_for(user).has_any_role:
        return Flavor.objects.none()
    queryset = Flavor.objects.all()
    if active_only:
        queryset = queryset.filter(is_active=True)
    return queryset.order_by("name")


def flavor_get(*, user: AbstractBaseUser | AnonymousUser, flavor_id: int) -> Flavor:
    try:
        return flavor_list(user=user).get(pk=flavor_id)
    except Flavor.DoesNotExist:
        raise Http404("No such flavor.") from None


def priority_class_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[PriorityClass]:
    if not access_for(user).has_any_role:
        return PriorityClass.objects.none()
    return PriorityClass.objects.order_by("-value", "name")


DEFAULT_PRIORITY_CLASS = "gpu-standard"
"""The class a request gets when it names none (the API) and the one the request form preselects."""


def priority_class_default(*, user: AbstractBaseUser | AnonymousUser) -> PriorityClass | None:
    return priority_class_list(user=user).filter(name=DEFAULT_PRIORITY_CLASS).first()


def priority_class_get(*, user: AbstractBaseUser | AnonymousUser, priority_class_id: int) -> PriorityClass:
    try:
        return priority_class_list(user=user).get(pk=priority_class_id)
    except PriorityClass.DoesNotExist:
        raise Http404("No such priority class.") from None


def quota_list(*, user: AbstractBaseUser | AnonymousUser, department_id: int | None = None) -> QuerySet[Quota]:
    access = access_for(user)
    queryset = Quota.objects.select_related("department", "flavor")
    if not access.reads_everything:
        queryset = queryset.filter(department_id__in=access.readable)
    if department_id is not None:
        queryset = queryset.filter(department_id=department_id)
    return queryset.order_by("department__slug", "flavor__name")


def quota_get(*, user: AbstractBaseUser | AnonymousUser, quota_id: int) -> Quota:
    try:
        return quota_list(user=user).get(pk=quota_id)
    except Quota.DoesNotExist:
        raise Http404("No such quota.") from None
