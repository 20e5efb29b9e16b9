"""The portal's own error pages with ``DEBUG`` on (``make run``), unless Django's technical pages
are asked for with ``GPUPORTAL_DEBUG_PAGES=true``.

With ``DEBUG`` on, Django answers a 404 with a page listing every URL pattern, and an error with a
traceback, instead of calling the error handlers (``gpuportal/urls.py``): under the portal's strict
Content-Security-Policy they show unstyled, and they tell an outsider who opens another
department's allocation how the portal is built. This middleware answers what Django would have
answered with ``DEBUG`` off: the portal's 404, 400 and 500 pages (the JSON envelope under
``/api/``, ``kernel.api.errors``). A 403 already goes through its handler, even with ``DEBUG`` on.

Install it after ``CommonMiddleware`` (whose slash redirect needs to see the 404 of an unknown
path) and before ``DependencyUnavailableMiddleware`` (whose 503 comes first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, get_resolver

from kernel.api.errors import api_bad_request, api_not_found, api_server_error

logger = logging.getLogger("django.request")


def technical_pages() -> bool:
    """Whether Django's technical error pages are shown: ``DEBUG`` on and explicitly asked for."""
    return bool(settings.DEBUG and getattr(settings, "GPUPORTAL_DEBUG_PAGES", False))


class DebugErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.DEBUG and not technical_pages():
            try:  # an unknown path never reaches a view, so process_exception would not see its 404
                get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
            except Resolver404 as error:
                return api_not_found(request, error)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not settings.DEBUG or technical_pages() or isinstance(exception, PermissionDenied):
            return None
        if isinstance(exception, Http404):
            return api_not_found(request, exception)
        if isinstance(exception, (BadRequest, SuspiciousOperation)):
            return api_bad_request(request, exception)
        logger.error("Internal Server Error: %s", request.path, exc_info=exception)
        return api_server_error(request)
