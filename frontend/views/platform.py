"""Platform admin pages: clusters and their sync health, nodes and the GPU map, the catalogue."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations.selectors import flavor_list, priority_class_list
from clusters.selectors import cluster_drift_list, cluster_get, cluster_push_list, node_list
from frontend.gpu_map import gpu_map
from frontend.http import portal_user
from frontend.selectors import cluster_health_list, quota_bars
from tenants.access import access_for

RECENT = 10


def _platform_admin(request: HttpRequest) -> User:
    user = portal_user(request)
    if not access_for(user).is_platform_admin:
        raise PermissionDenied("Only platform admins manage clusters and the catalogue.")
    return user


@require_GET
@login_required
def clusters(request: HttpRequest) -> HttpResponse:
    user = _platform_admin(request)
    return render(request, "frontend/clusters.html", {"title": "Clusters", "clusters": cluster_health_list(user=user)})


@require_GET
@login_required
def cluster_detail(request: HttpRequest, cluster_id: int) -> HttpResponse:
    user = _platform_admin(request)
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    context = {
        "title": f"Cluster {cluster.name}",
        "cluster": cluster,
        "nodes": node_list(user=user, cluster_id=cluster.pk),
        "map": gpu_map(cluster=cluster),
        "pushes": cluster_push_list(user=user, cluster_id=cluster.pk)[:RECENT],
        "drifts": cluster_drift_list(user=user, cluster_id=cluster.pk)[:RECENT],
    }
    return render(request, "frontend/cluster_detail.html", context)


@require_GET
@login_required
def catalogue(request: HttpRequest) -> HttpResponse:
    user = _platform_admin(request)
    context = {
        "title": "Catalogue",
        "flavors": flavor_list(user=user),
        "bars": quota_bars(user=user),
        "priority_classes": priority_class_list(user=user),
    }
    return render(request, "frontend/catalogue.html", context)
