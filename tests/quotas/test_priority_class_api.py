"""Priority classes edited through ``/api/v1/priority-classes/`` (and the Django admin): what changes,
what is refused (a new name, a class still in use), and that a change to what the cluster's
PriorityClass carries is pushed to every active cluster in the change's own transaction."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from allocations.grants import services
from allocations.models import PriorityClass
from audit.models import AuditEvent
from clusters.models import Cluster, ClusterPush
from tests.conftest import World


@pytest.fixture(autouse=True)
def _rules_apply_at_once(settings: Any) -> None:
    """These tests hold the catalogue's own rules, applied at once (four-eyes off); four-eyes on the
    rules (a second platform admin, emergencies) is tests/quotas/test_rule_four_eyes.py."""
    settings.GPUPORTAL_FOUR_EYES = False


def url(priority_class: PriorityClass) -> str:
    return f"/api/v1/priority-classes/{priority_class.pk}/"


def patch(world: World, priority_class: PriorityClass, body: dict[str, Any], persona: str = "platform") -> Any:
    return world.client(persona).patch(url(priority_class), body, format="json")


def cluster_wide_pushes() -> list[str]:
    """The clusters a push of the cluster-wide objects is queued for."""
    return sorted(ClusterPush.objects.filter(project__isnull=True).values_list("cluster__name", flat=True))


@pytest.fixture
def clusters(world: World) -> list[str]:
    """The world's cluster, a second active one and an inactive one (which is pushed nothing)."""
    Cluster.objects.create(name="second-cluster")
    Cluster.objects.create(name="retired-cluster", is_active=False)
    return ["second-cluster", "test-cluster"]


def in_use(world: World) -> None:
    start = timezone.now()
    services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
    )


@pytest.mark.django_db
def test_a_change_to_the_kubernetes_object_is_pushed_to_every_active_cluster(world: World, clusters: list[str]) -> None:
    response = patch(world, world.standard, {"value": 2000, "description": "Most work"})

    assert response.status_code == 200, response.content
    assert (response.json()["value"], response.json()["description"]) == (2000, "Most work")
    world.standard.refresh_from_db()
    assert world.standard.value == 2000
    assert cluster_wide_pushes() == clusters
    event = AuditEvent.objects.get(action="priority_class.updated", target_id=str(world.standard.pk))
    assert event.before == {"value": 1000, "description": ""}
    assert event.after == {"value": 2000, "description": "Most work"}
    assert event.details == {"via": "api", "pushes": 2}


@pytest.mark.django_db
def test_a_change_only_admission_reads_is_not_pushed(world: World, clusters: list[str]) -> None:
    response = patch(world, world.standard, {"notice_minutes": 60, "preemptible": True, "oversubscription_factor": "1.25"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["notice_minutes"], body["preemptible"], body["oversubscription_factor"]) == (60, True, "1.25")
    assert cluster_wide_pushes() == []
    event = AuditEvent.objects.get(action="priority_class.updated", target_id=str(world.standard.pk))
    assert event.after == {"notice_minutes": 60, "preemptible": True, "oversubscription_factor": "1.25"}


@pytest.mark.django_db
def test_the_name_cannot_change(world: World, clusters: list[str]) -> None:
    response = patch(world, world.standard, {"name": "gpu-normal", "value": 1500})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == ["name"] and "cannot change" in error["message"]
    world.standard.refresh_from_db()
    assert (world.standard.name, world.standard.value) == ("gpu-standard", 1000)
    assert cluster_wide_pushes() == []
    # Sending the name it has is no change of name.
    assert patch(world, world.standard, {"name": "gpu-standard", "value": 1500}).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [({"notice_minutes": 10081}, "notice_minutes"), ({"oversubscription_factor": "0.5"}, "oversubscription_factor"),
     ({"preemption_policy": "Always"}, "preemption_policy"), ({"value": 1000000001}, "value")],
)
def test_bad_values_are_refused_naming_the_field(world: World, body: dict[str, Any], field: str) -> None:
    response = patch(world, world.standard, body)

    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]


@pytest.mark.django_db
def test_a_class_in_use_cannot_be_deleted(world: World, clusters: list[str]) -> None:
    in_use(world)

    response = world.client("platform").delete(url(world.standard))

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "conflict" and error["details"] == {"priority_class": "gpu-standard", "allocations": 1}
    assert PriorityClass.objects.filter(pk=world.standard.pk).exists()
    assert not AuditEvent.objects.filter(action="priority_class.deleted").exists()
    assert cluster_wide_pushes() == []


