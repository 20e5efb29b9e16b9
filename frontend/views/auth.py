"""Login (audited and throttled) and logout."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from tenants.auth import auth_login_failed, auth_login_succeeded
from tenants.login_throttle import WINDOW_SECONDS, LoginThrottle


def _throttle_for(request: HttpRequest) -> LoginThrottle:
    return LoginThrottle.for_attempt(
        username=str(request.POST.get("username", "")), address=request.META.get("REMOTE_ADDR")
    )


class LoginView(auth_views.LoginView):
    """Django's login, with every attempt written to the audit log and repeated failures throttled."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True
    extra_context = {"title": "Log in"}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        throttle = _throttle_for(request)
        if throttle.blocked():
            auth_login_failed(username=throttle.username, via="portal", reason="throttled")
            # An unbound form: validating it would check the password, which is what we refuse to do.
            form = self.get_form_class()(request)
            context = {**self.get_context_data(form=form), "throttled_minutes": WINDOW_SECONDS // 60}
            return render(request, self.template_name, context, status=429)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        _throttle_for(self.request).succeeded()
        auth_login_succeeded(user=form.get_user(), via="portal")
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        _throttle_for(self.request).failed()
        auth_login_failed(username=str(form.data.get("username", "")), via="portal", reason="bad credentials")
        return super().form_invalid(form)


class LogoutView(auth_views.LogoutView):
    """Django's logout (POST only, so a link or image cannot log anyone out)."""
