"""Changes to a grant's terms (``allocations.grants.changes``): renew and resize from the allocation page,
withdraw a pending change there, and approve or reject one from the approvals page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from allocations.catalogue.selectors import allocation_get
from allocations.grants.changes import (
    ChangeOutcome,
    allocation_change_approve,
    allocation_change_cancel,
    allocation_change_get,
    allocation_change_reject,
    allocation_renew,
    allocation_resize,
)
from allocations.models import Allocation
from frontend.forms import ChangeDecisionForm, RenewForm, ResizeForm
from frontend.http import form_add_service_error, portal_user
from frontend.views.allocations import detail_context
from kernel.errors import ApplicationError
from kernel.limits import TEXT_LIMIT
from kernel.times import minute_utc
from kernel.words import counted


def _told(request: HttpRequest, outcome: ChangeOutcome, applied: str) -> None:
    if outcome.applied:
        messages.success(request, applied)
    else:
        change = outcome.change
        assert change is not None  # not applied: it waits
        messages.success(request, f"Change #{change.pk} ({change.get_kind_display().lower()}) of allocation "
                                  f"#{outcome.allocation.pk} waits for a department admin's approval.")


def _shown_again(request: HttpRequest, user: User, allocation: Allocation, **forms: RenewForm | ResizeForm) -> HttpResponse:
    return render(request, "frontend/allocation_detail.html", detail_context(user, allocation, **forms), status=400)


@require_POST
@login_required
def allocation_renew_view(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """A later end: at once within the self-service window, else a change for an admin to approve."""
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    form = RenewForm(request.POST)
    if form.is_valid():
        try:
            outcome = allocation_renew(actor=user, allocation_id=allocation.pk, ends_at=form.cleaned_data["ends_at"],
                                       justification=form.cleaned_data["justification"])
        except ApplicationError as error:
            form_add_service_error(form, error)
        else:
            renewed = outcome.allocation
            _told(request, outcome, f"Allocation #{renewed.pk} now ends {minute_utc(renewed.ends_at)}.")
            return redirect("allocation-detail", allocation_id=allocation.pk)
    return _shown_again(request, user, allocation, renew_form=form)


@require_POST
@login_required
def allocation_resize_view(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """Fewer units at once; more as a change for an admin to approve."""
    user = portal_user(request)
    allocation = allocation_get(user=user, allocation_id=allocation_id)
    form = ResizeForm(request.POST)
    if form.is_valid():
        try:
            outcome = allocation_resize(actor=user, allocation_id=allocation.pk, quantity=form.cleaned_data["quantity"],
                                        justification=form.cleaned_data["justification"])
        except ApplicationError as error:
            form_add_service_error(form, error)
        else:
            resized = outcome.allocation
            _told(request, outcome, f"Allocation #{resized.pk} now has {counted(resized.quantity, 'unit')}.")
            return redirect("allocation-detail", allocation_id=allocation.pk)
    return _shown_again(request, user, allocation, resize_form=form)


@require_POST
@login_required
def change_cancel(request: HttpRequest, change_id: int) -> HttpResponse:
    user = portal_user(request)
    change = allocation_change_get(user=user, change_id=change_id)
    try:
        allocation_change_cancel(actor=user, change_id=change.pk)
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Change #{change.pk} withdrawn.")
    return redirect("allocation-detail", allocation_id=change.allocation_id)


@require_POST
@login_required
def change_decide(request: HttpRequest, change_id: int) -> HttpResponse:
    """Approve or reject one pending change; a refusal (four-eyes, admission, state) is the message."""
    user = portal_user(request)
    change = allocation_change_get(user=user, change_id=change_id)
    form = ChangeDecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"Change #{change.pk}: {error}")
    else:
        decision, comment = form.cleaned_data["decision"], form.cleaned_data["comment"][:TEXT_LIMIT]
        try:
            if decision == "approve":
                allocation_change_approve(actor=user, change_id=change.pk, comment=comment)
            else:
                allocation_change_reject(actor=user, change_id=change.pk, comment=comment)
        except ApplicationError as error:
            messages.error(request, f"Change #{change.pk} not {decision}d: {error.message}")
        else:
            messages.success(request, f"Change #{change.pk} of allocation #{change.allocation_id} {decision}d.")
    if request.POST.get("back") == "allocation":
        return redirect("allocation-detail", allocation_id=change.allocation_id)
    return redirect("approvals")
