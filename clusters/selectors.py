"""Reads of the inventory and of a project's desired state on a cluster.

The inventory (clusters, nodes, GPUs) is visible to everyone with a role. What delivery records
about tenants is scoped like every other list: a push of a project, and drift found in a
project's namespace, are visible to those who read the project's department (its subtree's
admins, auditors and researchers); rows of the cluster-wide objects (priority classes, Volcano
queues named after departments, node configurations, pushes whose errors may name any of them)
belong to no single department and are visible only to those who read every department: platform
admins, and an auditor (or admin) of the root.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet
from django.http import Http404

from clusters.models import Cluster, ClusterDrift, ClusterPush, Node
from tenants.access import access_for
from tenants.models import Department, Project

HAMI_RESOURCE = "nvidia.com/gpu"
MISSING_PREREQUISITE = "Missing prerequisite: "
"""How ``Cluster.last_sync_error`` starts when the cluster lacks something the portal does not
create (the GPU operator's namespace): kept until a cluster-wide push finds it there."""


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


def cluster_missing_prerequisite(cluster: Cluster) -> str:
    """What the cluster lacks for the portal to deliver everything, in words, or ""."""
    error = cluster.last_sync_error
    return error if error.startswith(MISSING_PREREQUISITE) else ""


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


def sees_every_department(*, user: AbstractBaseUser | AnonymousUser) -> bool:
    """Whether ``user`` reads every department: a platform admin, or a role held over all of them
    (an auditor of the root). Rows that belong to no single department are for them only."""
    access = access_for(user)
    if access.is_platform_admin:
        return True
    if not access.readable:
        return False
    return not Department.objects.exclude(pk__in=access.readable).exists()


def cluster_drift_list(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int) -> QuerySet[ClusterDrift]:
    """Drift in the namespaces of the projects ``user`` may read (and their Namespace objects);
    drift of the cluster-wide objects only for those who read every department."""
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    queryset = ClusterDrift.objects.filter(cluster=cluster)
    if not sees_every_department(user=user):
        namespaces = Project.objects.filter(department_id__in=access_for(user).readable).values("slug")
        in_projects = Q(namespace__in=namespaces) | Q(kind="Namespace", namespace="", name__in=namespaces)
        queryset = queryset.filter(in_projects).exclude(namespace=cluster.gpu_operator_namespace)
    return queryset.order_by("-detected_at", "-pk")


def cluster_push_list(*, user: AbstractBaseUser | AnonymousUser, cluster_id: int) -> QuerySet[ClusterPush]:
    """Pushes of the projects ``user`` may read; pushes of the cluster-wide objects only for those
    who read every department."""
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    queryset = ClusterPush.objects.filter(cluster=cluster)
    if not sees_every_department(user=user):
        queryset = queryset.filter(project__department_id__in=access_for(user).readable)
    return queryset.select_related("project").order_by("-pk")
