"""``manage.py create_platform_admin``: the first platform admin of an empty installation, audited,
able to act as one at once; running it again changes nothing; a weak password is refused."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from audit import actions
from audit.models import AuditEvent
from tenants.access import access_for
from tenants.models import Department, Membership, Role

pytestmark = pytest.mark.django_db


def create(monkeypatch: pytest.MonkeyPatch, *args: str, password: str = "a-long-first-admin-pass") -> str:  # noqa: S107
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    out = io.StringIO()
    call_command("create_platform_admin", *args, "--password-stdin", stdout=out)
    return out.getvalue()


def test_it_makes_the_organisation_the_user_and_the_role_each_audited(monkeypatch: pytest.MonkeyPatch) -> None:
    said = create(monkeypatch, "root", "--email", "root@example.org", "--organisation", "acme",
                  "--organisation-name", "ACME Research")
    assert said.strip() == "root is now a platform admin of acme"
    user = User.objects.get(username="root")
    acme = Department.objects.get(slug="acme")
    assert (acme.name, acme.parent) == ("ACME Research", None)
    assert Membership.objects.filter(user=user, department=acme, role=Role.PLATFORM_ADMIN).exists()
    assert access_for(user).is_platform_admin and user.is_staff and user.check_password("a-long-first-admin-pass")
    events = list(AuditEvent.objects.order_by("seq"))
    assert [(event.action, event.actor_username) for event in events] == [
        (actions.DEPARTMENT_CREATED.code, ""), (actions.MEMBERSHIP_GRANTED.code, ""),
    ]
    assert all(event.details["via"] == "manage.py create_platform_admin" for event in events)
    client = Client()
    assert client.login(username="root", password="a-long-first-admin-pass")
    created = client.post("/api/v1/departments/", {"slug": "nlp", "name": "NLP", "parent": acme.pk},
                          content_type="application/json")
    assert created.status_code == 201, created.content


def test_running_it_again_changes_nothing_and_writes_no_event(monkeypatch: pytest.MonkeyPatch) -> None:
    create(monkeypatch, "root")
    count = AuditEvent.objects.count()
    assert create(monkeypatch, "root").strip() == "root already was a platform admin of org"
    assert AuditEvent.objects.count() == count and Membership.objects.count() == 1


def test_a_weak_password_or_a_department_that_is_no_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="too short|too common"):
        create(monkeypatch, "root", password="demo")
    assert not User.objects.exists() and not Department.objects.exists()
    create(monkeypatch, "root", "--organisation", "acme")
    Department.objects.create(slug="team", name="Team", parent=Department.objects.get(slug="acme"))
    with pytest.raises(CommandError, match="not a root department"):
        create(monkeypatch, "other", "--organisation", "team")
