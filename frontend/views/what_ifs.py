"""What-ifs in the portal (``/what-ifs/``): the list of those the reader may see and the form to ask
for one (platform and department admins), and each one's result: current against proposed per
department, as a table and charts (docs/twin.md, "What-if"). Others get 403 for the form, 404 for
a what-if they may not read."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from allocations.models import Quota
from frontend.http import form_add_service_error, portal_user
from frontend.what_if_forms import WhatIfForm, initial_from_window
from frontend.what_if_result import result_view
from kernel.errors import ApplicationError
from tenants.access import access_for
from tenants.models import Department
from whatifs.changes import change_words
from whatifs.selectors import what_if_get, what_if_list
from whatifs.services import what_if_create

UPLOAD_MAX_BYTES = 20_000_000


def _choices(user: User) -> tuple[QuerySet[Department], QuerySet[Quota], bool]:
    access = access_for(user)
    if access.is_platform_admin:
        return Department.objects.order_by("slug"), Quota.objects.select_related("department", "flavor").order_by(
            "department__slug", "id"), True
    if not access.administered:
        raise PermissionDenied("What-ifs are asked for by platform and department admins.")
    departments = Department.objects.filter(pk__in=access.administered).order_by("slug")
    quotas = Quota.objects.filter(department_id__in=access.administered).select_related("department", "flavor")
    return departments, quotas.order_by("department__slug", "id"), False


def _create(form: WhatIfForm, user: User) -> int | None:
    changes = form.changes()
    if changes is None:
        return None
    data = form.cleaned_data
    upload = data.get("workload")
    workload, fmt = None, "jsonl"
    if upload is not None:
        if upload.size > UPLOAD_MAX_BYTES:
            form.add_error("workload", f"at most {UPLOAD_MAX_BYTES // 1_000_000} MB")
            return None
        workload = upload.read().decode("utf-8", errors="replace")
        fmt = "csv" if upload.name.lower().endswith(".csv") else "jsonl"
    department = data.get("department")
    try:
        made = what_if_create(actor=user, changes=changes, department_id=department.pk if department else None,
                              history_days=None if workload is not None else data.get("history_days"),
                              workload=workload, workload_format=fmt, title=data.get("title") or "")
    except ApplicationError as error:
        form_add_service_error(form, error, field_map={"changes": "changes_json", "history_days": "history_days"})
        if error.fields and not any(name in form.fields for name in error.fields):
            form.add_error(None, "; ".join(f"{name}: {' '.join(messages)}" for name, messages in error.fields.items()))
        return None
    return made.pk


@require_http_methods(["GET", "POST"])
@login_required
def what_ifs(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    if not access_for(user).has_any_role:
        raise PermissionDenied("What-ifs are shown to the departments' admins.")
    departments, quotas, platform = _choices(user)
    options: dict[str, Any] = {"departments": departments, "quotas": quotas, "platform": platform}
    if request.method == "POST":
        form = WhatIfForm(request.POST, request.FILES, **options)
        if form.is_valid():
            made = _create(form, user)
            if made is not None:
                return redirect("what-if", what_if_id=made)
    else:
        form = WhatIfForm(initial=initial_from_window(request.GET), **options)
    rows = list(what_if_list(user=user)[:50])
    return render(request, "frontend/what_ifs.html", {"title": "What-ifs", "form": form, "what_ifs": rows},
                  status=400 if request.method == "POST" else 200)


@require_http_methods(["GET"])
@login_required
def what_if(request: HttpRequest, what_if_id: int) -> HttpResponse:
    found = what_if_get(user=portal_user(request), what_if_id=what_if_id)
    return render(request, "frontend/what_if.html", {"title": f"What-if #{found.pk}", "what_if": found,
                                                      "view": result_view(found),
                                                      "changes_json": json.dumps(found.changes, indent=2),
                                                      "changes_words": _changes_words(found.changes)})


def _changes_words(changes: list[dict[str, Any]]) -> list[str]:
    ids = [change["quota"] for change in changes if isinstance(change.get("quota"), int)]
    names = {quota.pk: f"{quota.department.slug} · {quota.flavor.name if quota.flavor else 'GPU-equivalents'}"
             for quota in Quota.objects.filter(pk__in=ids).select_related("department", "flavor")}
    return [change_words(change, quota_names=names) for change in changes]
