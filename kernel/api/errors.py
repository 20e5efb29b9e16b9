"""One place that turns every error into ``{"error": {"code", "message", "fields"}, "request_id"}``.

``exception_handler`` is DRF's: every error a view raises. The ``api_*`` views are Django's error
handlers (``gpuportal/urls.py``): under ``/api/`` they answer the same envelope for what never
reaches a DRF view's handler (an unhandled exception: a 500), and hand every other path to Django's
own HTML pages. ``api_unknown_path`` is the last route under ``/api/``: an unknown API URL. An
error saying that the database or the broker is down is a 503 with ``Retry-After`` instead, from the
exception handler, ``DependencyUnavailableMiddleware`` and the 500 handler (``kernel.unavailable``).
The request id is the one in the ``X-Request-ID`` header
(``kernel.request_context``): the caller quotes it, the operator finds it in the log.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, ResolverMatch, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from kernel.api.parsers import JsonTooDeep
from kernel.errors import ApplicationError
from kernel.request_context import current_request_context
from kernel.unavailable import (
    RETRY_AFTER_SECONDS,
    dependency_unavailable,
    unavailable_logged,
    unavailable_message,
    unavailable_page,
    unavailable_settled,
)

logger = logging.getLogger("gpuportal.api")
API_PREFIX = "/api/"


def _flatten(detail: Any) -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"field": [messages]}``; nested fields joined with dots."""
    fields: dict[str, list[str]] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list):
            if all(not isinstance(item, (dict, list)) for item in value):
                fields.setdefault(prefix or "non_field_errors", []).extend(str(item) for item in value)
            else:
                for index, inner in enumerate(value):
                    walk(f"{prefix}.{index}" if prefix else str(index), inner)
        else:
            fields.setdefault(prefix or "non_field_errors", []).append(str(value))

    walk("", detail)
    return fields


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "fields": fields or {}}
    body.update(extra)
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    dependency = dependency_unavailable(exc)
    if dependency is not None:  # the database or the broker is down: 503, try again (kernel.unavailable)
        request = context.get("request")
        if request is not None:
            unavailable_logged(request, dependency, exc)
            unavailable_settled(request._request)
        return Response(
            {**unavailable_body(dependency), "request_id": current_request_context().request_id},
            status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    response = _response(exc, context)
    if response is not None and isinstance(response.data, dict) and "error" in response.data:
        response.data["request_id"] = current_request_context().request_id
    return response


def _response(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        extra = {"details": exc.details} if exc.details else {}
        return Response(error_body(exc.code, exc.message, exc.fields, **extra), status=exc.status)
    if isinstance(exc, (ProtectedError, RestrictedError)):
        return _still_referenced(exc)
    if isinstance(exc, DjangoValidationError):
        fields = _flatten(as_serializer_error(exc))
        return Response(error_body("invalid", _summary(fields), fields), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ParseError):
        fields = {"body": [str(exc.detail)]}
        message = str(exc.detail) if isinstance(exc, JsonTooDeep) else "The request body is not valid JSON."
        response.data = error_body("parse_error", message, fields)
    elif isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        response.data = error_body("invalid", _summary(fields), fields)
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        code = exc.get_codes() if not isinstance(exc.get_codes(), (dict, list)) else exc.default_code
        response.data = error_body(str(code), str(detail))
    return response


def _still_referenced(exc: ProtectedError | RestrictedError) -> Response:
    """A delete that rows elsewhere still refer to (a foreign key that protects its target): 409
    naming what refers to it, whichever app those rows belong to."""
    rows = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
    counts = Counter(str(row._meta.verbose_name_plural) for row in rows)
    singular = {str(row._meta.verbose_name_plural): str(row._meta.verbose_name) for row in rows}
    what = ", ".join(f"{count} {singular[name] if count == 1 else name}" for name, count in sorted(counts.items()))
    message = f"It is still referred to by {what}; it cannot be removed."
    return Response(error_body("conflict", message, details={"referenced_by": dict(sorted(counts.items()))}), status=409)


def _summary(fields: dict[str, list[str]]) -> str:
    names = ", ".join(sorted(fields))
    return f"Invalid input in: {names}." if names else "Invalid input."


# ------------------------------------------------------------------ Django's handlers (urls.py)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def _json(code: str, message: str, status_code: int, request_id: str | None = None) -> JsonResponse:
    request_id = request_id or current_request_context().request_id
    return JsonResponse({**error_body(code, message), "request_id": request_id}, status=status_code)


def unavailable_body(dependency: str) -> dict[str, Any]:
    return error_body("service_unavailable", unavailable_message(dependency), details={"dependency": dependency})


def unavailable_json(dependency: str) -> JsonResponse:
    """The API's 503 while ``dependency`` is down (``kernel.unavailable``)."""
    response = JsonResponse({**unavailable_body(dependency), "request_id": current_request_context().request_id}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


def unavailable_answer(request: HttpRequest, dependency: str) -> HttpResponse:
    """503 with ``Retry-After``: the JSON envelope under ``/api/``, the HTML page elsewhere."""
    return unavailable_json(dependency) if _is_api(request) else unavailable_page(request, dependency)


class DependencyUnavailableMiddleware:
    """A view that failed because the database or the broker is down answers 503 instead of Django's
    500 (``process_exception``; with ``DEBUG`` on too, where the 500 handler is never called)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        dependency = dependency_unavailable(exception)
        if dependency is None:
            return None
        unavailable_logged(request, dependency, exception)
        unavailable_settled(request)
        return unavailable_answer(request, dependency)


def api_server_error(request: HttpRequest, template_name: str = defaults.ERROR_500_TEMPLATE_NAME) -> HttpResponse:
    """An unhandled exception (Django logs its traceback on ``django.request`` right after); one
    that says the database or the broker is down (raised in a middleware) answers 503 instead."""
    error = sys.exc_info()[1]
    dependency = dependency_unavailable(error)
    if dependency is not None:
        unavailable_settled(request)
        return unavailable_answer(request, dependency)
    if not _is_api(request):
        return defaults.server_error(request, template_name)
    request_id = current_request_context().request_id
    logger.error(
        "Server error on %s %s, request id %s: %s", request.method, request.path, request_id,
        repr(error) if error is not None else "unknown",
    )
    message = f"The server failed to handle this request. Quote request id {request_id} to the operator."
    return _json("server_error", message, 500, request_id)


def api_not_found(request: HttpRequest, exception: Exception, template_name: str = defaults.ERROR_404_TEMPLATE_NAME) -> HttpResponse:
    if not _is_api(request):
        return defaults.page_not_found(request, exception, template_name)
    return api_unknown_path(request)


@csrf_exempt  # an unknown URL is a 404 whoever asks: no CSRF 403 for a POST without a token
def api_unknown_path(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The last route under ``/api/`` (``gpuportal/urls.py``): any path no API view takes is a JSON
    404, whatever the method and even with ``DEBUG`` on (Django's own 404 page is HTML). A path that
    exists with a trailing slash says so instead of redirecting (a redirected POST loses its body)."""
    message = "No API endpoint at this URL."
    if not request.path_info.endswith("/"):
        match = _resolve(request.path_info + "/")
        if match is not None and match.func is not api_unknown_path:
            message += f" Did you mean {request.path}/ (with a trailing slash)?"
    return _json("not_found", message, 404)


def _resolve(path: str) -> ResolverMatch | None:
    try:
        return resolve(path)
    except Resolver404:
        return None


def api_bad_request(request: HttpRequest, exception: Exception, template_name: str = defaults.ERROR_400_TEMPLATE_NAME) -> HttpResponse:
    if not _is_api(request):
        return defaults.bad_request(request, exception, template_name)
    return _json("bad_request", "The request was refused as malformed.", 400)


def api_permission_denied(
    request: HttpRequest, exception: Exception, template_name: str = defaults.ERROR_403_TEMPLATE_NAME
) -> HttpResponse:
    if not _is_api(request):
        return defaults.permission_denied(request, exception, template_name)
    return _json("permission_denied", "You do not have permission to perform this action.", 403)
