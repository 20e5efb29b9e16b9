"""Quotas edited through ``/api/v1/quotas/`` (and the Django admin): each quota's own rules, the
tree's rule that a department's children's guarantees fit within its limit in each scope, checked
from either side, with the field and the numbers in the refusal; and, on PostgreSQL, that two edits
racing on one subtree cannot break it together."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from allocations.grants import services
from allocations.models import Quota
from allocations.rules import catalogue as catalog
from audit.models import AuditEvent
from kernel.errors import FieldError
from tenants.models import Department
from tests.conftest import World, requires_postgres
from tests.threads import all_at_once


@pytest.fixture(autouse=True)
def _rules_apply_at_once(settings: Any) -> None:
    """These tests hold the catalogue's own rules, applied at once (four-eyes off); four-eyes on the
    rules (a second platform admin, emergencies) is tests/quotas/test_rule_four_eyes.py."""
    settings.GPUPORTAL_FOUR_EYES = False

POSTGRES: pytest.MarkDecorator = requires_postgres()


def total(department: Department) -> Quota:
    """The department's GPU-equivalent quota (acme 16, nlp 10, vision 10 in the world)."""
    return Quota.objects.get(department=department, flavor__isnull=True)


def guarantee(world: World, department: Department, amount: str, *, flavor: Any = None) -> Quota:
    quota = Quota.objects.get(department=department, flavor=flavor)
    return catalog.quota_update(actor=world.users["platform"], quota_id=quota.pk, guaranteed=Decimal(amount))


def patch(world: World, quota: Quota, body: dict[str, Any], persona: str = "platform") -> Any:
    return world.client(persona).patch(f"/api/v1/quotas/{quota.pk}/", body, format="json")


def refused(response: Any, field: str) -> dict[str, Any]:
    assert response.status_code == 400, response.content
    error: dict[str, Any] = response.json()["error"]
    assert list(error["fields"]) == [field], error
    return error


def numbers(quota: Quota) -> tuple[Decimal, Decimal, Decimal | None]:
    quota.refresh_from_db()
    return quota.guaranteed, quota.limit, quota.lending_limit


# ------------------------------------------------------------------------------ happy paths


@pytest.mark.django_db
def test_a_platform_admin_changes_some_numbers_and_the_others_stay(world: World) -> None:
    quota = total(world.nlp)

    response = patch(world, quota, {"guaranteed": "4", "lending_limit": "1.5"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["guaranteed"], body["limit"], body["lending_limit"]) == ("4.0000", "10.0000", "1.5000")
    assert {"in_use", "available", "borrowed"} <= set(body)
    assert numbers(quota) == (Decimal(4), Decimal(10), Decimal("1.5"))
    event = AuditEvent.objects.filter(action="quota.set", target_id=str(quota.pk)).last()
    assert event is not None and event.actor_username == "platform" and event.department_id == world.nlp.pk
    assert event.before == {"guaranteed": "0", "lending_limit": None}
    assert event.after == {"flavor": None, "guaranteed": "4", "lending_limit": "1.5"}


@pytest.mark.django_db
def test_a_null_lending_limit_lends_all_of_the_guarantee_again(world: World) -> None:
    quota = total(world.nlp)
    assert patch(world, quota, {"guaranteed": "4", "lending_limit": "2"}).status_code == 200

    response = patch(world, quota, {"lending_limit": None})

    assert response.status_code == 200, response.content
    assert response.json()["lending_limit"] is None
    assert numbers(quota) == (Decimal(4), Decimal(10), None)


@pytest.mark.django_db
def test_post_sets_a_lending_limit_and_the_answer_shows_use_beyond_the_guarantee(world: World) -> None:
    start = timezone.now()
    for _ in range(3):
        allocation = services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
        )
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)
    body = {"department": world.nlp.pk, "flavor": None, "guaranteed": "2", "limit": "10", "lending_limit": "1"}

    response = world.client("platform").post("/api/v1/quotas/", body, format="json")

    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["id"] == total(world.nlp).pk  # the department's quota in that scope, changed
    assert (shown["lending_limit"], shown["in_use"], shown["borrowed"], shown["available"]) == (
        "1.0000", "3.0000", "1.0000", "7.0000")
    listed = world.client("nlp_member").get("/api/v1/quotas/", {"department": world.nlp.pk}).json()["results"]
    assert {row["flavor"]: row["borrowed"] for row in listed}[None] == "1.0000"
    assert {row["flavor"]: row["borrowed"] for row in listed}["a100"] == "3.0000"  # guarantee 0: all of it borrowed


