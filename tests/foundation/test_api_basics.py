"""Tokens, the OpenAPI schema and docs, pagination, the landing page and the demo data."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from allocations.models import Flavor, Quota
from audit.models import AuditEvent
from tenants.models import Membership
from tests.conftest import World


def test_it_issues_a_token_that_authenticates_api_calls(world: World) -> None:
    anonymous = APIClient()
    response = anonymous.post("/api/v1/auth/token/", {"username": "nlp_member", "password": "pw-nlp_member"}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    me = client.get("/api/v1/me/").json()
    assert me["username"] == "nlp_member"
    assert me["memberships"] == [{"department": "nlp", "department_id": world.nlp.pk, "role": "researcher"}]
    issued = AuditEvent.objects.get(action="access_token.created")
    assert issued.details == {"via": "password"}
    assert token not in str(issued.details) and token not in str(issued.after)


def test_it_refuses_and_audits_a_wrong_password_without_storing_it(world: World) -> None:
    response = APIClient().post("/api/v1/auth/token/", {"username": "nlp_member", "password": "guess-123"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_credentials"
    failed = AuditEvent.objects.get(action="auth.login_failed")
    assert failed.outcome == "denied"
    assert failed.details["username"] == "nlp_member"
    assert "guess-123" not in str(failed.details)


def test_it_rejects_a_bad_token_with_401(world: World) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/v1/allocations/").status_code == 401


def test_it_serves_the_openapi_schema_with_every_endpoint(world: World) -> None:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/api/v1/allocations/", "/api/v1/allocations/{allocation_id}/approve/", "/api/v1/quotas/",
                 "/api/v1/auth/token/", "/api/v1/nodes/", "/api/v1/priority-classes/"):
        assert path in paths


def test_it_serves_the_interactive_docs_without_a_cdn(world: World) -> None:
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page
    assert "cdn" not in page.lower() and "unpkg" not in page.lower()


def test_it_paginates_lists(world: World) -> None:
    client = world.client("platform")
    first = client.get("/api/v1/quotas/?page_size=3").json()
    assert first["count"] == 7 and len(first["results"]) == 3 and first["next"]
    assert len(client.get(first["next"]).json()["results"]) == 3


def test_it_reports_quota_usage(world: World) -> None:
    rows = world.client("nlp_admin").get(f"/api/v1/quotas/?department={world.nlp.pk}").json()["results"]
    a100 = next(row for row in rows if row["flavor"] == "a100")
    assert a100["unit"] == "units"
    assert (a100["in_use"], a100["limit"], a100["available"]) == ("0.0000", "8.0000", "8.0000")


def test_it_shows_the_landing_page_after_an_audited_login(world: World) -> None:
    client = Client()
    assert client.get("/").status_code == 302
    response = client.post("/login/", {"username": "nlp_admin", "password": "pw-nlp_admin"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    assert AuditEvent.objects.filter(action="auth.login", actor_username="nlp_admin").exists()


@pytest.mark.django_db
def test_it_seeds_the_demo_data_idempotently() -> None:
    call_command("seed_demo")
    counts = (Membership.objects.count(), Flavor.objects.count(), Quota.objects.count())
    call_command("seed_demo")
    assert (Membership.objects.count(), Flavor.objects.count(), Quota.objects.count()) == counts
    assert set(Flavor.objects.values_list("sharing_mode", flat=True)) == {"exclusive", "mig", "mps", "timeslice", "vgpu"}
    client = APIClient()
    token = client.post("/api/v1/auth/token/", {"username": "alice", "password": "demo"}, format="json")
    assert token.status_code == 200
