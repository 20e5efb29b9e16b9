"""Denied requests are recorded: every 403, and a 401 that carried credentials (a bad token)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from audit.middleware import AuditDenialMiddleware
from audit.models import AuditEvent
from kernel.request_context import RequestContext, request_context
from tests.conftest import World

pytestmark = pytest.mark.django_db


def answer(status: int) -> AuditDenialMiddleware:
    return AuditDenialMiddleware(lambda request: HttpResponse(status=status))


def latest() -> AuditEvent | None:
    return AuditEvent.objects.order_by("-seq").first()


def test_a_403_is_recorded_with_who_what_and_where(world: World) -> None:
    request = RequestFactory().delete("/api/v1/quotas/3/\x1b[2J")
    request.user = world.users["nlp_member"]
    with request_context(RequestContext(request_id="r-403", source_ip="192.0.2.7", user_agent="pytest")):
        assert answer(403)(request).status_code == 403
    event = latest()
    assert event is not None and event.action == "auth.denied" and event.outcome == "denied"
    assert event.actor_username == "nlp_member" and event.request_id == "r-403"
    assert event.details == {"method": "DELETE", "path": "/api/v1/quotas/3/\\x1b[2J", "status": 403}
    assert event.source_ip == "192.0.2.7"


def test_a_401_with_credentials_is_a_failed_login_without_the_token(world: World) -> None:
    request = RequestFactory().get("/api/v1/allocations/", HTTP_AUTHORIZATION="Token very-secret-value")
    request.user = AnonymousUser()
    answer(401)(request)
    event = latest()
    assert event is not None and event.action == "auth.login_failed" and event.actor_id is None
    assert "very-secret-value" not in event.record


@pytest.mark.parametrize("status", [200, 302, 404, 500])
def test_other_answers_are_not_denials(status: int) -> None:
    before = latest()
    request: HttpRequest = RequestFactory().get("/")
    request.user = AnonymousUser()
    answer(status)(request)
    answer(401)(request)  # no credentials: a login prompt, not an attempt
    assert latest() == before