@pytest.mark.django_db
def test_borrowed_is_never_negative(world: World) -> None:
    quota = guarantee(world, world.vision, "5")

    shown = world.client("vision_member").get(f"/api/v1/quotas/{quota.pk}/").json()

    assert (shown["in_use"], shown["borrowed"]) == ("0.0000", "0.0000")


@pytest.mark.django_db
def test_delete_is_audited_with_the_numbers_it_removed(world: World) -> None:
    quota = guarantee(world, world.vision, "3")

    response = world.client("platform").delete(f"/api/v1/quotas/{quota.pk}/")

    assert response.status_code == 204
    assert not Quota.objects.filter(pk=quota.pk).exists()
    event = AuditEvent.objects.get(action="quota.deleted", target_id=str(quota.pk))
    assert event.before == {"flavor": None, "guaranteed": "3", "limit": "10", "lending_limit": None}


# ------------------------------------------------------------------------- a quota's own rules


@pytest.mark.django_db
def test_a_guarantee_above_the_limit_is_refused_naming_guaranteed(world: World) -> None:
    quota = total(world.nlp)

    error = refused(patch(world, quota, {"guaranteed": "11"}), "guaranteed")

    assert error["message"] == "The guarantee 11 is above the limit 10."
    assert error["details"] == {"guaranteed": "11", "limit": "10"}
    assert numbers(quota) == (Decimal(0), Decimal(10), None)


@pytest.mark.django_db
def test_a_lending_limit_above_the_guarantee_is_refused_naming_lending_limit(world: World) -> None:
    quota = total(world.nlp)

    error = refused(patch(world, quota, {"guaranteed": "3", "lending_limit": "4"}), "lending_limit")

    assert "lending limit 4 is above the guarantee 3" in error["message"]
    assert numbers(quota) == (Decimal(0), Decimal(10), None)


@pytest.mark.django_db
def test_a_flavor_quota_counts_whole_units(world: World) -> None:
    quota = Quota.objects.get(department=world.nlp, flavor=world.a100)

    refused(patch(world, quota, {"lending_limit": "0.5", "guaranteed": "1"}), "lending_limit")


# ----------------------------------------------------------------------------- the tree's rule


@pytest.mark.django_db
def test_lowering_a_parents_limit_below_its_childrens_guarantees_is_refused_naming_limit(world: World) -> None:
    guarantee(world, world.nlp, "4")
    guarantee(world, world.vision, "8")
    acme = total(world.acme)

    error = refused(patch(world, acme, {"limit": "10"}), "limit")

    assert error["message"] == "The limit 10 is below the 12 its children are guaranteed (nlp 4, vision 8)."
    assert error["details"] == {"limit": "10", "children_guaranteed": "12", "children": {"nlp": "4", "vision": "8"}}
    assert numbers(acme) == (Decimal(0), Decimal(16), None)
    assert patch(world, acme, {"limit": "12"}).status_code == 200  # exactly what they are guaranteed fits


@pytest.mark.django_db
def test_raising_a_childs_guarantee_beyond_the_parents_limit_is_refused_naming_guaranteed(world: World) -> None:
    guarantee(world, world.vision, "8")
    nlp = total(world.nlp)

    error = refused(patch(world, nlp, {"guaranteed": "9"}), "guaranteed")

    assert error["message"] == (
        "The guarantee 9 and the 8 the other children of acme are guaranteed (vision 8) come to 17, above acme's limit 16."
    )
    assert error["details"] == {"guaranteed": "9", "siblings_guaranteed": "8", "parent": "acme", "parent_limit": "16",
                                "siblings": {"vision": "8"}}
    assert numbers(nlp) == (Decimal(0), Decimal(10), None)
    assert patch(world, nlp, {"guaranteed": "8"}).status_code == 200


