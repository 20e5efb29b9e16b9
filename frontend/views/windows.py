"""The quota calendar of a department (``frontend.quota_calendar``) and its quota windows: asked for
by the department's admins, decided by platform admins (four-eyes), cancelled by their requester or
a platform admin, all through ``allocations.windows.services``. Whoever reads the department (its
researchers, admins and auditors, platform admins) sees the calendar; others get 404."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from allocations.catalogue.selectors import priority_class_list, quota_list
from allocations.models import Quota
from allocations.models.windows import QuotaWindow, WindowState
from allocations.quotas.windows import PAGE_BUDGET, Edge
from allocations.rules.changes import rule_change_needs_second
from allocations.windows.services import (
    quota_window_approve,
    quota_window_cancel,
    quota_window_create,
    quota_window_get,
    quota_window_list,
    quota_window_reject,
    window_in_force,
    window_next_edges,
)
from frontend.http import form_add_service_error, portal_user
from frontend.quota_calendar import calendar_departments, department_calendar
from frontend.window_forms import WindowDecisionForm, WindowRequestForm
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.numbers import plain
from tenants.access import access_for
from tenants.models import Department
from tenants.selectors import department_get, department_list

WINDOWS_SHOWN = 50


@dataclass(frozen=True)
class WindowRow:
    window: QuotaWindow
    values: str  # "limit +4, guarantee = 2"
    next_edges: list[Edge]
    in_force: bool
    own: bool  # the viewer asked for it: another platform admin must decide (four-eyes)
    may_decide: bool
    may_cancel: bool


def window_values(window: QuotaWindow) -> str:
    parts = []
    for name, label in (("limit", "limit"), ("guaranteed", "guarantee")):
        delta, absolute = getattr(window, f"{name}_delta"), getattr(window, name)
        if absolute is not None:
            parts.append(f"{label} = {plain(absolute)}")
        elif delta is not None:
            parts.append(f"{label} {'+' if delta >= 0 else '−'}{plain(abs(delta))}")
    return ", ".join(parts)


def window_rows(user: User, windows: list[QuotaWindow], now: datetime.datetime) -> list[WindowRow]:
    access = access_for(user)
    four_eyes = settings.GPUPORTAL_FOUR_EYES
    rows = []
    for window in windows:
        live = window.state in (WindowState.PENDING, WindowState.APPROVED)
        edges = window_next_edges(window, now)
        rows.append(WindowRow(
            window=window, values=window_values(window), next_edges=edges,
            in_force=window_in_force(window, now, budget=PAGE_BUDGET),
            own=four_eyes and window.requested_by_id == user.pk,
            may_decide=access.is_platform_admin and window.state == WindowState.PENDING,
            may_cancel=live and (access.is_platform_admin or window.requested_by_id == user.pk),
        ))
    return rows


def _form(department: Department, user: User, data: object = None) -> WindowRequestForm:
    return WindowRequestForm(
        data, quotas=quota_list(user=user, department_id=department.pk), priority_classes=priority_class_list(user=user),
        initial={"begins_at": clock_now().replace(second=0, microsecond=0) + datetime.timedelta(hours=1)},
    )


def _page(request: HttpRequest, user: User, department: Department, *, form: WindowRequestForm | None = None,
          status: int = 200) -> HttpResponse:
    access = access_for(user)
    now = clock_now()
    may_ask = access.can_administer_department(department.pk) and Quota.objects.filter(department=department).exists()
    windows = list(quota_window_list(user=user, department_id=department.pk)[:WINDOWS_SHOWN])
    context = {
        "title": f"Quota calendar of {department.name}",
        "department": department,
        "departments": calendar_departments(user=user, departments=department_list(user=user)),
        "calendar": department_calendar(user=user, department=department, now=now),
        "windows": window_rows(user, windows, now),
        "may_ask": may_ask,
        "can_what_if": may_ask,  # the form's "what would this have done last month" (a what-if of its quota)
        "direct": access.is_platform_admin and not rule_change_needs_second(),  # four-eyes: another admin approves
        "form": (form or _form(department, user)) if may_ask else None,
    }
    return render(request, "frontend/quota_calendar.html", context, status=status)


@require_GET
@login_required
def quota_calendar_index(request: HttpRequest) -> HttpResponse:
    """The calendar of the first department the user reads (those with quotas first)."""
    user = portal_user(request)
    departments = calendar_departments(user=user, departments=department_list(user=user))
    if not departments:
        raise PermissionDenied("The quota calendar shows the departments you have a role in; you have none.")
    return redirect("quota-calendar", department_id=departments[0].pk)


@require_GET
@login_required
def quota_calendar(request: HttpRequest, department_id: int) -> HttpResponse:
    user = portal_user(request)
    return _page(request, user, department_get(user=user, department_id=department_id))


@require_POST
@login_required
def quota_window_new(request: HttpRequest, department_id: int) -> HttpResponse:
    """A request for a window (pending), or a platform admin's window in force at once where four-eyes
    is off (``allocations.rules.changes.rule_change_needs_second``)."""
    user = portal_user(request)
    department = department_get(user=user, department_id=department_id)
    if not access_for(user).can_administer_department(department.pk):
        raise PermissionDenied("Only the department's admins and platform admins ask for quota windows.")
    form = _form(department, user, request.POST)
    if form.is_valid():
        try:
            window = quota_window_create(actor=user, **form.service_arguments())
        except ApplicationError as error:
            form_add_service_error(form, error, field_map=form.service_fields())
        else:
            if window.state == WindowState.APPROVED:
                messages.success(request, f"Quota window #{window.pk} is in force as of its start.")
            else:
                messages.success(request, f"Quota window #{window.pk} waits for a platform admin's approval.")
            return redirect("quota-calendar", department_id=department.pk)
    return _page(request, user, department, form=form, status=400)


def _back(request: HttpRequest, window: QuotaWindow) -> HttpResponse:
    if request.POST.get("back") == "approvals":
        return redirect("approvals")
    return redirect("quota-calendar", department_id=window.quota.department_id)


@require_POST
@login_required
def quota_window_decide(request: HttpRequest, window_id: int) -> HttpResponse:
    """Approve or reject one pending window; a refusal (four-eyes, state, role) is the message."""
    user = portal_user(request)
    window = quota_window_get(user=user, window_id=window_id)
    form = WindowDecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"Quota window #{window.pk}: {error}")
        return _back(request, window)
    decision, comment = form.cleaned_data["decision"], form.cleaned_data["comment"]
    try:
        if decision == "approve":
            quota_window_approve(actor=user, window_id=window.pk, comment=comment)
        else:
            quota_window_reject(actor=user, window_id=window.pk, comment=comment)
    except ApplicationError as error:
        messages.error(request, f"Quota window #{window.pk} not {decision}d: {error.message}")
    else:
        messages.success(request, f"Quota window #{window.pk} {decision}d.")
    return _back(request, window)


@require_POST
@login_required
def quota_window_cancel_view(request: HttpRequest, window_id: int) -> HttpResponse:
    user = portal_user(request)
    window = quota_window_get(user=user, window_id=window_id)
    try:
        quota_window_cancel(actor=user, window_id=window.pk)
    except ApplicationError as error:
        messages.error(request, f"Quota window #{window.pk} not cancelled: {error.message}")
    else:
        messages.success(request, f"Quota window #{window.pk} cancelled.")
    return _back(request, window)
