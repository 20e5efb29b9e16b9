"""Security headers for the portal's pages.

The portal loads only its own files (vendored HTMX, one small script, one stylesheet; charts are
inline SVG), so it runs under a strict Content-Security-Policy without 'unsafe-inline'. The API
documentation and the Django admin ship inline scripts of their own and keep their defaults.

Install after ``SecurityMiddleware``: ``"frontend.middleware.PortalSecurityHeadersMiddleware"``.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

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
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if getattr(request, "user", None) is not None and request.user.is_authenticated:
            # Pages show tenant data: keep them out of shared caches and the back-button cache after logout.
            response.headers.setdefault("Cache-Control", "no-store")
        return response
