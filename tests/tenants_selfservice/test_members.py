"""Department self-service through the API: department admins add and remove department roles and
project members, edit projects; outsiders get 404, researchers 403; roles from an identity provider
are not removable; the last admin stays; every change is audited."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from audit.models import AuditEvent
from tenants.models import Membership, MembershipSource, Role
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("pk"))


def _newcomer(email: str = "ada@example.org") -> User:
    return User.objects.create_user(username="ada", email=email, password="x")


def test_a_department_admin_adds_a_researcher_by_email_and_it_is_audited(world: World) -> None:
    newcomer = _newcomer("Ada@Example.org")
    response = world.client("nlp_admin").post(
        f"/api/v1/departments/{world.nlp.pk}/members/", {"user": "ada@example.org", "role": "researcher"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["username"] == "ada" and response.json()["source"] == "manual"
    assert Membership.objects.filter(user=newcomer, department=world.nlp, role=Role.RESEARCHER).exists()
    [event] = _events("membership.granted")
    assert event.actor_id == world.users["nlp_admin"].pk and event.after == {"user": "ada", "role": "researcher"}
    listed = world.client("nlp_member").get(f"/api/v1/departments/{world.nlp.pk}/members/").json()
    assert {(row["username"], row["role"]) for row in listed["results"]} >= {("ada", "researcher"),
                                                                             ("nlp_admin", "department_admin")}


def test_an_unknown_user_is_a_400_saying_where_accounts_come_from(world: World) -> None:
    response = world.client("nlp_admin").post(
        f"/api/v1/departments/{world.nlp.pk}/members/", {"user": "ghost", "role": "researcher"}, format="json")
    assert response.status_code == 400
    assert "sign in" in response.json()["error"]["fields"]["user"][0]


def test_outsiders_get_404_and_researchers_403_and_nothing_changes(world: World) -> None:
    _newcomer()
    url = f"/api/v1/departments/{world.nlp.pk}/members/"
    assert world.client("vision_admin").post(url, {"user": "ada", "role": "researcher"}, format="json").status_code == 404
    assert world.client("nlp_member").post(url, {"user": "ada", "role": "researcher"}, format="json").status_code == 403
    assert world.client("nlp_admin").post(url, {"user": "ada", "role": "auditor"}, format="json").status_code == 403
    assert not Membership.objects.filter(user__username="ada").exists()


def test_a_role_from_the_identity_provider_cannot_be_removed_here(world: World) -> None:
    member = world.users["vision_member"]
    external = Membership.objects.create(user=member, department=world.nlp, role=Role.RESEARCHER,
                                         source=MembershipSource.OIDC)
    response = world.client("nlp_admin").delete(f"/api/v1/departments/{world.nlp.pk}/members/{external.pk}/")
    assert response.status_code == 409
    assert "identity provider" in response.json()["error"]["message"]
    assert Membership.objects.filter(pk=external.pk).exists()
    listed = world.client("nlp_admin").get(f"/api/v1/departments/{world.nlp.pk}/members/").json()["results"]
    assert [row["removable"] for row in listed if row["id"] == external.pk] == [False]


def test_removing_a_researcher_takes_them_off_the_departments_projects(world: World) -> None:
    membership = Membership.objects.get(user=world.users["nlp_member"], department=world.nlp)
    response = world.client("nlp_admin").delete(f"/api/v1/departments/{world.nlp.pk}/members/{membership.pk}/")
    assert response.status_code == 204
    assert not world.llm.members.filter(pk=world.users["nlp_member"].pk).exists()
    assert [e.before for e in _events("membership.revoked")] == [{"user": "nlp_member", "role": "researcher"}]
    assert [e.details.get("why") for e in _events("project.member_removed")] == ["no role left in the department"]


def test_a_department_admin_cannot_remove_the_last_admin_role_but_a_platform_admin_can(world: World) -> None:
    own = Membership.objects.get(user=world.users["nlp_admin"], department=world.nlp)
    url = f"/api/v1/departments/{world.nlp.pk}/members/{own.pk}/"
    response = world.client("nlp_admin").delete(url)
    assert response.status_code == 409 and "last admin" in response.json()["error"]["message"]
    second = world.persona_add("nlp_admin2", role=Role.DEPARTMENT_ADMIN, department=world.nlp)
    assert world.client("nlp_admin").delete(url).status_code == 204  # another admin is left
    last = Membership.objects.get(user=second, department=world.nlp)
    assert world.client("platform").delete(f"/api/v1/departments/{world.nlp.pk}/members/{last.pk}/").status_code == 204


def test_project_members_added_by_username_get_a_department_role_when_they_had_none(world: World) -> None:
    outsider = world.users["vision_member"]
    url = f"/api/v1/projects/{world.llm.pk}/members/"
    response = world.client("nlp_admin").post(url, {"user": "vision_member"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json() == {"id": outsider.pk, "username": "vision_member", "name": "",
                               "department_role_granted": True}
    assert Membership.objects.filter(user=outsider, department=world.nlp, role=Role.RESEARCHER).exists()
    assert world.client("nlp_admin").post(url, {"user": "vision_member"}, format="json").status_code == 409
    [added] = _events("project.member_added")
    assert added.after == {"user": "vision_member"} and added.details == {"department_role_granted": True}
    # The new member now sees the project and may request for it.
    assert world.client("vision_member").get(f"/api/v1/projects/{world.llm.pk}/").status_code == 200

    assert world.client("nlp_member").delete(f"{url}{outsider.pk}/").status_code == 403
    assert world.client("vision_admin").delete(f"{url}{outsider.pk}/").status_code == 404
    assert world.client("nlp_admin").delete(f"{url}{outsider.pk}/").status_code == 204
    assert not world.llm.members.filter(pk=outsider.pk).exists()
    assert [e.before for e in _events("project.member_removed")] == [{"user": "vision_member"}]


def test_project_edits_by_patch_change_name_and_description_never_the_slug(world: World) -> None:
    url = f"/api/v1/projects/{world.llm.pk}/"
    response = world.client("nlp_admin").patch(url, {"name": "Large models", "description": "LLM work"}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["name"], response.json()["slug"]) == ("Large models", "nlp-llm")
    [event] = _events("project.updated")
    assert event.before == {"name": "LLM", "description": ""}
    assert event.after == {"name": "Large models", "description": "LLM work"}
    assert world.client("nlp_admin").patch(url, {"slug": "other"}, format="json").status_code == 400
    assert world.client("nlp_member").patch(url, {"name": "x"}, format="json").status_code == 403
    assert world.client("vision_admin").patch(url, {"name": "x"}, format="json").status_code == 404
    assert world.client("nlp_admin").patch(url, {"isolation": "dedicated-gpus"}, format="json").status_code == 403


def test_a_department_admin_creates_a_project_through_the_api(world: World) -> None:
    body = {"slug": "nlp-vision", "name": "Multimodal", "department": world.nlp.pk, "members": ["nlp_member"]}
    response = world.client("nlp_admin").post("/api/v1/projects/", body, format="json")
    assert response.status_code == 201 and response.json()["members"] == ["nlp_member"]
    assert world.client("nlp_member").post("/api/v1/projects/", {**body, "slug": "nlp-x"}, format="json").status_code == 403
