"""Per-request context (request id, source address, user agent) for the audit log.

Services take an explicit ``actor``; the request metadata travels in a context variable so that
services called from views, tasks and management commands share one signature.
"""

from __future__ import annotations

import contextvars
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse

from kernel.client_address import client_address
from kernel.conf import setting_int

_REQUEST_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class RequestContext:
    request_id: str
    source_ip: str | None
    user_agent: str


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("gpuportal_request", default=None)


def current_request_context() -> RequestContext:
    """The context of the request being served, or a fresh one for background work."""
    context = _current.get()
    if context is None:
        return RequestContext(request_id=uuid.uuid4().hex, source_ip=None, user_agent="")
    return context


def active_request_context() -> RequestContext | None:
    """The context of the request (or task run) being served, ``None`` outside of one."""
    return _current.get()


def request_id_valid(text: str | None) -> bool:
    """Whether ``text`` may serve as a request id: 1 to 64 of letters, digits, ``.``, ``_`` and ``-``."""
    return bool(text) and _REQUEST_ID_PATTERN.match(str(text)) is not None


@contextmanager
def request_context(context: RequestContext) -> Iterator[None]:
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def _context_from_request(request: HttpRequest) -> RequestContext:
    # A caller's X-Request-ID is taken only from a trusted proxy (GPUPORTAL_TRUSTED_PROXIES >= 1:
    # the proxy in front sets or passes it, e.g. nginx's $request_id); reached directly, anyone could
    # forge it into the logs and the audit log, so the portal makes its own.
    supplied = request.headers.get("X-Request-ID", "") if setting_int("GPUPORTAL_TRUSTED_PROXIES") > 0 else ""
    request_id = supplied if request_id_valid(supplied) else uuid.uuid4().hex
    return RequestContext(
        request_id=request_id,
        source_ip=client_address(request),  # REMOTE_ADDR, or through GPUPORTAL_TRUSTED_PROXIES proxies
        user_agent=request.headers.get("User-Agent", "")[:512],
    )


class RequestContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        context = _context_from_request(request)
        request.request_id = context.request_id  # type: ignore[attr-defined]  # for records written after the chain (django.request)
        with request_context(context):
            response = self.get_response(request)
        response["X-Request-ID"] = context.request_id
        return response