@pytest.mark.django_db
def test_an_unused_class_is_deleted_audited_and_pruned_from_the_clusters(world: World, clusters: list[str]) -> None:
    in_use(world)  # of gpu-standard, not the class deleted

    response = world.client("platform").delete(url(world.preemptible))

    assert response.status_code == 204, response.content
    assert not PriorityClass.objects.filter(name="gpu-preemptible").exists()
    event = AuditEvent.objects.get(action="priority_class.deleted", target_id=str(world.preemptible.pk))
    assert event.before["name"] == "gpu-preemptible" and event.before["value"] == 100
    assert cluster_wide_pushes() == clusters


@pytest.mark.django_db
def test_post_takes_the_notice_and_preemptible_and_is_pushed(world: World, clusters: list[str]) -> None:
    body = {"name": "gpu-spot", "value": 10, "notice_minutes": 0, "preemptible": True}

    response = world.client("platform").post("/api/v1/priority-classes/", body, format="json")

    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["name"], created["notice_minutes"], created["preemptible"]) == ("gpu-spot", 0, True)
    assert PriorityClass.objects.get(name="gpu-spot").notice == 0
    assert cluster_wide_pushes() == clusters


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["nlp_admin", "vision_member", "auditor"])
def test_only_platform_admins_change_or_delete_a_class(world: World, persona: str) -> None:
    assert patch(world, world.standard, {"value": 1}, persona=persona).status_code == 403
    assert world.client(persona).delete(url(world.preemptible)).status_code == 403
    world.standard.refresh_from_db()
    assert world.standard.value == 1000
    assert PriorityClass.objects.filter(pk=world.preemptible.pk).exists()
    assert world.client(persona).get(url(world.standard)).status_code == 200  # they may read it


@pytest.mark.django_db
def test_the_django_admin_changes_a_class_through_the_same_service(world: World, clusters: list[str]) -> None:
    ops = User.objects.create_superuser("ops", "ops@example.org", "pw-ops")
    client = Client()
    client.force_login(ops)
    form = {"value": "1200", "preemption_policy": "PreemptLowerPriority", "oversubscription_factor": "1.00",
            "description": "", "notice_minutes": "15"}

    saved = client.post(f"/admin/allocations/priorityclass/{world.standard.pk}/change/", form)

    assert saved.status_code == 302, saved.content
    world.standard.refresh_from_db()
    assert world.standard.value == 1200
    assert cluster_wide_pushes() == clusters
    event = AuditEvent.objects.get(action="priority_class.updated", target_id=str(world.standard.pk))
    assert event.details == {"via": "admin", "pushes": 2} and event.after == {"value": 1200}


@pytest.mark.django_db
def test_a_request_naming_a_class_removed_meanwhile_is_a_400_naming_it(world: World) -> None:
    from kernel.errors import FieldError

    doomed = PriorityClass.objects.create(name="gpu-doomed", value=5)
    stale = PriorityClass.objects.get(pk=doomed.pk)  # what the request's serializer had read
    doomed.delete()  # a platform admin removed it in between
    start = timezone.now()
    with pytest.raises(FieldError) as refusal:
        services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=world.a100, quantity=1, priority_class=stale,
            starts_at=start, ends_at=start + datetime.timedelta(days=1), justification="x",
        )
    assert refusal.value.fields == {"priority_class": ["Priority class gpu-doomed no longer exists."]}


@pytest.mark.django_db
def test_a_class_a_quota_window_names_cannot_be_deleted(world: World, clusters: list[str]) -> None:
    """The fuzz step found this a 500 (the window's foreign key protects the class)."""
    from allocations.models import Quota, QuotaWindow

    unused = PriorityClass.objects.create(name="gpu-training", value=50)
    QuotaWindow.objects.create(
        quota=Quota.objects.filter(flavor=None).earliest("pk"), priority_class=unused, kind="temporary",
        begins_at=timezone.now(), ends_at=timezone.now() + datetime.timedelta(hours=1), limit_delta=1,
        requested_by=world.users["platform"], state="cancelled",
    )

    response = world.client("platform").delete(url(unused))

    assert response.status_code == 409, response.content
    assert response.json()["error"]["details"] == {"priority_class": "gpu-training", "allocations": 0, "quota_windows": 1}
    assert PriorityClass.objects.filter(pk=unused.pk).exists()
