"""The department page and the role-aware navigation, through the real views: a department admin
adds a member with the page's form; outsiders get 404, researchers 403; the navigation and the
dashboard offer each role only what it can use, and name who can add someone without a role."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import AuditEvent
from tenants.models import Membership, MembershipSource, Role
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _client(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


def _nav(html: str) -> list[str]:
    nav = html.split('<nav aria-label="Main"', 1)[1].split("</nav>", 1)[0]
    return re.findall(r'<li><a href="[^"]*"[^>]*>([^<]+)</a></li>', nav)


def test_a_department_admin_adds_a_member_with_the_page_form(world: World) -> None:
    User.objects.create_user(username="ada", email="ada@example.org", password="x")
    client = _client(world, "nlp_admin")
    page = client.get(f"/departments/{world.nlp.pk}/")
    assert page.status_code == 200
    assert 'id="member-add"' in page.content.decode()
    response = client.post(f"/departments/{world.nlp.pk}/members/", {"user": "ada@example.org", "role": "researcher"},
                           follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "ada is now researcher of nlp." in text
    assert Membership.objects.filter(user__username="ada", department=world.nlp, role=Role.RESEARCHER).exists()
    assert AuditEvent.objects.filter(action="membership.granted", actor_id=world.users["nlp_admin"].pk).count() == 1


def test_the_page_adds_project_members_and_sets_caps(world: World) -> None:
    client = _client(world, "nlp_admin")
    client.post(f"/projects/{world.llm.pk}/members/", {"user": "vision_member"})
    assert world.llm.members.filter(username="vision_member").exists()
    client.post(f"/projects/{world.llm.pk}/caps/", {"flavor": world.a100.pk, "limit": "3"})
    client.post(f"/projects/{world.llm.pk}/caps/", {"flavor": "", "limit": "5"})
    page = client.get(f"/departments/{world.nlp.pk}/").content.decode()
    assert "a100 units: 0 held of at most 3" in page and "GPU-equivalents: 0 held of at most 5" in page
    assert "style=" not in page and "<script>" not in page  # the strict Content-Security-Policy allows neither
    client.post(f"/projects/{world.llm.pk}/caps/", {"flavor": world.a100.pk, "limit": ""})
    assert list(world.llm.caps.values_list("flavor", flat=True)) == [None]
    created = client.post(f"/departments/{world.nlp.pk}/projects/", {"slug": "nlp-new", "name": "New"}, follow=True)
    assert "Project nlp-new created." in created.content.decode()
    taken = client.post(f"/departments/{world.nlp.pk}/projects/", {"slug": "nlp-new", "name": "Again"})
    assert taken.status_code == 400
    assert 'id="new-project-slug-error"' in taken.content.decode() and 'value="Again"' in taken.content.decode()


def test_a_role_from_the_identity_provider_shows_its_source_and_has_no_remove_button(world: World) -> None:
    external = Membership.objects.create(user=world.users["vision_member"], department=world.nlp,
                                         role=Role.RESEARCHER, source=MembershipSource.LDAP)
    page = _client(world, "nlp_admin").get(f"/departments/{world.nlp.pk}/").content.decode()
    row = page.split(f'id="membership-{external.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "From the LDAP directory" in row and "Remove" not in row
    refused = _client(world, "nlp_admin").post(f"/departments/{world.nlp.pk}/members/{external.pk}/remove/",
                                               {"confirm": "yes"}, follow=True)
    assert "identity provider" in refused.content.decode()
    assert Membership.objects.filter(pk=external.pk).exists()


def test_outsiders_get_404_and_researchers_and_auditors_403(world: World) -> None:
    url = f"/departments/{world.nlp.pk}/"
    assert _client(world, "vision_admin").get(url).status_code == 404
    assert _client(world, "nlp_member").get(url).status_code == 403
    assert _client(world, "auditor").get(url).status_code == 403
    assert _client(world, "vision_admin").post(f"{url}members/", {"user": "nobody", "role": "researcher"}).status_code == 404
    assert _client(world, "nlp_member").post(f"{url}members/", {"user": "nobody", "role": "researcher"}).status_code == 403
    assert _client(world, "nlp_member").post(f"/projects/{world.llm.pk}/caps/", {"limit": "1"}).status_code == 403
    assert not Membership.objects.filter(user=world.users["nobody"]).exists()
    one = _client(world, "vision_admin").get("/departments/")  # one department: straight to its page
    assert (one.status_code, one["Location"]) == (302, f"/departments/{world.vision.pk}/")
    listed = _client(world, "nlp_admin").get("/departments/").content.decode()  # nlp and its team
    assert "nlp-speech" in listed and "vision" not in listed
    assert _client(world, "nlp_member").get("/departments/").status_code == 403
    assert _client(world, "platform").get("/departments/").status_code == 200


@pytest.mark.parametrize(("persona", "shown", "hidden"), [
    ("auditor", {"Dashboard", "Audit log"}, {"Request GPUs", "Department", "Departments", "Approvals", "Clusters"}),
    ("nlp_member", {"Dashboard", "Request GPUs"}, {"Department", "Departments", "Approvals", "Audit log", "Clusters"}),
    ("nlp_admin", {"Request GPUs", "Approvals", "Department"}, {"Departments", "Clusters"}),
    ("platform", {"Request GPUs", "Departments", "Clusters", "Catalogue"}, {"Department"}),
])
def test_the_navigation_shows_each_role_only_what_it_can_use(
    world: World, persona: str, shown: set[str], hidden: set[str]
) -> None:
    html = _client(world, persona).get("/").content.decode()
    items = set(_nav(html))
    assert shown <= items and not hidden & items, items
    has_button = 'class="button" href="/allocations/new/"' in html
    assert has_button == ("Request GPUs" in shown)


def test_someone_without_a_role_is_told_who_can_add_them(world: World) -> None:
    page = _client(world, "nobody").get("/").content.decode()
    assert "The platform admin platform can add you" in page and "Request GPUs" not in page
    # A researcher of a department without a project is pointed at that department's admins.
    world.persona_add("newbie", role=Role.RESEARCHER, department=world.vision)
    form = _client(world, "newbie").get("/allocations/new/").content.decode()
    assert "No project to request for" in form
    assert "Your department admin vision_admin can add you to a project" in form
