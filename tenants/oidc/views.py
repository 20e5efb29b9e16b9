"""The sign-in through the provider (mozilla-django-oidc's views, subclassed) and its logout URL.

``GET /oidc/login/?next=…`` sends the browser to the provider's authorization endpoint with a
fresh ``state``, ``nonce`` and PKCE ``code_challenge`` (S256), all kept in the session;
``GET /oidc/callback/`` checks the ``state``, exchanges the code (with the ``code_verifier``) and
hands the ID token to ``backend.OidcBackend``. Both answer 404 while OIDC is off.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from tenants.oidc.accounts import oidc_signin_failed
from tenants.oidc.conf import OidcConfig, oidc_config
from tenants.oidc.library import library_setting
from tenants.oidc.provider import ProviderUnavailable, provider_metadata

logger = logging.getLogger(__name__)
ID_TOKEN_SESSION_KEY = "oidc_id_token"  # noqa: S105 - a session key name; where the library keeps the ID token (OIDC_STORE_ID_TOKEN)


def _config(request: HttpRequest) -> OidcConfig:
    config = oidc_config()
    if config is None:
        raise Http404("Single sign-on is not configured.")
    return config


class OidcLoginView(OIDCAuthenticationRequestView):  # type: ignore[misc]  # the library has no type hints
    get_settings = staticmethod(library_setting)

    def __init__(self, **kwargs: object) -> None:
        View.__init__(self, **kwargs)  # the library's reads the endpoints from settings: here, from discovery

    def get(self, request: HttpRequest) -> HttpResponseBase:
        config = _config(request)
        try:
            metadata = provider_metadata(issuer=config.issuer, timeout=config.timeout)
        except ProviderUnavailable as exc:
            logger.warning("OIDC sign-in could not start: %s", exc)
            messages.error(request, f"{config.name} cannot be reached now. Try again in a moment.")
            return redirect("login")
        self.OIDC_OP_AUTH_ENDPOINT = metadata["authorization_endpoint"]
        self.OIDC_RP_CLIENT_ID = config.client_id
        response: HttpResponseBase = super().get(request)
        return response


class OidcCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    get_settings = staticmethod(library_setting)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        config = _config(request)
        error = request.GET.get("error")
        if error:
            oidc_signin_failed(reason=f"the provider answered {error[:100]}: {request.GET.get('error_description', '')[:300]}")
        self.config = config
        response: HttpResponseBase = super().get(request)
        return response

    def login_failure(self) -> HttpResponse:
        messages.error(self.request, f"Signing in with {self.config.name} did not succeed. Try again, or ask a platform admin.")
        return redirect("login")


def oidc_logout_url(request: HttpRequest) -> str | None:
    """Where to send the browser to end its session at the provider too (RP-initiated logout, with
    ``id_token_hint`` and ``post_logout_redirect_uri``), or ``None`` (OIDC off, the provider has no
    ``end_session_endpoint`` or cannot be reached, or this session did not sign in through it).
    Call before the session ends: the ID token is in it."""
    config = oidc_config()
    id_token = request.session.get(ID_TOKEN_SESSION_KEY)
    if config is None or not id_token:
        return None
    try:
        endpoint = provider_metadata(issuer=config.issuer, timeout=config.timeout).get("end_session_endpoint")
    except ProviderUnavailable:
        return None
    if not isinstance(endpoint, str) or not endpoint:
        return None
    query = urlencode({
        "id_token_hint": id_token, "client_id": config.client_id,
        "post_logout_redirect_uri": request.build_absolute_uri(reverse("login")),
    })
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
