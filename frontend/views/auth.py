"""Login (audited, under the sign-in lockout) and logout."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.shortcuts import render

from tenants.auth import auth_login_succeeded
from tenants.signin import SigninForm


class LoginView(auth_views.LoginView):
    """Django's login; the form checks the password through ``tenants.signin.signin_authenticate``, which
    audits failures and refuses a locked username or address (answered here with 429)."""

    template_name = "registration/login.html"
    authentication_form = SigninForm
    redirect_authenticated_user = True
    extra_context = {"title": "Log in"}

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        auth_login_succeeded(user=form.get_user(), via="portal")
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        lock = getattr(form, "lock", None)
        if lock is not None:
            context = {**self.get_context_data(form=form), "throttled_minutes": lock.retry_after_minutes}
            return render(self.request, self.template_name, context, status=429)
        return super().form_invalid(form)


class LogoutView(auth_views.LogoutView):
    """Django's logout (POST only, so a link or image cannot log anyone out)."""
