"""The utilisation page: GPU-equivalents allocated and busy over a day, a week or a month, for a
cluster and per department (``frontend.utilisation``). Everyone with a role opens it and sees the
departments they read (the whole cluster when they read every department); others get 404."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from clusters.selectors import cluster_list
from frontend.http import portal_user
from frontend.utilisation import UtilisationForm, chosen_range, range_links, utilisation_views
from telemetry.utilisation_reads import DEFAULT_RANGE, cluster_utilisation
from tenants.access import access_for


@require_GET
@login_required
def utilisation(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    if not access_for(user).has_any_role:
        raise Http404("No utilisation to show.")
    clusters = cluster_list(user=user)
    form = UtilisationForm(request.GET or None, clusters=clusters)
    context: dict[str, Any] = {"title": "Utilisation", "form": form}
    if form.is_bound and not form.is_valid():
        return render(request, "frontend/utilisation.html", context, status=400)
    data = form.cleaned_data if form.is_bound else {}
    cluster = data.get("cluster") or clusters.first()
    spec = chosen_range(data.get("range"))
    if not form.is_bound:
        form.initial = {"cluster": cluster.pk if cluster else None, "range": DEFAULT_RANGE}
    context["ranges"] = range_links(cluster_id=cluster.pk if cluster else None, current=spec.name)
    if cluster is not None:
        found = cluster_utilisation(user=user, cluster_id=cluster.pk, range_name=spec.name)
        total, departments = utilisation_views(found)
        context.update({"found": found, "total": total, "departments": departments})
    return render(request, "frontend/utilisation.html", context)