@pytest.mark.django_db
def test_a_new_child_quota_must_fit_its_parents_guarantee_below_the_top(world: World) -> None:
    # nlp's GPU-equivalent quota sits under acme's: guarantees nest, so a team of nlp may be
    # promised no more than nlp itself is (docs/quotas.md).
    Quota.objects.filter(department=world.nlp, flavor=None).update(guaranteed=Decimal(6))
    body = {"department": world.speech.pk, "guaranteed": "7", "limit": "12"}

    error = refused(world.client("platform").post("/api/v1/quotas/", body, format="json"), "guaranteed")

    assert "above nlp's guarantee 6" in error["message"] and error["details"]["siblings_guaranteed"] == "0"
    assert error["details"]["parent_guaranteed"] == "6"
    assert not Quota.objects.filter(department=world.speech).exists()
    accepted = world.client("platform").post("/api/v1/quotas/", {**body, "guaranteed": "6"}, format="json")
    assert accepted.status_code == 201, accepted.content


@pytest.mark.django_db
def test_a_department_below_the_top_promises_its_teams_no_more_than_its_own_guarantee(world: World) -> None:
    Quota.objects.filter(department=world.nlp, flavor=None).update(guaranteed=Decimal(6))
    Quota.objects.create(department=world.speech, flavor=None, guaranteed=Decimal(5), limit=Decimal(8))
    nlp = Quota.objects.get(department=world.nlp, flavor=None)

    error = refused(patch(world, nlp, {"guaranteed": "4"}), "guaranteed")

    assert error["message"] == (
        "The guarantee 4 is below the 5 its children are guaranteed (nlp-speech 5) (guarantees nest: a department "
        "promises its teams no more than it is promised)."
    )
    assert patch(world, nlp, {"guaranteed": "5"}).status_code == 200


@pytest.mark.django_db
def test_a_new_parent_quota_must_cover_its_childrens_guarantees(world: World) -> None:
    Quota.objects.create(department=world.speech, flavor=world.h100, guaranteed=Decimal(3), limit=Decimal(4))
    body = {"department": world.nlp.pk, "flavor": world.h100.pk, "guaranteed": "0", "limit": "2"}

    error = refused(world.client("platform").post("/api/v1/quotas/", body, format="json"), "limit")

    assert error["message"] == "The limit 2 is below the 3 its children are guaranteed (nlp-speech 3)."
    assert not Quota.objects.filter(department=world.nlp, flavor=world.h100).exists()


@pytest.mark.django_db
def test_each_scope_is_held_apart(world: World) -> None:
    """nlp-speech's a100 guarantee counts against nlp's a100 limit only, not its GPU-equivalents."""
    Quota.objects.create(department=world.speech, flavor=world.a100, guaranteed=Decimal(6), limit=Decimal(6))

    assert patch(world, total(world.nlp), {"limit": "1"}).status_code == 200
    error = refused(patch(world, Quota.objects.get(department=world.nlp, flavor=world.a100), {"limit": "5"}), "limit")
    assert error["details"]["children"] == {"nlp-speech": "6"}


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["nlp_admin", "nlp_member", "auditor"])
def test_only_platform_admins_change_a_quota(world: World, persona: str) -> None:
    quota = total(world.nlp)

    response = patch(world, quota, {"limit": "20"}, persona=persona)

    assert response.status_code == 403, response.content
    assert numbers(quota) == (Decimal(0), Decimal(10), None)
    assert not AuditEvent.objects.filter(action="quota.set", target_id=str(quota.pk)).exists()


