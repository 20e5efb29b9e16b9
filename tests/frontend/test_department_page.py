"""The department page's safety: removing someone asks first (a page of its own without scripts),
a refused form comes back as it was typed with each error next to its field, and every label
stands with its own control."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from audit.models import AuditEvent
from tenants.models import Membership, Role
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db


def test_removing_a_department_member_asks_first(world: World, login: Login) -> None:
    membership = Membership.objects.get(user=world.users["nlp_member"], department=world.nlp)
    client = login("nlp_admin")
    url = f"/departments/{world.nlp.pk}/members/{membership.pk}/remove/"
    asked = client.post(url)
    html = asked.content.decode()
    assert asked.status_code == 200
    assert "Remove nlp_member as researcher of nlp?" in html and 'name="confirm" value="yes"' in html
    assert f'action="{url}"' in html and f'href="/departments/{world.nlp.pk}/#members"' in html
    assert Membership.objects.filter(pk=membership.pk).exists()
    assert not AuditEvent.objects.filter(action="membership.revoked").exists()
    done = client.post(url, {"confirm": "yes"}, follow=True)
    assert "nlp_member is no longer researcher of nlp" in done.content.decode()
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_removing_a_project_member_asks_first(world: World, login: Login) -> None:
    member = world.users["nlp_member"]
    assert world.llm.members.filter(pk=member.pk).exists()
    client = login("nlp_admin")
    url = f"/projects/{world.llm.pk}/members/{member.pk}/remove/"
    asked = client.post(url).content.decode()
    assert f"Remove nlp_member from project {world.llm.slug}?" in asked and 'name="confirm" value="yes"' in asked
    assert world.llm.members.filter(pk=member.pk).exists()
    client.post(url, {"confirm": "yes"})
    assert not world.llm.members.filter(pk=member.pk).exists()


def test_the_page_asks_in_a_dialog_before_each_removal(world: World, login: Login) -> None:
    html = login("nlp_admin").get(f"/departments/{world.nlp.pk}/").content.decode()
    removals = re.findall(r'<form[^>]*/remove/"[^>]*>', html)
    assert removals and all("data-confirm=" in form for form in removals), removals


def test_an_unknown_user_is_named_next_to_the_field_and_what_was_typed_stays(world: World, login: Login) -> None:
    response = login("nlp_admin").post(f"/departments/{world.nlp.pk}/members/",
                                       {"user": "ghost@example.org", "role": Role.DEPARTMENT_ADMIN.value})
    html = response.content.decode()
    assert response.status_code == 400
    field = re.search(r'<input id="member-user"[^>]*>', html)
    assert field is not None
    assert 'value="ghost@example.org"' in field.group(0) and 'aria-invalid="true"' in field.group(0)
    assert "member-user-error" in field.group(0)
    error = html.split('id="member-user-error"', 1)[1].split("</p>", 1)[0]
    assert "No account named ghost@example.org" in error
    assert re.search(r'<option value="department_admin" selected>', html)
    assert '<div class="messages">' not in html  # not at the top of the page, far from the field


def test_a_project_members_error_stays_with_its_project(world: World, login: Login) -> None:
    html = login("nlp_admin").post(f"/projects/{world.llm.pk}/members/", {"user": "ghost"}).content.decode()
    field = re.search(rf'<input id="project-{world.llm.pk}-user"[^>]*>', html)
    assert field is not None and 'value="ghost"' in field.group(0) and 'aria-invalid="true"' in field.group(0)
    assert f'id="project-{world.llm.pk}-user-error"' in html
    cap = login("nlp_admin").post(f"/projects/{world.llm.pk}/caps/", {"flavor": "", "limit": "-1"})
    assert cap.status_code == 400
    limit = re.search(rf'<input id="project-{world.llm.pk}-cap-limit"[^>]*>', cap.content.decode())
    assert limit is not None and 'value="-1"' in limit.group(0) and 'aria-invalid="true"' in limit.group(0)


def test_every_label_stands_with_its_own_control(world: World, login: Login) -> None:
    """Each label and the control it names sit together in one wrapper, so the page's wrapping
    rows never leave a label beside another field's control (on a phone, above the wrong one)."""
    User.objects.create_user(username="ada", password="x")
    html = login("nlp_admin").get(f"/departments/{world.nlp.pk}/").content.decode()
    main = html.split('<main id="main"', 1)[1]
    forms = re.findall(r'<form method="post" action="[^"]*"[^>]*class="inline-form"[^>]*>(.*?)</form>', main, re.S)
    labels = 0
    for form in forms:
        for target in re.findall(r'<label for="([^"]+)"', form):
            labels += 1
            pair = re.search(rf'<span class="pair"><label for="{re.escape(target)}">[^<]*</label>\s*'
                             rf'<(input|select) id="{re.escape(target)}"', form)
            assert pair is not None, target
    assert labels >= 8
