"""Researcher pages: dashboard, request form with live feedback, allocation detail, release
(renewal and resize: ``frontend.views.changes``)."""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounting.idle.selectors import idle_case_list
from accounting.idle_models import OPEN_STATES
from allocations.admission.headroom import quota_chains
from allocations.admission.reasons import WAITING_STATES
from allocations.booking.reservations import reservations_where
from allocations.catalogue.selectors import allocation_get, allocation_may_change, pending_changes
from allocations.catalogue.states import ON_CLUSTER_STATES
from allocations.grants.changes import CHANGEABLE_STATES, self_renew_until
from allocations.grants.services import allocation_release, allocation_request
from allocations.models import Allocation, AllocationState
from delivery.usage_guide_reads import allocation_usage_guide_or_none
from frontend.feedback import RequestFeedback, request_feedback
from frontend.forms import AllocationRequestForm, RenewForm, ResizeForm
from frontend.http import form_add_service_error, portal_user
from frontend.idle import idle_open_count
from frontend.outlook import (
    Admission,
    AdmissionOutlook,
    admission_outlook,
    admission_read,
    outlook_of,
    request_allocation,
)
from frontend.selectors import (
    allocation_changeable,
    allocation_pushes,
    dashboard_allocations,
    membership_department_ids,
    pending_changes_for_decision,
    pending_for_decision,
    quota_bars,
    requestable_projects,
)
from frontend.timeline import allocation_standing, allocation_timeline
from frontend.utilisation import allocation_usage_panel
from frontend.why import why_panel
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.limits import TEXT_LIMIT
from kernel.reads import SharedReads
from tenants.access import access_for
from tenants.selectors import admins_to_ask

# Service field names that the form calls differently.
REQUEST_FIELD_MAP = {"ends_at": "duration_days"}
DASHBOARD_PAGE_SIZE = 25


@require_GET
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    access = access_for(user)
    deciding = bool(access.administered) or access.is_platform_admin
    page = Paginator(dashboard_allocations(user=user), DASHBOARD_PAGE_SIZE).get_page(request.GET.get("page"))
    departments = membership_department_ids(user=user)
    context = {
        "title": "Dashboard",
        "access": access,
        "page": page,
        "bars": quota_bars(user=user, department_ids=departments),
        # Every level that binds a request: the department's quotas and each ancestor's, as admission counts them.
        "chains": quota_chains(department_ids=sorted(departments)) if access.has_any_role else [],
        "pending_count": pending_for_decision(user=user).count() if deciding else 0,
        "changes_count": pending_changes_for_decision(user=user).count() if deciding else 0,
        "idle_count": idle_open_count(user=user) if access.has_any_role else 0,
        "can_request": access.has_any_role and requestable_projects(user=user).exists(),
        "ask": None if access.has_any_role else admins_to_ask(user=user),
        "waiting_states": WAITING_STATES,  # a waiting request shows the reason last read for it (docs/pending.md)
    }
    return render(request, "frontend/dashboard.html", context)


