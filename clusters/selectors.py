"""Reads of the inventory and of a project's desired state on a cluster."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, QuerySet
from django.http import Http404

from allocations.models import Allocation
from allocations.states import HOLDING_STATES
from clusters.models import Cluster, Node
from clusters.rendering import GrantedUnits, ProjectState
from tenants.access import access_for
from tenants.models import Project


def cluster_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Cluster]:
    """Clusters are visible to everyone with a role; their credentials never are."""
    if not access_for(user).has_any_role:
        return Cluster.objects.none()
    return Cluster.objects.annotate(node_count=Count("nodes", distinct=True)).order_by("name")


def cluster_get(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int) -> Cluster:
    try:
        return cluster_list(user=user).get(pk=cluster_id)
    except Cluster.DoesNotExist:
        raise Http404("No such cluster.") from None


def node_list(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int | None = None) -> QuerySet[Node]:
    if not access_for(user).has_any_role:
        return Node.objects.none()
    queryset = Node.objects.select_related("cluster").prefetch_related("gpus")
    if cluster_id is not None:
        queryset = queryset.filter(cluster_id=cluster_id)
    return queryset.order_by("cluster__name", "name")


def node_get(*, user: AbstractBaseUser | AnonymousUser, node_id: int) -> Node:
    try:
        return node_list(user=user).get(pk=node_id)
    except Node.DoesNotExist:
        raise Http404("No such node.") from None


def project_state_on_cluster(*, cluster: Cluster, project: Project) -> ProjectState:
    grants = tuple(
        GrantedUnits(
            resource_name=allocation.flavor.resource_name,
            quantity=allocation.quantity,
            cpu_millicores_per_unit=allocation.flavor.cpu_millicores_per_unit,
            memory_mib_per_unit=allocation.flavor.memory_mib_per_unit,
        )
        for allocation in Allocation.objects.filter(cluster=cluster, project=project, state__in=HOLDING_STATES)
        .select_related("flavor")
        .order_by("pk")
    )
    return ProjectState(
        cluster=cluster.name,
        namespace=project.slug,
        department=project.department.slug,
        project=project.slug,
        grants=grants,
    )
