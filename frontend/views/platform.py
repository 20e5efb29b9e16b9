"""Platform admin pages: the platform overview, clusters and their sync health, nodes and the GPU
map, the catalogue (its forms: ``frontend.views.catalogue``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from allocations.booking.defrag import defrag_apply, defrag_plan
from allocations.catalogue.selectors import flavor_list, priority_class_list
from allocations.catalogue.sharing_guide import guides
from clusters.selectors import (
    cluster_drift_list,
    cluster_get,
    cluster_missing_prerequisite,
    cluster_push_list,
    node_list,
)
from frontend.gpu_map import MapAtForm, gpu_map, gpu_map_links
from frontend.http import portal_user
from frontend.overview import platform_overview
from frontend.selectors import cluster_health_list, quota_bars
from frontend.utilisation import gpu_map_busy
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.words import counted
from tenants.access import access_for

RECENT = 10


def _platform_admin(request: HttpRequest) -> User:
    user = portal_user(request)
    if not access_for(user).is_platform_admin:
        raise PermissionDenied("Only platform admins manage clusters and the catalogue.")
    return user


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """What a platform admin checks first: clusters, utilisation now, decisions waiting, failed pushes."""
    user = _platform_admin(request)
    now = clock_now()
    context = {"title": "Platform overview", "now": now, "overview": platform_overview(user=user, now=now)}
    return render(request, "frontend/platform_overview.html", context)


@require_GET
@login_required
def clusters(request: HttpRequest) -> HttpResponse:
    user = _platform_admin(request)
    return render(request, "frontend/clusters.html", {"title": "Clusters", "clusters": cluster_health_list(user=user)})


@require_GET
@login_required
def cluster_detail(request: HttpRequest, cluster_id: int) -> HttpResponse:
    """The cluster's page; its GPU map is drawn now, or at the query's ``at`` (a bad one: 400 naming it)."""
    user = _platform_admin(request)
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    form = MapAtForm(request.GET or None)
    valid = not form.is_bound or form.is_valid()
    at = form.cleaned_data.get("at") if form.is_bound and valid else None
    drawn = gpu_map_links(user=user, drawn=gpu_map(cluster=cluster, at=at)) if valid else None
    context = {
        "title": f"Cluster {cluster.name}",
        "cluster": cluster,
        "missing_prerequisite": cluster_missing_prerequisite(cluster),
        "nodes": node_list(user=user, cluster_id=cluster.pk),
        # How busy each GPU is now: only on the map of now.
        "map": gpu_map_busy(user=user, cluster=cluster, drawn=drawn) if drawn is not None and drawn.now else drawn,
        "map_form": form,
        "pushes": cluster_push_list(user=user, cluster_id=cluster.pk)[:RECENT],
        "drifts": cluster_drift_list(user=user, cluster_id=cluster.pk)[:RECENT],
        "defrag": defrag_plan(cluster=cluster),
    }
    return render(request, "frontend/cluster_detail.html", context, status=200 if valid else 400)


@require_POST
@login_required
def cluster_defrag(request: HttpRequest, cluster_id: int) -> HttpResponse:
    """Apply the defragmentation plan (recomputed under locks, so it may differ from the page's)."""
    user = _platform_admin(request)
    cluster = cluster_get(user=user, cluster_id=cluster_id)
    try:
        plan = defrag_apply(cluster_id=cluster.pk, actor=user)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        if plan.moves:
            messages.success(request, f"Moved {counted(len(plan.moves), 'unit')}: {plan.after.describe()}.")
        else:
            messages.info(request, "Nothing to move: the layout is already as compact as the plan can make it.")
    return redirect("cluster-detail", cluster_id=cluster.pk)


@require_GET
@login_required
def catalogue(request: HttpRequest) -> HttpResponse:
    user = _platform_admin(request)
    context = {
        "title": "Catalogue",
        "flavors": flavor_list(user=user),
        "bars": quota_bars(user=user),
        "priority_classes": priority_class_list(user=user),
        "guides": guides(),
    }
    return render(request, "frontend/catalogue.html", context)
