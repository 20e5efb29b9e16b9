"""The idle-grant inbox (``/idle/``): the open idle cases of the grants the reader may see, with
keep, release and exempt in one click each (``accounting.idle.cases``), the cases closed in the
last 7 days and the policies in force. Everyone with a role may open it; someone without one gets
403, a case outside the reader's departments 404."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounting.idle.cases import idle_case_exempt, idle_case_keep, idle_case_release
from accounting.idle.selectors import idle_case_get
from frontend.http import form_add_service_error, portal_user
from frontend.idle import idle_inbox
from frontend.idle_forms import FORMS
from kernel.clock import clock_now
from kernel.errors import ApplicationError
from kernel.times import minute_utc
from tenants.access import access_for


def _require_role(user: User) -> None:
    if not access_for(user).has_any_role:
        raise PermissionDenied("Idle grants are shown to the departments' members.")


def _page(request: HttpRequest, user: User, *, failed: dict[str, Any] | None = None, status: int = 200) -> HttpResponse:
    context = {"title": "Idle grants", **idle_inbox(user=user, now=clock_now()), "failed": failed or {}}
    return render(request, "frontend/idle_cases.html", context, status=status)


@require_GET
@login_required
def idle_cases(request: HttpRequest) -> HttpResponse:
    user = portal_user(request)
    _require_role(user)
    return _page(request, user)


@require_POST
@login_required
def idle_case_act(request: HttpRequest, case_id: int, action: str) -> HttpResponse:
    user = portal_user(request)
    _require_role(user)
    case = idle_case_get(user=user, case_id=case_id)
    form: forms.Form = FORMS[action](request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            if action == "keep":
                idle_case_keep(actor=user, case_id=case.pk, reason=data["reason"])
                messages.success(request, f"Allocation #{case.allocation_id} is kept; it will not be watched for a while.")
            elif action == "exempt":
                idle_case_exempt(actor=user, case_id=case.pk, until=data["until"], reason=data["reason"])
                messages.success(request, f"Allocation #{case.allocation_id} is exempt until {minute_utc(data['until'])}.")
            else:
                idle_case_release(actor=user, case_id=case.pk, comment=data["comment"])
                messages.success(request, f"Allocation #{case.allocation_id} is released.")
            return redirect("idle-cases")
        except ApplicationError as error:
            if error.status == 403:
                raise PermissionDenied(error.message) from None
            form_add_service_error(form, error)
    return _page(request, user, failed={"case": case.pk, "action": action, "form": form}, status=400)
