"""Setting someone else's password in the Django admin is the one way left for an operator to
sign in as another person: it stays possible (a local account's owner may need a reset) but is
never silent. The audit log names the administrator and the account; creating an account or
changing its flags there is audited too, and no password or hash is ever written to the log."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import AuditEvent
from tests.conftest import World

pytestmark = pytest.mark.django_db


def admin_site(world: World) -> Client:
    user = world.users["platform"]
    user.is_staff = True
    user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_a_password_an_admin_sets_for_someone_else_is_in_the_audit_log_with_both_names(world: World) -> None:
    target = world.users["nlp_admin"]
    before = AuditEvent.objects.count()

    page = admin_site(world).post(f"/admin/auth/user/{target.pk}/password/",
                                  {"password1": "Another-Secret-4711", "password2": "Another-Secret-4711",
                                   "usable_password": "true"})

    assert page.status_code == 302, page.content[:500]
    target.refresh_from_db()
    assert target.check_password("Another-Secret-4711")
    event = AuditEvent.objects.get(action="account.password_set")
    assert event.actor_id == world.users["platform"].pk and event.target_id == str(target.pk)
    assert event.details["username"] == target.get_username() and event.details["own"] is False
    logged = "".join(str(row) for row in AuditEvent.objects.filter(seq__gt=before).values())
    assert "Another-Secret-4711" not in logged and target.password not in logged


def test_a_refused_password_form_changes_nothing_and_records_nothing(world: World) -> None:
    target = world.users["nlp_admin"]

    page = admin_site(world).post(f"/admin/auth/user/{target.pk}/password/",
                                  {"password1": "one", "password2": "other", "usable_password": "true"})

    assert page.status_code == 200
    assert not AuditEvent.objects.filter(action="account.password_set").exists()


def test_an_account_made_a_superuser_in_the_admin_is_audited_with_before_and_after(world: World) -> None:
    client = admin_site(world)
    target = world.users["nlp_member"]
    form = client.get(f"/admin/auth/user/{target.pk}/change/")
    assert form.status_code == 200

    page = client.post(f"/admin/auth/user/{target.pk}/change/", {
        "username": target.username, "first_name": "", "last_name": "", "email": target.email,
        "is_active": "on", "is_staff": "on", "is_superuser": "on",
        "last_login_0": "", "last_login_1": "", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
    })

    assert page.status_code == 302, page.content[:2000]
    event = AuditEvent.objects.get(action="account.changed")
    flags = ("is_staff", "is_superuser")
    assert {name: event.before[name] for name in flags} == {"is_staff": False, "is_superuser": False}
    assert {name: event.after[name] for name in flags} == {"is_staff": True, "is_superuser": True}
    assert "password" not in event.before and "is_active" not in event.after  # unchanged fields are not listed


def test_an_account_created_in_the_admin_is_audited_without_its_password(world: World) -> None:
    page = admin_site(world).post("/admin/auth/user/add/", {
        "username": "dana", "password1": "Dana-Secret-0815", "password2": "Dana-Secret-0815", "usable_password": "true",
    })

    assert page.status_code == 302, page.content[:2000]
    event = AuditEvent.objects.get(action="account.created")
    assert event.after == {"username": "dana"} and event.details["local_sign_in"] is True
    assert "Dana-Secret-0815" not in str(event.details) and User.objects.filter(username="dana").exists()
