"""Platform admins map provider groups to department roles through the API (and the Django admin),
each change audited; nobody else reads or edits the table."""

from __future__ import annotations

import pytest
from django.test import Client

from audit.models import AuditEvent
from tenants.models import ExternalGroupMapping, Role
from tests.conftest import World

pytestmark = pytest.mark.django_db
URL = "/api/v1/group-mappings/"


def test_a_platform_admin_creates_lists_and_deletes_mappings_each_audited(world: World) -> None:
    client = world.client("platform")
    body = {"source": "oidc", "external_group": "/gpu/nlp-admins", "department": world.nlp.pk, "role": Role.DEPARTMENT_ADMIN}
    created = client.post(URL, body, format="json")
    assert created.status_code == 201, created.json()
    mapping = created.json()
    assert mapping["department"] == "nlp" and mapping["department_id"] == world.nlp.pk and mapping["source"] == "oidc"
    event = AuditEvent.objects.get(action="group_mapping.created")
    assert event.after == {"source": "oidc", "external_group": "/gpu/nlp-admins", "department": "nlp",
                           "role": Role.DEPARTMENT_ADMIN}
    assert event.department_id == world.nlp.pk

    assert client.post(URL, body, format="json").status_code == 409
    client.post(URL, {**body, "source": "ldap", "external_group": "cn=gpu,ou=groups,dc=example,dc=org"}, format="json")
    listed = client.get(URL, {"source": "ldap"}).json()
    assert [row["external_group"] for row in listed["results"]] == ["cn=gpu,ou=groups,dc=example,dc=org"]
    assert client.get(f"{URL}{mapping['id']}/").json()["external_group"] == "/gpu/nlp-admins"

    assert client.delete(f"{URL}{mapping['id']}/").status_code == 204
    assert not ExternalGroupMapping.objects.filter(pk=mapping["id"]).exists()
    assert AuditEvent.objects.get(action="group_mapping.deleted").before["external_group"] == "/gpu/nlp-admins"
    assert client.get(f"{URL}{mapping['id']}/").status_code == 404


def test_bad_input_names_the_field(world: World) -> None:
    client = world.client("platform")
    answer = client.post(URL, {"source": "saml", "external_group": "x", "department": world.nlp.pk, "role": "boss",
                               "colour": "red"}, format="json")
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == {"source", "role", "colour"}


def test_department_admins_may_not_map_groups(world: World) -> None:
    body = {"source": "oidc", "external_group": "g", "department": world.nlp.pk, "role": Role.DEPARTMENT_ADMIN}
    assert world.client("nlp_admin").post(URL, body, format="json").status_code == 403
    assert world.client("nlp_admin").get(URL).status_code == 403
    assert not ExternalGroupMapping.objects.exists()


def test_the_django_admin_edits_are_audited(world: World) -> None:
    from django.contrib.auth.models import User

    admin = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(admin)
    answer = client.post("/admin/tenants/externalgroupmapping/add/", {
        "source": "oidc", "external_group": "/gpu/vision", "department": world.vision.pk, "role": Role.RESEARCHER,
    })
    assert answer.status_code == 302, answer.content[:2000]
    mapping = ExternalGroupMapping.objects.get(external_group="/gpu/vision")
    assert AuditEvent.objects.get(action="group_mapping.created").details == {"via": "admin"}
    client.post(f"/admin/tenants/externalgroupmapping/{mapping.pk}/delete/", {"post": "yes"})
    assert AuditEvent.objects.filter(action="group_mapping.deleted").count() == 1


def test_a_django_admin_change_of_a_mapping_is_audited_as_updated_with_before_and_after(world: World) -> None:
    from django.contrib.auth.models import User

    admin = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(admin)
    mapping = ExternalGroupMapping.objects.create(source="oidc", external_group="/gpu/vision", department=world.vision,
                                                  role=Role.RESEARCHER)
    answer = client.post(f"/admin/tenants/externalgroupmapping/{mapping.pk}/change/", {
        "source": "oidc", "external_group": "/gpu/vision", "department": world.vision.pk, "role": Role.DEPARTMENT_ADMIN,
    })
    assert answer.status_code == 302, answer.content[:2000]
    assert not AuditEvent.objects.filter(action="group_mapping.created").exists()
    event = AuditEvent.objects.get(action="group_mapping.updated")
    assert (event.target_id, event.department_id) == (str(mapping.pk), world.vision.pk)
    assert event.before == {"role": Role.RESEARCHER} and event.after == {"role": Role.DEPARTMENT_ADMIN}
    assert event.details == {"via": "admin"}


def test_a_django_admin_change_of_a_role_grant_is_audited_as_changed_not_as_a_new_grant(world: World) -> None:
    from django.contrib.auth.models import User

    from tenants.models import Membership

    admin = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(admin)
    grant = Membership.objects.get(user=world.users["vision_member"], department=world.vision)
    answer = client.post(f"/admin/tenants/membership/{grant.pk}/change/", {
        "user": grant.user_id, "department": world.vision.pk, "role": Role.DEPARTMENT_ADMIN, "source": grant.source,
    })
    assert answer.status_code == 302, answer.content[:2000]
    assert not AuditEvent.objects.filter(action="membership.granted", target_id=str(grant.pk)).exists()
    event = AuditEvent.objects.get(action="membership.changed")
    assert (event.target_id, event.department_id) == (str(grant.pk), world.vision.pk)
    assert event.before == {"role": Role.RESEARCHER} and event.after == {"role": Role.DEPARTMENT_ADMIN}
