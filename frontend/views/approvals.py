"""Department admin pages: the approvals queue (requests, and changes to grants: decided in
``frontend.views.changes``) and the department's usage."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from allocations.fair_share.reads import FairShareStanding, fair_share_table
from allocations.grants.services import allocation_approve, allocation_reject
from allocations.models import Allocation, AllocationChange
from allocations.models.windows import WindowState
from allocations.windows.services import quota_window_list
from frontend.accounting import department_accounting
from frontend.feedback import RequestFeedback, decision_feedback, request_feedback
from frontend.forms import DecisionForm
from frontend.http import portal_user
from frontend.outlook import AdmissionOutlook, admission_read, outlook_of
from frontend.selectors import (
    department_promises,
    holding_by_project,
    pending_changes_for_decision,
    pending_for_decision,
    quota_bars,
)
from frontend.views.rule_changes import rule_change_rows
from frontend.views.windows import WindowRow, window_rows
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.reads import SharedReads
from tenants.access import Access, access_for
from tenants.selectors import department_list

QUEUE_LIMIT = 100
DECIDED = {"approve": "Approved", "reject": "Rejected"}
OUTLOOK_ROWS = 5
"""The approvals queue says what approval would do (reclaim which grants, or why it would be
refused), and the quota lines of that decision, for its first ``OUTLOOK_ROWS`` requests, which an
admin decides first (the queue's order: the department least served for its fair share first, then
the oldest): each is a full admission read (``allocations.admission.planning.admission_decide``: a
few queries for the quota tree and the grants overlapping the request, three per candidate
cluster, and four for the segments of its quota lines), which shares no reads with the others, so
the queue's cost stays bounded however long it is. Every other request reads the same decision
when its row comes into view (``approval_decision``, one HTMX request per row), and links to its
page, which says it too, for a browser without scripts."""


@dataclass(frozen=True)
class QueueRow:
    allocation: Allocation
    feedback: RequestFeedback
    outlook: AdmissionOutlook | None  # None beyond the first OUTLOOK_ROWS
    own: bool  # the admin's own request: another admin must decide (four-eyes)
    fair_share: FairShareStanding | None  # its department's: the queue is in this order, then oldest first


@dataclass(frozen=True)
class ChangeRow:
    change: AllocationChange
    own: bool  # the admin's own change: another admin must decide (four-eyes)


def _changes(user: User) -> list[ChangeRow]:
    four_eyes = settings.GPUPORTAL_FOUR_EYES
    return [ChangeRow(change=change, own=four_eyes and change.requested_by_id == user.pk)
            for change in pending_changes_for_decision(user=user)[:QUEUE_LIMIT]]


def _windows(user: User) -> list[WindowRow]:
    """Quota windows waiting for a platform admin: all of them for platform admins, those of the
    departments they administer for department admins (to follow and withdraw their own)."""
    access = access_for(user)
    pending = quota_window_list(user=user, state=WindowState.PENDING)
    if not access.is_platform_admin:
        pending = pending.filter(quota__department_id__in=access.administered)
    return window_rows(user, list(pending.order_by("created_at", "id")[:QUEUE_LIMIT]), clock_now())


def _require_admin(access: Access) -> None:
    if not (access.is_platform_admin or access.administered):
        raise PermissionDenied("Only department admins decide on requests.")


def _row(user: User, allocation: Allocation, *, reads: SharedReads, judged: bool, own: bool,
         fair_share: FairShareStanding | None) -> QueueRow:
    """One request of the queue; ``judged``: with what approval would do, whose checks are then
    its quota lines (one decision for both); else neither, and its page says them."""
    admission = admission_read(allocation=allocation) if judged else None
    return QueueRow(
        allocation=allocation,
        feedback=request_feedback(
            project=allocation.project, flavor=allocation.flavor, quantity=allocation.quantity,
            cluster=allocation.cluster, reads=reads, admission=admission,
        ),
        outlook=outlook_of(user=user, admission=admission) if admission is not None else None,
        own=own,
        fair_share=fair_share,
    )


def _queue(user: User, standings: dict[int, FairShareStanding]) -> list[QueueRow]:
    reads = SharedReads()  # the requests' previews share their reads: none runs once per request
    four_eyes = settings.GPUPORTAL_FOUR_EYES
    factors = {department_id: standing.factor for department_id, standing in standings.items()}
    return [
        _row(user, allocation, reads=reads, judged=index < OUTLOOK_ROWS,
             own=four_eyes and allocation.requested_by_id == user.pk,
             fair_share=standings.get(allocation.project.department_id))
        for index, allocation in enumerate(pending_for_decision(user=user, factors=factors)[:QUEUE_LIMIT])
    ]


@require_GET
@login_required
def approval_decision(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """One request of the queue beyond its first ``OUTLOOK_ROWS``: the quota lines and the outlook
    of the decision approval would make on it now, read as for the first rows (``admission_read``,
    ``outlook_of``), loaded when its row comes into view. Only a request in the viewer's own queue:
    any other (another department's, one decided already, anyone's who decides none) answers 404,
    as if it did not exist."""
    user = portal_user(request)
    allocation = pending_for_decision(user=user).filter(pk=allocation_id).first()
    if allocation is None:
        raise Http404("No such request waits for your decision.")
    admission = admission_read(allocation=allocation)
    context = {"allocation": allocation, "feedback": decision_feedback(admission),
               "outlook": outlook_of(user=user, admission=admission)}
    return render(request, "frontend/_queue_decision.html", context)


def _decide(request: HttpRequest, user: User, form: DecisionForm) -> None:
    """Apply one decision to each selected request; each succeeds or fails on its own."""
    decision, comment = form.cleaned_data["decision"], form.cleaned_data["comment"]
    done: list[str] = []
    for allocation_id in form.cleaned_data["selected"]:
        try:
            if decision == "approve":
                allocation_approve(actor=user, allocation_id=allocation_id, comment=comment)
            else:
                allocation_reject(actor=user, allocation_id=allocation_id, comment=comment)
        except ApplicationError as error:
            messages.error(request, f"#{allocation_id} not {DECIDED[decision].lower()}: {error.message}")
        else:
            done.append(f"#{allocation_id}")
    if done:
        messages.success(request, f"{DECIDED[decision]} {', '.join(done)}.")


@require_http_methods(["GET", "POST"])
@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    _require_admin(access_for(user))
    standings = fair_share_table(now=clock_now()).standings()  # the queue's order: two queries
    factors = {department_id: standing.factor for department_id, standing in standings.items()}
    pending_ids = list(pending_for_decision(user=user, factors=factors).values_list("pk", flat=True)[:QUEUE_LIMIT])
    form = DecisionForm(request.POST or None, pending_ids=pending_ids)
    if request.method == "POST":
        if form.is_valid():
            _decide(request, user, form)
            return redirect("approvals")
    context = {"title": "Approvals", "rows": _queue(user, standings), "changes": _changes(user), "form": form,
               "windows": _windows(user), "rule_changes": rule_change_rows(user)}
    return render(request, "frontend/approvals.html", context, status=400 if form.errors else 200)


@require_GET
@login_required
def department_usage(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    access = access_for(user)
    _require_admin(access)
    departments = department_list(user=user)
    if not access.is_platform_admin:
        departments = departments.filter(id__in=access.administered)
    department_ids = list(departments.values_list("id", flat=True))
    context = {
        "title": "Department usage",
        "departments": departments,
        "bars": quota_bars(user=user, department_ids=department_ids),
        "promises": department_promises(user=user, department_ids=department_ids),
        "holding": holding_by_project(user=user, department_ids=department_ids),
        **department_accounting(user=user, department_ids=department_ids, now=clock_now()),
    }
    return render(request, "frontend/department_usage.html", context)
