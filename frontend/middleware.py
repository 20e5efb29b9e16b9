"""Security headers for the portal's pages.

The portal loads only its own files (vendored HTMX, one small script, one stylesheet; charts are
inline SVG), so it runs under a strict Content-Security-Policy without 'unsafe-inline'. The API
documentation and the Django admin ship inline scripts of their own and keep their defaults.

Install after ``SecurityMiddleware``: ``"frontend.middleware.PortalSecurityHeadersMiddleware"``.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url

from tenants.oidc.conf import oidc_config

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    ]
)
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"
EXEMPT_PREFIXES = ("/api/", "/admin/")


class PortalSecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.path_info.startswith(EXEMPT_PREFIXES):
            return response
        response.headers.setdefault("Content-Security-Policy", content_security_policy())
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if getattr(request, "user", None) is not None and request.user.is_authenticated:
            # Pages show tenant data: keep them out of shared caches and the back-button cache after logout.
            response.headers.setdefault("Cache-Control", "no-store")
        return response


def content_security_policy() -> str:
    """The policy; with OIDC on, forms may also lead to the provider (the logout form is answered with a
    redirect to its end-session endpoint, and browsers hold redirects after a form to ``form-action``)."""
    config = oidc_config()
    if config is None:
        return CONTENT_SECURITY_POLICY
    issuer = urlsplit(config.issuer)
    return CONTENT_SECURITY_POLICY.replace("form-action 'self'", f"form-action 'self' {issuer.scheme}://{issuer.netloc}")


class HtmxLoginRedirectMiddleware:
    """An HTMX request whose session has expired (or ended) is answered 401 with ``HX-Redirect`` to the
    login page, which brings the whole page back there after signing in, instead of the login page
    being swapped into a fragment. It turns every redirect to the login page that a login-required
    view answers an HTMX request with; other requests are untouched. HTMX 2 follows ``HX-Redirect``
    before it looks at the status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.headers.get("HX-Request") != "true" or response.status_code not in (301, 302, 303, 307, 308):
            return response
        location = urlsplit(response.get("Location", ""))
        login = resolve_url(settings.LOGIN_URL)
        if location.path != login or location.netloc not in ("", request.get_host()):
            return response
        answer = HttpResponse(status=401)
        answer["HX-Redirect"] = f"{login}?{urlencode({'next': _current_page(request)})}"
        return answer


def _current_page(request: HttpRequest) -> str:
    """The page the browser shows (``HX-Current-URL``) when it is ours; else the requested path."""
    current = urlsplit(request.headers.get("HX-Current-URL", ""))
    if current.netloc == request.get_host() and current.path.startswith("/"):
        return current.path + (f"?{current.query}" if current.query else "")
    return request.get_full_path()
