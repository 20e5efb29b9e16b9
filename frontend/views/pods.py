"""The allocation page's "Pods waiting on the cluster" panel: read when the page has loaded (HTMX),
so a slow or unreachable cluster never holds the page up; it says so in the panel instead
(``delivery.pending_pods``, docs/pending.md, "Pending pods")."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from delivery.pending_pods import allocation_pending_pods
from frontend.http import portal_user


@require_GET
@login_required
def allocation_pods(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """The panel's content for an allocation the viewer may read (else 404); without HTMX (the
    page's link, followed without JavaScript) the same inside a page of its own."""
    answer = allocation_pending_pods(user=portal_user(request), allocation_id=allocation_id)
    template = "frontend/_pending_pods.html" if request.headers.get("HX-Request") else "frontend/pending_pods.html"
    context = {"pods": answer, "allocation_id": allocation_id, "title": f"Pods waiting for allocation #{allocation_id}"}
    return render(request, template, context)
