"""A flavor's driver/CUDA minimums and its sharing mode's guidance: set through the API by platform
admins only and checked as versions; a node below the minimums, or that never reported, is not
offered the flavor, and the refusal says which nodes report what."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from allocations.booking.preview import placement_preview
from allocations.catalogue.sharing_guide import NVIDIA_VGPU
from allocations.grants import services
from allocations.models import Allocation, Flavor, SharingMode
from allocations.rules import catalogue as catalog
from audit.models import AuditEvent
from clusters.models import Node
from frontend.selectors import servable_flavor_ids
from kernel.errors import CapacityExceeded
from tests.conftest import World

pytestmark = pytest.mark.django_db


def ask(world: World, flavor: Flavor, quantity: int = 1) -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="minimums",
    )


def approve(world: World, allocation: Allocation) -> Allocation:
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def report(name: str, driver: str, cuda: str) -> None:
    Node.objects.filter(name=name).update(driver_version=driver, cuda_version=cuda)


L40S: dict[str, Any] = {
    "name": "l40s", "display_name": "L40S", "gpu_model": "NVIDIA-L40S", "sharing_mode": "exclusive",
    "resource_name": "nvidia.com/gpu", "memory_mib": 46068, "compute_percent": 100, "gpu_equivalents": "1",
}


# --------------------------------------------------------------------------------------- the API


def test_a_platform_admin_sets_minimums_and_the_flavor_shows_them_with_its_guidance(world: World) -> None:
    client = world.client("platform")
    created = client.post("/api/v1/flavors/", {**L40S, "min_driver_version": "535.104.05", "min_cuda_version": "12.2"},
                          format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["min_driver_version"], body["min_cuda_version"]) == ("535.104.05", "12.2")
    assert body["guidance"]["mode"] == "exclusive" and body["guidance"]["managed"] is True

    changed = client.patch(f"/api/v1/flavors/{world.mig.pk}/", {"min_cuda_version": "11.0"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["min_cuda_version"] == "11.0" and changed.json()["min_driver_version"] == ""
    guidance = changed.json()["guidance"]
    assert guidance["mode"] == "mig" and any("CUDA 11" in line for line in guidance["requirements"])
    event = AuditEvent.objects.filter(action="flavor.updated").latest("pk")
    assert event.after == {"min_cuda_version": "11.0"} and event.before == {"min_cuda_version": ""}

    listed = world.client("nlp_member").get("/api/v1/flavors/").json()["results"]
    by_name = {item["name"]: item for item in listed}
    assert by_name["a100-1g"]["min_cuda_version"] == "11.0"
    assert by_name["h100-mps"]["guidance"]["mode"] == "mps"
    assert "fatal GPU fault" in by_name["h100-mps"]["guidance"]["failure_domain"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"min_driver_version": "r535"}, "min_driver_version"),
        ({"min_driver_version": "535.104.05-open"}, "min_driver_version"),
        ({"min_driver_version": "5" * 40}, "min_driver_version"),
        ({"min_cuda_version": "12.2.1"}, "min_cuda_version"),
        ({"min_cuda_version": "cuda12"}, "min_cuda_version"),
    ],
)
def test_a_minimum_that_is_not_a_version_is_a_400_naming_the_field(world: World, body: dict[str, str], field: str) -> None:
    client = world.client("platform")
    response = client.patch(f"/api/v1/flavors/{world.mig.pk}/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]
    created = client.post("/api/v1/flavors/", {**L40S, **body}, format="json")
    assert created.status_code == 400 and field in created.json()["error"]["fields"]
    world.mig.refresh_from_db()
    assert (world.mig.min_driver_version, world.mig.min_cuda_version) == ("", "")
    assert not Flavor.objects.filter(name="l40s").exists()


def test_the_model_refuses_a_malformed_minimum_too_so_the_admin_site_cannot_store_one(world: World) -> None:
    with pytest.raises(ValidationError) as refused:
        catalog.flavor_update(actor=world.users["platform"], flavor_id=world.a100.pk, min_cuda_version="12.x")
    assert set(refused.value.message_dict) == {"min_cuda_version"}


@pytest.mark.parametrize(("persona", "status"), [
    ("nlp_member", 403), ("nlp_admin", 403), ("auditor", 403), ("nobody", 404), (None, 401),
])
def test_only_platform_admins_set_minimums(world: World, persona: str | None, status: int) -> None:
    response = world.client(persona).patch(f"/api/v1/flavors/{world.a100.pk}/", {"min_driver_version": "535"},
                                           format="json")
    assert response.status_code == status
    world.a100.refresh_from_db()
    assert world.a100.min_driver_version == ""


def test_the_sharing_modes_endpoint_lists_every_mode_and_the_unmanaged_nvidia_vgpu(world: World) -> None:
    response = world.client("nlp_member").get("/api/v1/sharing-modes/")
    assert response.status_code == 200
    assert response.json()["count"] == len(SharingMode.values) + 1
    modes = {item["mode"]: item for item in response.json()["results"]}
    assert set(modes) == {*SharingMode.values, NVIDIA_VGPU}
    assert all(item["managed"] for mode, item in modes.items() if mode != NVIDIA_VGPU)
    vgpu = modes[NVIDIA_VGPU]
    assert vgpu["managed"] is False and "hypervisor" in vgpu["unmanaged_reason"]
    assert "whole GPUs" in " ".join(vgpu["caveats"])
    assert "no memory" not in modes["mig"]["memory_isolation"].lower()
    assert modes["timeslice"]["memory_isolation"].startswith("None")
    assert any("CUDA Graphs" in caveat for caveat in modes["vgpu"]["caveats"])
    assert modes["volcano-vgpu"]["memory_isolation"] == modes["vgpu"]["memory_isolation"]
    for item in modes.values():
        assert item["purpose"] and item["failure_domain"] and item["requirements"]
    assert world.client(None).get("/api/v1/sharing-modes/").status_code == 401


# ----------------------------------------------------------------------------------- the booking


def test_a_node_below_the_minimum_or_never_reported_is_not_used_and_the_refusal_says_so(world: World) -> None:
    Flavor.objects.filter(pk=world.a100.pk).update(min_driver_version="535", min_cuda_version="12.0")
    world.a100.refresh_from_db()
    report("a100-0", "470.57.02", "11.4")
    # a100-1 never reported
    allocation = ask(world, world.a100)
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, allocation)
    message = refusal.value.message
    assert "reports driver ≥ 535 and CUDA ≥ 12.0" in message, message
    assert "(a100-0: driver 470.57.02, CUDA 11.4; a100-1: driver unknown, CUDA unknown)" in message
    assert refusal.value.details["kind"] == "not-offered"
    assert not allocation.reservations.exists()

    [fit] = placement_preview(flavor=world.a100, quantity=1)
    assert not fit.fits and "a100-0: driver 470.57.02" in fit.reason
    assert world.a100.pk not in servable_flavor_ids(flavors=[world.a100])

    report("a100-1", "535.104.05", "12.2")  # meets both
    booked = approve(world, allocation)
    assert {row.node.name for row in booked.reservations.all()} == {"a100-1"}
    assert world.a100.pk in servable_flavor_ids(flavors=[world.a100])


def test_a_node_that_meets_the_minimum_exactly_or_beyond_is_used_and_one_below_is_not(world: World) -> None:
    Flavor.objects.filter(pk=world.mig.pk).update(min_cuda_version="12.2")
    world.mig.refresh_from_db()
    report("a100-0", "535.54.03", "12.1")
    report("a100-1", "535.104.05", "12.2")
    rows = approve(world, ask(world, world.mig, quantity=3)).reservations.select_related("node")
    assert {row.node.name for row in rows} == {"a100-1"}
    report("a100-0", "550.54.15", "12.4")
    Node.objects.filter(name="a100-1").update(is_schedulable=False)
    more = approve(world, ask(world, world.mig, quantity=2)).reservations.select_related("node")
    assert {row.node.name for row in more} == {"a100-0"}


def test_a_flavor_without_minimums_is_offered_on_nodes_that_never_reported(world: World) -> None:
    assert Node.objects.filter(driver_version="").count() == Node.objects.count()
    rows = approve(world, ask(world, world.a100, quantity=2)).reservations.all()
    assert rows.count() == 2


def test_a_pinned_mig_layout_on_a_node_below_the_minimum_is_not_claimed(world: World) -> None:
    Node.objects.filter(name="a100-1").update(mig_layout=[{"devices": [0], "mig-devices": {"1g.10gb": 2}}])
    Node.objects.filter(name="a100-0").update(is_schedulable=False)
    Flavor.objects.filter(pk=world.mig.pk).update(min_cuda_version="11.0")
    world.mig.refresh_from_db()
    report("a100-1", "450.80.02", "10.2")
    allocation = ask(world, world.mig)
    with pytest.raises(CapacityExceeded) as refusal:
        approve(world, allocation)
    assert "a100-1: CUDA 10.2" in refusal.value.message and "a100-0" not in refusal.value.message
    report("a100-1", "450.80.02", "11.0")
    [row] = approve(world, allocation).reservations.all()
    assert (row.node.name, row.policy) == ("a100-1", "pinned-layout")
