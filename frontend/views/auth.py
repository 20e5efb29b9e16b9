"""The landing page and login. The full portal grows on these."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from allocations.selectors import allocation_list
from audit import actions
from audit.models import Outcome
from audit.services import audit_record
from tenants.access import access_for
from tenants.models import Membership


class LoginView(auth_views.LoginView):
    """Django's login, with every attempt written to the audit log."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        with transaction.atomic():
            audit_record(actor=form.get_user(), action=actions.AUTH_LOGIN, details={"via": "portal"})
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        with transaction.atomic():
            audit_record(
                actor=None,
                action=actions.AUTH_LOGIN_FAILED,
                details={"username": str(form.data.get("username", ""))[:150], "via": "portal"},
                outcome=Outcome.DENIED,
            )
        return super().form_invalid(form)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    access = access_for(request.user)
    memberships = Membership.objects.filter(user__pk=request.user.pk or 0).select_related("department")
    recent = allocation_list(user=request.user)[:10]
    return render(
        request,
        "frontend/home.html",
        {"access": access, "memberships": memberships, "recent": recent, "title": "Home"},
    )