def _parsed(form: AllocationRequestForm, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields that parse, even while others are still wrong or empty (None for the rest)."""
    values: dict[str, Any] = {}
    for name in names:
        field = form.fields[name]
        try:
            values[name] = field.clean(field.widget.value_from_datadict(form.data, form.files, form.add_prefix(name)))
        except forms.ValidationError:  # a field that does not parse yet simply gives no feedback
            values[name] = None
    return values


def _request_for(form: AllocationRequestForm) -> Allocation | None:
    """The request as approval would judge it, once every field it depends on parses (the window
    included; no start: now), else None: approval judges a request over its own dates."""
    values = _parsed(form, ("project", "flavor", "quantity", "priority_class", "cluster", "starts_at", "duration_days"))
    if any(values[name] is None for name in ("project", "flavor", "quantity", "priority_class", "duration_days")):
        return None
    if values["quantity"] < 1 or values["duration_days"] < 1:
        return None
    starts_at = values["starts_at"]
    ends_at = (starts_at or clock_now()) + datetime.timedelta(days=values["duration_days"])
    return request_allocation(
        project=values["project"], flavor=values["flavor"], quantity=values["quantity"],
        priority_class=values["priority_class"], cluster=values["cluster"], span=(starts_at, ends_at),
    )


def _feedback_for(
    form: AllocationRequestForm, *, reads: SharedReads | None = None, admission: Admission | None = None
) -> RequestFeedback:
    """Feedback from whichever fields parse, even while others are still wrong or empty; once the
    request's every field parses, its quota lines are the checks of the decision approval would
    make on it (``admission``, or read here after the dry run), the decision its outlook shows."""
    return request_feedback(**_parsed(form, ("project", "flavor", "quantity", "cluster")), reads=reads,
                            request=_request_for(form) if admission is None else None, admission=admission)


def _outlook_of(user: User, admission: Admission | None) -> AdmissionOutlook | None:
    return outlook_of(user=user, admission=admission) if admission is not None else None


def _submit(
    request: HttpRequest, user: User, form: AllocationRequestForm, outlook: AdmissionOutlook | None
) -> tuple[HttpResponse | None, int]:
    """Submit a valid form, unless approval would reclaim grants or be refused and the box
    confirming it is not ticked: then the form is shown again, saying why (400)."""
    if outlook is not None and outlook.needs_confirmation and not form.cleaned_data["confirm"]:
        form.add_error("confirm", f"Confirm before submitting: {outlook.summary}")
        return None, 400
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
        return None, error.status
    messages.success(request, f"Request #{allocation.pk} submitted; your department admin decides on it.")
    return redirect("allocation-detail", allocation_id=allocation.pk), 302


@require_http_methods(["GET", "POST"])
@login_required
def allocation_new(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    form = AllocationRequestForm(request.POST or None, user=user)
    judged = _request_for(form) if form.is_bound else None
    admission = admission_read(allocation=judged) if judged is not None else None
    outlook = _outlook_of(user, admission)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            done, status = _submit(request, user, form, outlook)
            if done is not None:
                return done
        else:
            status = 400
    project_field = form.fields["project"]
    assert isinstance(project_field, forms.ModelChoiceField)
    context = {
        "title": "Request GPUs",
        "form": form,
        "feedback": _feedback_for(form, admission=admission) if form.is_bound else None,
        "outlook": outlook,
        "has_projects": project_field.queryset is not None and project_field.queryset.exists(),
    }
    if not context["has_projects"]:
        context["ask"] = admins_to_ask(user=user)
    return render(request, "frontend/allocation_form.html", context, status=status)


@require_GET
@login_required
def allocation_feedback(request: HttpRequest) -> HttpResponse:
    """The live feedback partial (HTMX), with the errors of the fields filled in so far, what
    approval would do and, when it would reclaim or be refused, the box that confirms it."""
    user = portal_user(request)
    form = AllocationRequestForm(request.GET, user=user, servable_only=False)
    form.is_valid()
    # Only fields the person has filled in get their errors now; the rest wait for the submit.
    oob_errors: dict[str, Any] = {
        name: form.errors.get(name, []) if str(request.GET.get(name, "")).strip() else []
        for name in form.fields if name != "confirm"  # its error slot comes with the confirmation slot
    }
    reads = SharedReads()  # the dry run and the decision share the clusters' states and the workload
    feedback = _feedback_for(form, reads=reads)
    context = {"feedback": feedback, "outlook": _outlook_of(user, feedback.admission), "form": form,
               "oob_errors": oob_errors, "oob": True}
    return render(request, "frontend/_feedback.html", context)


def _pending_change(user: User, allocation: Allocation, *, administers: bool, may_change: bool) -> dict[str, Any] | None:
    """The change waiting for approval, and what the viewer may do with it (as the services allow)."""
    change = next(iter(pending_changes(allocation)), None)
    if change is None:
        return None
    own = change.requested_by_id == user.pk
    four_eyes = settings.GPUPORTAL_FOUR_EYES and own
    return {"change": change, "can_decide": administers and not four_eyes, "four_eyes": administers and four_eyes,
            "can_cancel": own or may_change}


def detail_context(user: User, allocation: Allocation, **overrides: Any) -> dict[str, Any]:
    """Everything the allocation page shows. For a pending request, what approval would do now
    (its requester and its department's admins see it before anyone decides)."""
    access = access_for(user)
    timeline = allocation_timeline(allocation=allocation)
    pending = allocation.state == AllocationState.PENDING
    administers = access.can_administer_department(allocation.project.department_id)
    own = settings.GPUPORTAL_FOUR_EYES and allocation.requested_by_id == user.pk
    may_change = allocation_may_change(user=user, allocation=allocation)
    granted = allocation.state in CHANGEABLE_STATES
    context: dict[str, Any] = {
        "title": f"Allocation #{allocation.pk}",
        "allocation": allocation,
        "timeline": timeline,
        "standing": allocation_standing(user=user, allocation=allocation, timeline=timeline),
        "outlook": admission_outlook(user=user, allocation=allocation) if pending else None,
        "placement": reservations_where(allocation=allocation),
        "pushes": allocation_pushes(allocation=allocation)[:10],
        "renew_form": RenewForm.for_allocation(allocation, until=self_renew_until(allocation) if granted else None),
        "resize_form": ResizeForm.for_allocation(allocation),
        "can_change": allocation_changeable(user=user, allocation=allocation),
        "can_renew": may_change and granted,  # a pending request has nothing to renew: it is withdrawn and asked again
        "can_resize": may_change and granted,
        "pending_change": _pending_change(user, allocation, administers=administers, may_change=may_change),
        "can_decide": pending and administers and not own,
        "four_eyes": pending and administers and own,
        "usage": allocation_usage_panel(user=user, allocation=allocation),
        "guide": allocation_usage_guide_or_none(user=user, allocation=allocation),
        "idle_case": idle_case_list(user=user, states=sorted(OPEN_STATES), allocation_id=allocation.pk).first(),
        "why": why_panel(user=user, allocation=allocation),
        "pods_on_cluster": allocation.cluster_id is not None and allocation.state in ON_CLUSTER_STATES,
    }
    context.update(overrides)
    return context


@require_GET
@login_required
def allocation_detail(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    return render(request, "frontend/allocation_detail.html", detail_context(user, allocation))


@require_POST
@login_required
def allocation_release_view(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """Release (or withdraw) after a confirmation step: a POST without ``confirm=yes`` from someone
    who may release it answers with the confirmation page, which posts again with it."""
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    comment = request.POST.get("comment", "")[:TEXT_LIMIT]
    if request.POST.get("confirm") != "yes" and allocation_changeable(user=user, allocation=allocation):
        context = {"title": f"Release allocation #{allocation.pk}?", "allocation": allocation, "comment": comment}
        return render(request, "frontend/release_confirm.html", context)
    try:
        released = allocation_release(actor=user, allocation_id=allocation.pk, comment=comment)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Allocation #{released.pk} is now {released.get_state_display().lower()}.")
    return redirect("allocation-detail", allocation_id=allocation.pk)
