"""The changes of the rules (quotas, priority classes) waiting for a second platform admin, on the
approvals page: approve or reject one (never one's own, four-eyes), or withdraw one's own
(``allocations.rules.changes``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from allocations.models.rule_changes import RuleChange, RuleChangeState
from allocations.rules.changes import (
    rule_change_approve,
    rule_change_get,
    rule_change_list,
    rule_change_reject,
    rule_change_withdraw,
)
from frontend.http import portal_user
from frontend.window_forms import WindowDecisionForm
from kernel.errors import ApplicationError
from tenants.access import access_for

QUEUE_LIMIT = 100


@dataclass(frozen=True)
class RuleChangeRow:
    change: RuleChange
    own: bool  # the admin's own proposal: another platform admin must decide (four-eyes)


def rule_change_rows(user: User) -> list[RuleChangeRow]:
    """The pending changes of the rules, oldest first, for platform admins (nobody else decides)."""
    if not access_for(user).is_platform_admin:
        return []
    pending = rule_change_list(user=user, state=RuleChangeState.PENDING).order_by("created_at", "id")[:QUEUE_LIMIT]
    four_eyes = settings.GPUPORTAL_FOUR_EYES
    return [RuleChangeRow(change=change, own=four_eyes and change.proposed_by_id == user.pk) for change in pending]


@require_POST
@login_required
def rule_change_decide(request: HttpRequest, change_id: int) -> HttpResponse:
    """Approve, reject or withdraw one pending change; a refusal (four-eyes, state, role, the
    catalogue's rules) is the message."""
    user = portal_user(request)
    change = rule_change_get(user=user, change_id=change_id)
    if request.POST.get("decision") == "withdraw":
        try:
            rule_change_withdraw(actor=user, change_id=change.pk)
        except ApplicationError as error:
            messages.error(request, f"Rule change #{change.pk} not withdrawn: {error.message}")
        else:
            messages.success(request, f"Rule change #{change.pk} withdrawn.")
        return redirect("approvals")
    form = WindowDecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for text in errors:
                messages.error(request, f"Rule change #{change.pk}: {text}")
        return redirect("approvals")
    decision, comment = form.cleaned_data["decision"], form.cleaned_data["comment"]
    try:
        if decision == "approve":
            rule_change_approve(actor=user, change_id=change.pk, comment=comment)
        else:
            rule_change_reject(actor=user, change_id=change.pk, comment=comment)
    except ApplicationError as error:
        messages.error(request, f"Rule change #{change.pk} not {decision}d: {error.message}")
    else:
        messages.success(request, f"Rule change #{change.pk} {'applied' if decision == 'approve' else 'rejected'}.")
    return redirect("approvals")
