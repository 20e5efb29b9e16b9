"""Where an audit event's target opens in the portal, for one reader.

An event names its target by model label and primary key (``allocations.allocation`` ``42``).
A target becomes a link only to a page the reader may open, decided by the same selectors and
access rules as that page: an allocation the reader reads, a cluster or node (the cluster's page,
platform admins only), a department or project (the department's page, its admins only), a
quota window (its department's calendar, for those who read the department). Anything else, or
anything the reader may not open (or that no longer exists), stays plain text, so a link never
tells the reader more than the page behind it would.

One query per kind of target found, whatever the number of events.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.urls import reverse

from allocations.catalogue.selectors import allocation_list
from allocations.models import AllocationChange, QuotaWindow
from audit.models import AuditEvent
from clusters.selectors import cluster_list, node_list
from frontend.selectors import allocation_urls
from tenants.access import access_for
from tenants.selectors import department_list, project_list

Resolver = Callable[[User, set[int]], dict[int, str]]


def _visible_allocations(user: User) -> QuerySet[Any, Any]:
    return allocation_list(user=user).prefetch_related(None).order_by().values("pk")


def _allocations(user: User, ids: set[int]) -> dict[int, str]:
    return allocation_urls(user=user, ids=ids)


def _changes(user: User, ids: set[int]) -> dict[int, str]:
    found = AllocationChange.objects.filter(pk__in=ids, allocation__in=_visible_allocations(user))
    return {pk: reverse("allocation-detail", args=[allocation]) for pk, allocation in found.values_list("pk", "allocation_id")}


def _clusters(user: User, ids: set[int]) -> dict[int, str]:
    if not access_for(user).is_platform_admin:  # the cluster's page is the platform admins'
        return {}
    found = cluster_list(user=user).filter(pk__in=ids).values_list("pk", flat=True)
    return {pk: reverse("cluster-detail", args=[pk]) for pk in found}


def _nodes(user: User, ids: set[int]) -> dict[int, str]:
    if not access_for(user).is_platform_admin:
        return {}
    found = node_list(user=user).filter(pk__in=ids).values_list("pk", "cluster_id")
    return {pk: reverse("cluster-detail", args=[cluster]) for pk, cluster in found}


def _departments(user: User, ids: set[int]) -> dict[int, str]:
    access = access_for(user)  # the department's page is its admins'
    found = department_list(user=user).filter(pk__in=ids).values_list("pk", flat=True)
    return {pk: reverse("department", args=[pk]) for pk in found if access.can_administer_department(pk)}


def _projects(user: User, ids: set[int]) -> dict[int, str]:
    access = access_for(user)  # projects are managed on their department's page
    found = project_list(user=user).filter(pk__in=ids).values_list("pk", "department_id")
    return {pk: reverse("department", args=[department]) for pk, department in found
            if access.can_administer_department(department)}  # fmt: skip


def _windows(user: User, ids: set[int]) -> dict[int, str]:
    readable = department_list(user=user).order_by().values("pk")
    found = QuotaWindow.objects.filter(pk__in=ids, quota__department__in=readable).values_list("pk", "quota__department_id")
    return {pk: reverse("quota-calendar", args=[department]) for pk, department in found}


RESOLVERS: dict[str, Resolver] = {
    "allocations.allocation": _allocations,
    "allocations.allocationchange": _changes,
    "allocations.quotawindow": _windows,
    "clusters.cluster": _clusters,
    "clusters.node": _nodes,
    "tenants.department": _departments,
    "tenants.project": _projects,
}


def target_links(*, user: User, events: Iterable[AuditEvent]) -> dict[int, str]:
    """The portal page of each event's target the reader may open, by event seq."""
    events = list(events)
    wanted: dict[str, set[int]] = defaultdict(set)
    for event in events:
        if event.target_type in RESOLVERS and event.target_id.isdigit():
            wanted[event.target_type].add(int(event.target_id))
    found = {target_type: RESOLVERS[target_type](user, ids) for target_type, ids in wanted.items()}
    links: dict[int, str] = {}
    for event in events:
        url = found.get(event.target_type, {}).get(int(event.target_id)) if event.target_id.isdigit() else None
        if url is not None:
            links[event.seq] = url
    return links
