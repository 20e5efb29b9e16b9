"""Researcher pages: dashboard, request form with live feedback, allocation detail, release, renew."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from allocations.booking.reservations import reservations_where
from allocations.selectors import allocation_get
from allocations.services import allocation_release, allocation_renew, allocation_request
from frontend.feedback import request_feedback
from frontend.forms import AllocationRequestForm, RenewForm
from frontend.http import form_add_service_error, portal_user
from frontend.selectors import (
    allocation_changeable,
    allocation_pushes,
    dashboard_allocations,
    membership_department_ids,
    pending_for_decision,
    quota_bars,
)
from frontend.timeline import allocation_timeline
from kernel.errors import ApplicationError
from kernel.limits import TEXT_LIMIT
from tenants.access import access_for

# Service field names that the form calls differently.
REQUEST_FIELD_MAP = {"ends_at": "duration_days"}
DASHBOARD_PAGE_SIZE = 25


@require_GET
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    access = access_for(user)
    page = Paginator(dashboard_allocations(user=user), DASHBOARD_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "title": "Dashboard",
        "access": access,
        "page": page,
        "bars": quota_bars(user=user, department_ids=membership_department_ids(user=user)),
        "pending_count": pending_for_decision(user=user).count() if access.administered or access.is_platform_admin
        else 0,
    }
    return render(request, "frontend/dashboard.html", context)


def _feedback_for(form: AllocationRequestForm) -> Any:
    """Feedback from whichever fields parse, even while others are still wrong or empty."""
    values: dict[str, Any] = {}
    for name in ("project", "flavor", "quantity", "priority_class", "cluster"):
        field = form.fields[name]
        try:
            values[name] = field.clean(field.widget.value_from_datadict(form.data, form.files, form.add_prefix(name)))
        except forms.ValidationError:  # a field that does not parse yet simply gives no feedback
            values[name] = None
    return request_feedback(**values)


@require_http_methods(["GET", "POST"])
@login_required
def allocation_new(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    form = AllocationRequestForm(request.POST or None, user=user)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            starts_at, ends_at = form.window()
            try:
                allocation = allocation_request(
                    actor=user, project=form.cleaned_data["project"], flavor=form.cleaned_data["flavor"],
                    quantity=form.cleaned_data["quantity"], priority_class=form.cleaned_data["priority_class"],
                    starts_at=starts_at, ends_at=ends_at, justification=form.cleaned_data["justification"],
                    cluster=form.cleaned_data["cluster"],
                )
            except ApplicationError as error:
                form_add_service_error(form, error, field_map=REQUEST_FIELD_MAP)
                status = error.status
            else:
                messages.success(request, f"Request #{allocation.pk} submitted; your department admin decides on it.")
                return redirect("allocation-detail", allocation_id=allocation.pk)
        else:
            status = 400
    project_field = form.fields["project"]
    assert isinstance(project_field, forms.ModelChoiceField)
    context = {
        "title": "Request GPUs",
        "form": form,
        "feedback": _feedback_for(form) if form.is_bound else None,
        "has_projects": project_field.queryset is not None and project_field.queryset.exists(),
    }
    return render(request, "frontend/allocation_form.html", context, status=status)


@require_GET
@login_required
def allocation_feedback(request: HttpRequest) -> HttpResponse:
    """The live feedback partial (HTMX), with the errors of the fields filled in so far."""
    form = AllocationRequestForm(request.GET, user=portal_user(request))
    form.is_valid()
    # Only fields the person has filled in get their errors now; the rest wait for the submit.
    oob_errors: dict[str, Any] = {
        name: form.errors.get(name, []) if str(request.GET.get(name, "")).strip() else [] for name in form.fields
    }
    context = {"feedback": _feedback_for(form), "form": form, "oob_errors": oob_errors}
    return render(request, "frontend/_feedback.html", context)


@require_GET
@login_required
def allocation_detail(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    access = access_for(user)
    context = {
        "title": f"Allocation #{allocation.pk}",
        "allocation": allocation,
        "timeline": allocation_timeline(allocation=allocation),
        "placement": reservations_where(allocation=allocation),
        "pushes": allocation_pushes(allocation=allocation)[:10],
        "renew_form": RenewForm.for_allocation(allocation),
        "can_change": allocation_changeable(user=user, allocation=allocation),
        "can_decide": allocation.state == "pending" and access.can_administer_department(allocation.project.department_id),
    }
    return render(request, "frontend/allocation_detail.html", context)


@require_POST
@login_required
def allocation_release_view(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    try:
        released = allocation_release(actor=user, allocation_id=allocation.pk, comment=request.POST.get("comment", "")[:TEXT_LIMIT])
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Allocation #{released.pk} is now {released.get_state_display().lower()}.")
    return redirect("allocation-detail", allocation_id=allocation.pk)


@require_POST
@login_required
def allocation_renew_view(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    form = RenewForm(request.POST)
    if form.is_valid():
        try:
            renewed = allocation_renew(actor=user, allocation_id=allocation.pk, ends_at=form.cleaned_data["ends_at"])
        except ApplicationError as error:
            form_add_service_error(form, error)
        else:
            messages.success(request, f"Allocation #{renewed.pk} now ends {renewed.ends_at:%Y-%m-%d %H:%M} UTC.")
            return redirect("allocation-detail", allocation_id=allocation.pk)
    context = {
        "title": f"Allocation #{allocation.pk}",
        "allocation": allocation,
        "timeline": allocation_timeline(allocation=allocation),
        "placement": reservations_where(allocation=allocation),
        "renew_form": form,
        "can_change": True,
        "can_decide": False,
    }
    return render(request, "frontend/allocation_detail.html", context, status=400)
