"""The catalogue's forms: platform admins create and edit flavors, quotas and priority classes in
the portal instead of the Django admin, through the services the API calls. A quota or a priority
class is a change of the rules: with four-eyes on it waits for another platform admin, unless it is
an emergency with its reason. Errors show next to their field with the input kept; others get 403."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from allocations.models import Flavor, PriorityClass, Quota
from allocations.models.rule_changes import RuleChange, RuleChangeKind, RuleChangeState
from audit.models import AuditEvent
from tests.conftest import World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db

FLAVOR = {
    "name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
    "resource_name": "nvidia.com/gpu", "mig_profile": "", "replicas": "", "memory_mib": "46068", "compute_percent": "100",
    "gpu_equivalents": "1", "cpu_millicores_per_unit": "8000", "memory_mib_per_unit": "65536", "reserve_percent": "",
    "reserve_per_unit_mib": "", "placement_policy": "binpack", "min_driver_version": "", "min_cuda_version": "",
    "is_active": "on",
}
PRIORITY = {"name": "gpu-urgent", "value": "5000", "preemption_policy": "PreemptLowerPriority",
            "oversubscription_factor": "1", "description": "Deadlines", "notice_minutes": "15"}


def routes(world: World) -> list[str]:
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    return ["/platform/catalogue/flavors/new/", f"/platform/catalogue/flavors/{world.a100.pk}/",
            "/platform/catalogue/quotas/new/", f"/platform/catalogue/quotas/{quota.pk}/",
            "/platform/catalogue/priority-classes/new/", f"/platform/catalogue/priority-classes/{world.standard.pk}/"]


def error_of(html: str, field: str) -> str:
    found = re.search(rf'id="id_{field}_error"[^>]*>(.*?)</div>', html, re.S)
    assert found is not None, field
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


@pytest.mark.parametrize(("persona", "status"), [
    ("platform", 200), ("nlp_admin", 403), ("nlp_member", 403), ("auditor", 403), ("nobody", 403),
])
def test_only_platform_admins_open_the_forms(world: World, login: Login, persona: str, status: int) -> None:
    client = login(persona)
    for url in routes(world):
        assert client.get(url).status_code == status, url
        if status != 200:
            assert client.post(url, {**FLAVOR, **PRIORITY, "guaranteed": "0", "limit": "1"}).status_code == status, url
    assert Flavor.objects.filter(name="l40s").exists() is False and not RuleChange.objects.exists()


def test_the_catalogue_links_its_forms_not_the_django_admin(world: World, login: Login) -> None:
    html = login("platform").get("/platform/catalogue/").content.decode()
    assert "Edit in the Django admin" not in html
    assert 'href="/platform/catalogue/flavors/new/"' in html and 'href="/platform/catalogue/quotas/new/"' in html
    assert 'href="/platform/catalogue/priority-classes/new/"' in html
    assert f'href="/platform/catalogue/flavors/{world.a100.pk}/" aria-label="Edit flavor a100"' in html
    assert f'href="/platform/catalogue/priority-classes/{world.standard.pk}/"' in html
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    assert f'href="/platform/catalogue/quotas/{quota.pk}/"' in html


def test_a_flavor_is_created_and_edited_and_audited(world: World, login: Login) -> None:
    client = login("platform")
    response = client.post("/platform/catalogue/flavors/new/", FLAVOR, follow=True)
    assert "Flavor l40s: saved." in response.content.decode()
    flavor = Flavor.objects.get(name="l40s")
    assert (flavor.memory_mib, flavor.gpu_equivalents) == (46068, Decimal(1))
    assert AuditEvent.objects.filter(action="flavor.created", target_id=str(flavor.pk)).exists()
    response = client.post(f"/platform/catalogue/flavors/{flavor.pk}/", {**FLAVOR, "display_name": "L40S 48GB"})
    assert response.status_code == 302
    flavor.refresh_from_db()
    assert flavor.display_name == "L40S 48GB" and flavor.name == "l40s"
    assert AuditEvent.objects.filter(action="flavor.updated", target_id=str(flavor.pk)).exists()


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"memory_mib": "0"}, "memory_mib", "greater than or equal to 1"),
    ({"name": "a100"}, "name", "already exists"),
    ({"gpu_equivalents": "2"}, "gpu_equivalents", "less than or equal to 1"),
    ({"sharing_mode": "mig", "mig_profile": ""}, "mig_profile", ""),
])
def test_a_bad_flavor_is_refused_next_to_its_field_with_the_input_kept(
    world: World, login: Login, changes: dict[str, str], field: str, message: str
) -> None:
    response = login("platform").post("/platform/catalogue/flavors/new/", {**FLAVOR, **changes})
    html = response.content.decode()
    assert response.status_code == 400
    assert message in error_of(html, field) and error_of(html, field)
    assert 'value="NVIDIA-L40S"' in html and 'value="L40S"' in html
    assert Flavor.objects.count() == 4


@pytest.mark.parametrize(("four_eyes", "pending"), [(True, True), (False, False)])
def test_a_quota_is_proposed_through_the_rule_changes(
    world: World, login: Login, settings: Any, four_eyes: bool, pending: bool
) -> None:
    settings.GPUPORTAL_FOUR_EYES = four_eyes
    body = {"department": world.speech.pk, "flavor": world.a100.pk, "guaranteed": "1", "limit": "2", "lending_limit": ""}
    response = login("platform").post("/platform/catalogue/quotas/new/", body, follow=True)
    html = response.content.decode()
    created = Quota.objects.filter(department=world.speech, flavor=world.a100)
    if pending:
        change = RuleChange.objects.get()
        assert (change.kind, change.state, change.proposed_by) == (
            RuleChangeKind.QUOTA_SET, RuleChangeState.PENDING, world.users["platform"])
        assert f"rule change #{change.pk} waits for another platform admin" in html
        assert response.redirect_chain[-1][0] == f"/approvals/#pending-rule-change-{change.pk}"
        assert not created.exists()
    else:
        assert not RuleChange.objects.exists() and "Quota: saved." in html
        assert (created.get().guaranteed, created.get().limit) == (Decimal(1), Decimal(2))


def test_an_emergency_needs_its_reason_and_then_applies_at_once(world: World, login: Login, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = True
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    client = login("platform")
    url = f"/platform/catalogue/quotas/{quota.pk}/"
    response = client.post(url, {"guaranteed": "0", "limit": "12", "emergency": "on", "reason": " "})
    html = response.content.decode()
    assert response.status_code == 400 and "states its reason" in error_of(html, "reason")
    assert 'name="limit" value="12"' in html and 'name="emergency"' in html and "checked" in html
    response = client.post(url, {"guaranteed": "0", "limit": "12", "emergency": "on", "reason": "Outage in vision"},
                           follow=True)
    quota.refresh_from_db()
    change = RuleChange.objects.get()
    assert quota.limit == Decimal(12) and change.emergency and change.reason == "Outage in vision"
    assert f"applied as an emergency (rule change #{change.pk})" in response.content.decode()


def test_a_quota_the_rules_refuse_is_an_error_next_to_its_field(world: World, login: Login, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = True
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    response = login("platform").post(f"/platform/catalogue/quotas/{quota.pk}/", {"guaranteed": "20", "limit": "10"})
    html = response.content.decode()
    assert response.status_code == 400
    assert error_of(html, "guaranteed") or error_of(html, "limit")
    assert 'name="guaranteed" value="20"' in html and not RuleChange.objects.exists()


def test_the_emergency_fields_show_only_with_four_eyes(world: World, login: Login, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = False
    html = login("platform").get("/platform/catalogue/quotas/new/").content.decode()
    assert 'name="emergency"' not in html and "Four-eyes is off: the change applies at once." in html
    settings.GPUPORTAL_FOUR_EYES = True
    html = login("platform").get("/platform/catalogue/quotas/new/").content.decode()
    assert 'name="emergency"' in html and 'name="reason"' in html


@pytest.mark.parametrize(("four_eyes", "pending"), [(True, True), (False, False)])
def test_a_priority_class_is_created_and_changed_through_the_rule_changes(
    world: World, login: Login, settings: Any, four_eyes: bool, pending: bool
) -> None:
    settings.GPUPORTAL_FOUR_EYES = four_eyes
    client = login("platform")
    client.post("/platform/catalogue/priority-classes/new/", PRIORITY)
    edit = {"name": "gpu-standard", "value": "1200", "preemption_policy": "PreemptLowerPriority",
            "oversubscription_factor": "1", "description": "", "notice_minutes": "15"}
    client.post(f"/platform/catalogue/priority-classes/{world.standard.pk}/", edit)
    world.standard.refresh_from_db()
    if pending:
        kinds = set(RuleChange.objects.filter(state=RuleChangeState.PENDING).values_list("kind", flat=True))
        assert kinds == {RuleChangeKind.PRIORITY_CLASS_CREATE, RuleChangeKind.PRIORITY_CLASS_UPDATE}
        assert not PriorityClass.objects.filter(name="gpu-urgent").exists() and world.standard.value == 1000
        update = RuleChange.objects.get(kind=RuleChangeKind.PRIORITY_CLASS_UPDATE)
        assert update.proposed == {"value": 1200}
    else:
        assert PriorityClass.objects.get(name="gpu-urgent").value == 5000 and world.standard.value == 1200


def test_a_bad_priority_class_is_refused_next_to_its_field(world: World, login: Login) -> None:
    response = login("platform").post("/platform/catalogue/priority-classes/new/", {**PRIORITY, "name": "gpu-standard",
                                                                                     "oversubscription_factor": "0.5"})
    html = response.content.decode()
    assert response.status_code == 400
    assert "already exists" in error_of(html, "name")
    assert "greater than or equal to 1" in error_of(html, "oversubscription_factor")
    assert 'value="Deadlines"' in html


def test_an_edit_that_changes_nothing_proposes_nothing(world: World, login: Login, settings: Any) -> None:
    settings.GPUPORTAL_FOUR_EYES = True
    quota = Quota.objects.get(department=world.nlp, flavor=None)
    response = login("platform").post(f"/platform/catalogue/priority-classes/{world.standard.pk}/", {
        "name": "gpu-standard", "value": "1000", "preemption_policy": "PreemptLowerPriority",
        "oversubscription_factor": "1", "description": "", "notice_minutes": "15"}, follow=True)
    assert "nothing changed" in response.content.decode() and not RuleChange.objects.exists()
    assert quota.limit == Decimal(10)