@pytest.mark.django_db
def test_the_service_itself_holds_the_tree_rule(world: World) -> None:
    """Not only the API's view: every caller of the service (the admin's form, commands) is refused."""
    guarantee(world, world.nlp, "10")
    with pytest.raises(FieldError) as raised:
        catalog.quota_set(actor=world.users["platform"], department=world.vision, flavor=None,
                          guaranteed=Decimal(7), limit=Decimal(10))
    assert raised.value.fields == {"guaranteed": [raised.value.message]} and "come to 17" in raised.value.message


# ---------------------------------------------------------------------------------- the admin


def admin_client(world: World) -> Client:
    ops = User.objects.create_superuser("ops", "ops@example.org", "pw-ops")
    client = Client()
    client.force_login(ops)
    return client


@pytest.mark.django_db
def test_the_django_admin_applies_the_same_rules_and_audits_its_changes(world: World) -> None:
    guarantee(world, world.nlp, "4")
    guarantee(world, world.vision, "8")
    acme = total(world.acme)
    client = admin_client(world)
    url = f"/admin/allocations/quota/{acme.pk}/change/"

    page = client.post(url, {"guaranteed": "0", "limit": "10", "lending_limit": ""})

    assert page.status_code == 200  # the form again, with the error
    assert page.context["adminform"].form.errors["limit"] == [
        "The limit 10 is below the 12 its children are guaranteed (nlp 4, vision 8)."]
    assert numbers(acme) == (Decimal(0), Decimal(16), None)

    saved = client.post(url, {"guaranteed": "0", "limit": "12", "lending_limit": ""})

    assert saved.status_code == 302, saved.content
    assert numbers(acme) == (Decimal(0), Decimal(12), None)
    event = AuditEvent.objects.filter(action="quota.set", target_id=str(acme.pk)).last()
    assert event is not None and event.details == {"via": "admin"} and event.after["limit"] == "12"


# ------------------------------------------------------------------- racing edits (PostgreSQL)


def _edit(world: World, quota_id: int, **change: str) -> Callable[[], str]:
    def job() -> str:
        numbers: dict[str, Any] = {name: Decimal(value) for name, value in change.items()}
        try:
            catalog.quota_update(actor=world.users["platform"], quota_id=quota_id, **numbers)
        except FieldError as error:
            return f"refused {next(iter(error.fields))}"
        return "changed"

    return job


def _promised_within_limit(world: World) -> bool:
    children = sum((total(child).guaranteed for child in (world.nlp, world.vision)), Decimal(0))
    return children <= total(world.acme).limit


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_racing_edits_on_one_subtree_cannot_break_the_tree_rule_together(world: World) -> None:
    """Each edit alone fits; any two together would not. Without the department chain's lock both
    read the other's old numbers and both pass; with it, one waits and then sees the other's."""
    nlp, vision, acme = total(world.nlp).pk, total(world.vision).pk, total(world.acme).pk
    for round_ in range(5):
        for pk in (nlp, vision):
            catalog.quota_update(actor=world.users["platform"], quota_id=pk, guaranteed=Decimal(0))
        catalog.quota_update(actor=world.users["platform"], quota_id=acme, limit=Decimal(16))

        siblings = all_at_once([_edit(world, nlp, guaranteed="9"), _edit(world, vision, guaranteed="9")])

        assert sorted(siblings.elements()) == ["changed", "refused guaranteed"], round_
        assert _promised_within_limit(world)

        catalog.quota_update(actor=world.users["platform"], quota_id=nlp, guaranteed=Decimal(0))
        catalog.quota_update(actor=world.users["platform"], quota_id=vision, guaranteed=Decimal(6))
        parent_and_child = all_at_once([_edit(world, acme, limit="12"), _edit(world, nlp, guaranteed="8")])

        assert parent_and_child["changed"] == 1, (round_, parent_and_child)
        assert set(parent_and_child) <= {"changed", "refused limit", "refused guaranteed"}, parent_and_child
        assert _promised_within_limit(world)
