"""Denied requests go to the audit log: every 403, and every 401 that carried credentials.

Install after ``AuthenticationMiddleware`` (and after ``RequestContextMiddleware``, so the event
carries the request id). The event is written in its own transaction after the view has finished,
so the view's rollback cannot take it along; if it cannot be written the request fails (500)
rather than going unrecorded.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.http import HttpRequest, HttpResponseBase

from audit import actions
from audit.models import Outcome
from audit.services import audit_record

_CREDENTIAL_HEADERS = ("HTTP_AUTHORIZATION", "HTTP_X_API_KEY")


class AuditDenialMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        status = response.status_code
        if status == 403 or (status == 401 and any(request.META.get(name) for name in _CREDENTIAL_HEADERS)):
            audit_denial_record(request=request, status=status)
        return response


def audit_denial_record(*, request: HttpRequest, status: int) -> None:
    user = getattr(request, "user", None) or AnonymousUser()
    with transaction.atomic():
        audit_record(
            actor=user,
            action=actions.AUTH_DENIED if status == 403 else actions.AUTH_LOGIN_FAILED,
            details={"method": request.method or "", "path": request.path[:500], "status": status},
            outcome=Outcome.DENIED,
        )
