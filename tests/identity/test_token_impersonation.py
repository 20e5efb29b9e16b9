"""Nobody acts as someone else with an API token: the Django admin mints no key for anyone (DRF's
plaintext token page is gone), a platform admin may only *issue* a token whose text its owner alone
claims, audited with both names, and an approval is credited to whoever really holds the key."""

from __future__ import annotations

import datetime
import importlib
import re
from typing import Any

import pytest
from django.apps import apps as global_apps
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.grants import services
from allocations.models import Allocation, AllocationState
from audit.models import AuditEvent
from kernel.errors import FieldError, NotAllowed
from tenants.access_tokens import access_token_issue
from tenants.models import PersonalAccessToken
from tests.conftest import World

pytestmark = pytest.mark.django_db
TOKENS = "/api/v1/auth/tokens/"
ADD = "/admin/tenants/personalaccesstoken/add/"
ANY_KEY = re.compile(r"\b[0-9a-f]{40}\b|gpp_[A-Za-z0-9]{55}")


def admin_site(world: World) -> Client:
    user = world.users["platform"]
    user.is_staff = True
    user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def bearer(text: str, scheme: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {text}")
    return client


def requested(world: World, persona: str) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=world.llm, flavor=world.a100, quantity=1, priority_class=world.standard,
        starts_at=start, ends_at=start + datetime.timedelta(days=2), justification="impersonation",
    )


def issue_in_admin(client: Client, owner: User, **fields: Any) -> Any:
    body = {"user": owner.pk, "name": "ci pipeline", "scope": "write", "issue_reason": "service account for CI",
            "expires_at_0": "", "expires_at_1": "", **fields}
    return client.post(ADD, body, follow=True)


def test_the_admin_site_offers_no_page_that_mints_a_key_for_someone_else(world: World) -> None:
    client = admin_site(world)
    for url in ("/admin/authtoken/tokenproxy/", "/admin/authtoken/tokenproxy/add/",
                "/admin/authtoken/token/", "/admin/authtoken/token/add/"):
        assert client.get(url).status_code == 404, url
    index = client.get("/admin/").content.decode()
    assert "authtoken" not in index and "Personal access tokens" in index


def test_a_platform_admin_cannot_approve_their_own_request_with_a_department_admins_key(world: World) -> None:
    """The reported path: mint the department admin's key in the admin site, approve one's own
    request with it, and the log credits the department admin. Now no page yields a key."""
    client = admin_site(world)
    own = requested(world, "platform")
    owner = world.users["nlp_admin"]
    pages = [client.post("/admin/authtoken/tokenproxy/add/", {"user": owner.pk}, follow=True)]
    pages.append(client.get("/admin/authtoken/tokenproxy/"))
    pages.append(issue_in_admin(client, owner))
    pages.append(client.get("/admin/tenants/personalaccesstoken/"))
    token = PersonalAccessToken.objects.filter(user=owner).first()
    if token is not None:
        pages.append(client.get(f"/admin/tenants/personalaccesstoken/{token.pk}/change/"))
    keys = {key for page in pages for key in ANY_KEY.findall(page.content.decode())}

    for key in sorted(keys | {"0" * 40} | ({token.key_hash} if token else set())):  # whatever an operator can read
        for scheme in ("Token", "Bearer"):
            response = bearer(key, scheme).post(f"/api/v1/allocations/{own.pk}/approve/", {"comment": "as nlp_admin"},
                                                format="json")
            assert response.status_code == 401, (key, response.content)
    own.refresh_from_db()
    assert own.state == AllocationState.PENDING and own.decided_by is None
    assert not AuditEvent.objects.filter(action="allocation.approved").exists()
    assert keys == set() and token is not None
    assert client.post(f"{TOKENS}{token.pk}/claim/", content_type="application/json").status_code == 404  # the owner only


def test_an_issued_token_is_audited_with_both_names_and_only_its_owner_gets_its_text(world: World) -> None:
    client = admin_site(world)
    owner = world.users["nlp_admin"]
    page = issue_in_admin(client, owner).content.decode()
    assert "issued for nlp_admin" in page and "you will not see it" in page

    token = PersonalAccessToken.objects.get(user=owner)
    assert token.issued_by == world.users["platform"] and token.pending and token.claimed_at is None
    event = AuditEvent.objects.get(action="access_token.issued")
    assert event.actor_username == "platform"
    assert event.details == {"via": "admin", "owner": "nlp_admin", "issued_by": "platform",
                             "reason": "service account for CI"}
    assert event.after["prefix"] == token.prefix and token.key_hash not in str(event.after)

    listed = world.client("nlp_admin").get(TOKENS).json()["results"]
    assert [(t["state"], t["issued_by"], t["issue_reason"]) for t in listed] == [
        ("pending", "platform", "service account for CI")
    ]
    assert "token" not in listed[0]
    claimed = world.client("nlp_admin").post(f"{TOKENS}{token.pk}/claim/")
    assert claimed.status_code == 201 and claimed["Cache-Control"] == "no-store"
    text = claimed.json()["token"]
    assert text.startswith(token.prefix) and claimed.json()["state"] == "active"
    claim_event = AuditEvent.objects.get(action="access_token.claimed")
    assert claim_event.actor_username == "nlp_admin" and claim_event.details["issued_by"] == "platform"
    assert text not in str(claim_event.after) + str(claim_event.details)
    assert world.client("nlp_admin").post(f"{TOKENS}{token.pk}/claim/").status_code == 409  # once

    # What the token does is its owner's act, and the log says so.
    request = requested(world, "nlp_member")
    approved = bearer(text).post(f"/api/v1/allocations/{request.pk}/approve/", {"comment": "ok"}, format="json")
    assert approved.status_code == 200, approved.content
    assert AuditEvent.objects.get(action="allocation.approved").actor_username == "nlp_admin"


