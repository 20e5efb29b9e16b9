"""Login (audited, under the sign-in lockout; or through the OpenID Connect provider) and logout
(audited; it ends the provider's session too when the user signed in through it)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render

from tenants.auth import auth_logged_out, auth_login_succeeded
from tenants.oidc.conf import oidc_config, password_signin_enabled
from tenants.oidc.views import oidc_logout_url
from tenants.signin import SigninForm


class LoginView(auth_views.LoginView):
    """Django's login; the form checks the password through ``tenants.signin.signin_authenticate``, which
    audits failures and refuses a locked username or address (answered here with 429). With OIDC on,
    the page offers "Sign in with <provider>"; with ``GPUPORTAL_AUTH_PASSWORD`` off, only that."""

    template_name = "registration/login.html"
    authentication_form = SigninForm
    redirect_authenticated_user = True
    extra_context = {"title": "Log in"}

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        config = oidc_config()
        context["sso_name"] = config.name if config is not None else None
        context["password_signin"] = password_signin_enabled()
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not password_signin_enabled():
            context = self.get_context_data(form=self.get_form())
            return render(request, self.template_name, context, status=403)
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response

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
    """Django's logout (POST only, so a link or image cannot log anyone out), audited; a session that
    signed in through the provider goes on to the provider's end-session endpoint."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        provider_logout = oidc_logout_url(request)
        if request.user.is_authenticated:
            auth_logged_out(user=request.user, via="oidc" if provider_logout else "portal")
        response: HttpResponse = super().post(request, *args, **kwargs)
        if provider_logout is not None:
            return HttpResponseRedirect(provider_logout)
        return response
