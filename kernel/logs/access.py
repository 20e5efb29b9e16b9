"""The access log: one line per request on the logger ``gpuportal.access``.

``GET /api/v1/me/ 200 (12.3 ms)`` with the fields ``method``, ``path``, ``query`` (its secret
parameters redacted; absent when empty), ``status``, ``duration_ms``, ``client_ip`` (through the
trusted proxies) and, from the record's context, ``request_id`` and ``user``. gunicorn's own access
log is off in favour of this one (``gpuportal/gunicorn_conf.py``), and ``runserver``'s is held back
(``kernel.logs.config``).

Probes and scrapes (``/livez``, ``/readyz``, ``/metrics``) are written at DEBUG, so that a load
balancer polling every few seconds does not drown the log; static files are served before this
middleware and not written at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from kernel.client_address import client_address
from kernel.logs.context import http_request_bound
from kernel.logs.redaction import redact_text

log = logging.getLogger("gpuportal.access")

QUIET_PATHS = frozenset({"/livez", "/readyz", "/metrics"})


class AccessLogMiddleware:
    """Listed right after ``kernel.request_context.RequestContextMiddleware`` (so every line has the
    request id) and before authentication (so records written while the request is served name its
    user once authentication has run)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        with http_request_bound(request):
            response = self.get_response(request)
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            level = logging.DEBUG if request.path in QUIET_PATHS else logging.INFO
            if log.isEnabledFor(level):
                fields: dict[str, object] = {
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": duration_ms,
                    "client_ip": client_address(request),
                }
                query = request.META.get("QUERY_STRING", "")
                if query:
                    fields["query"] = redact_text(query)
                log.log(level, "%s %s %s (%.1f ms)", request.method, request.path, response.status_code, duration_ms,
                        extra=fields)
        return response
