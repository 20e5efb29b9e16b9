"""Reads of the inventory and of a project's desired state on a cluster."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, QuerySet
from django.http import Http404

from clusters.models import Cluster, ClusterDrift, ClusterPush, Node
from tenants.access import access_for

HAMI_RESOURCE = "nvidia.com/gpu"


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


def cluster_drift_list(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int) -> QuerySet[ClusterDrift]:
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    return ClusterDrift.objects.filter(cluster=cluster).order_by("-detected_at", "-pk")


def cluster_push_list(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int) -> QuerySet[ClusterPush]:
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    return ClusterPush.objects.filter(cluster=cluster).select_related("project").order_by("-pk")
