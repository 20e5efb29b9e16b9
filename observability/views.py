"""``GET /metrics``: the Prometheus text format, for a bearer token or, without one set, loopback."""

from __future__ import annotations

import hmac
import ipaddress

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from observability import conf
from observability.collectors import PortalCollector
from observability.process import process_collectors_register


def _refusal(status: int, text: str) -> HttpResponse:
    response = HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-store"
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def scrape_refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not read the metrics, or ``None`` when it may.

    With ``GPUPORTAL_METRICS_TOKEN`` set, the request must carry ``Authorization: Bearer <token>``
    (compared in constant time; 401 without it, 403 with another). Unset, only a client on the
    loopback address is answered (403 otherwise), so a portal without the setting never exposes its
    metrics beyond the machine. The address is the socket's (``REMOTE_ADDR``), never a forwarded
    header.
    """
    token = conf.metrics_token()
    if token is None:
        if _is_loopback(request.META.get("REMOTE_ADDR", "")):
            return None
        return _refusal(403, "GPUPORTAL_METRICS_TOKEN is not set: /metrics answers only on loopback.")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return _refusal(401, "Authorization: Bearer <GPUPORTAL_METRICS_TOKEN> is required.")
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        return _refusal(403, "The bearer token is not the metrics token.")
    return None


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = scrape_refusal(request)
    if refused is not None:
        return refused
    registry = CollectorRegistry()
    registry.register(PortalCollector())
    process_collectors_register(registry)
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)
    response["Cache-Control"] = "no-store"
    return response