def test_issuing_is_for_platform_admins_with_a_reason_and_never_for_oneself(world: World) -> None:
    owner = world.users["nlp_member"]
    with pytest.raises(NotAllowed):
        access_token_issue(actor=world.users["nlp_admin"], user=owner, name="ci", scope="read", reason="because")
    with pytest.raises(FieldError) as own:
        access_token_issue(actor=world.users["platform"], user=world.users["platform"], name="ci", scope="read",
                           reason="because")
    assert "user" in own.value.fields
    with pytest.raises(FieldError) as unreasoned:
        access_token_issue(actor=world.users["platform"], user=owner, name="ci", scope="read", reason="  ")
    assert "reason" in unreasoned.value.fields
    assert not PersonalAccessToken.objects.exists()

    page = issue_in_admin(admin_site(world), world.users["platform"]).content.decode()
    assert "Create your own tokens" in page and not PersonalAccessToken.objects.exists()


def test_a_staff_member_who_is_not_a_platform_admin_cannot_issue(world: World) -> None:
    user = world.users["nlp_admin"]
    user.is_staff = True  # the Django permission to add tokens, but not the portal's platform admin role
    user.save()
    user.user_permissions.add(Permission.objects.get(codename="add_personalaccesstoken"))
    client = Client()
    client.force_login(user)
    assert client.get(ADD).status_code == 403
    assert issue_in_admin(client, world.users["nlp_member"]).status_code == 403
    assert not PersonalAccessToken.objects.exists()


def test_a_revoked_or_expired_issued_token_cannot_be_claimed(world: World) -> None:
    owner = world.users["nlp_member"]
    revoked = access_token_issue(actor=world.users["platform"], user=owner, name="a", scope="read", reason="r")
    expired = access_token_issue(actor=world.users["platform"], user=owner, name="b", scope="read", reason="r")
    PersonalAccessToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    PersonalAccessToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    for token in (revoked, expired):
        response = world.client("nlp_member").post(f"{TOKENS}{token.pk}/claim/")
        assert response.status_code == 409, response.content
    assert world.client("vision_member").post(f"{TOKENS}{revoked.pk}/claim/").status_code == 404
    own = world.client("nlp_member").post(TOKENS, {"name": "mine"}, format="json").json()
    assert world.client("nlp_member").post(f"{TOKENS}{own['id']}/claim/").status_code == 409


class Editor:
    """What the migration's function uses of a schema editor, inside the test's transaction."""

    connection = connection

    def execute(self, sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)


def test_the_migration_drops_stored_plaintext_keys(world: World) -> None:
    migration = importlib.import_module("tenants.migrations.0004_access_token_issued")
    temporary = "TEMP" if connection.vendor == "postgresql" else ""  # the tests' role creates no tables in public
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE {temporary} TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp, user_id integer)")
        cursor.execute("INSERT INTO authtoken_token VALUES ('0123456789abcdef0123456789abcdef01234567', NULL, %s)",
                       [world.users["nlp_admin"].pk])
    migration.legacy_keys_drop(global_apps, Editor())
    assert "authtoken_token" not in connection.introspection.table_names()
    migration.legacy_keys_drop(global_apps, Editor())  # nothing left to drop: no error
    response = bearer("0123456789abcdef0123456789abcdef01234567").get("/api/v1/me/")
    assert response.status_code == 401 and "old kind" in response.json()["error"]["message"]


def test_the_portal_lists_an_issued_token_as_pending_and_shows_its_text_to_its_owner_once(world: World) -> None:
    token = access_token_issue(actor=world.users["platform"], user=world.users["nlp_member"], name="ci",
                               scope="read", reason="the lab's CI runner")
    owner = Client()
    owner.force_login(world.users["nlp_member"])
    page = owner.get("/account/tokens/").content.decode()
    assert "issued for you by platform: the lab&#x27;s CI runner" in page and "pending" in page
    stranger = Client()
    stranger.force_login(world.users["vision_member"])
    assert stranger.post(f"/account/tokens/{token.pk}/claim/").status_code == 404
    claimed = owner.post(f"/account/tokens/{token.pk}/claim/")
    assert claimed.status_code == 200 and "claimed" in claimed.content.decode()
    text = ANY_KEY.findall(claimed.content.decode())
    assert len(text) == 1 and text[0].startswith(token.prefix)
    assert bearer(text[0]).get("/api/v1/me/").json()["username"] == "nlp_member"
    again = owner.post(f"/account/tokens/{token.pk}/claim/", follow=True).content.decode()
    assert "not waiting to be claimed" in again and not ANY_KEY.findall(again)
