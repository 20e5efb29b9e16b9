"""The GPU map is drawn at an instant (issue 31, defect 1 on the page): grants booked one after the
other on the same slices never meet, so the map draws the one that holds the GPUs at the instant
(now, or the page's ``at``) and lists the later one as "booked from" its start, never both stacked
on one GPU. A bad ``at`` is a 400 naming it."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from allocations.booking.reservations import reservations_where
from allocations.grants import services
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from frontend.gpu_map import GpuMap, NodeMap, gpu_map
from kernel.clock import clock_now, clock_set
from tests.conftest import A100, World
from tests.frontend.conftest import Login

pytestmark = pytest.mark.django_db

DAY = datetime.timedelta(days=1)


def half_flavor() -> Flavor:
    return Flavor.objects.create(
        name="a100-mig-3g-40gb", display_name="A100 MIG 3g.40gb", gpu_model=A100, sharing_mode=SharingMode.MIG,
        mig_profile="3g.40gb", resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"), cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )


def grant(world: World, flavor: Flavor, *, starts_at: datetime.datetime) -> Allocation:
    request = services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=2, priority_class=world.standard,
        starts_at=starts_at, ends_at=starts_at + DAY, justification="a training run",
    )
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=request.pk)


def back_to_back(world: World) -> tuple[Allocation, Allocation]:
    """Two 3g.40gb now for a day, two more on the same slices for the day after."""
    clock_set(clock_now().replace(hour=9, minute=0, second=0, microsecond=0))
    half = half_flavor()
    first = grant(world, half, starts_at=clock_now())
    second = grant(world, half, starts_at=first.ends_at)
    assert second.state == AllocationState.SCHEDULED
    where = {(node, label) for node, labels in reservations_where(allocation=first).items() for label in labels}
    assert {(node, label) for node, labels in reservations_where(allocation=second).items() for label in labels} == where
    return first, second


def the_node(drawn: GpuMap) -> NodeMap:
    [node] = [node for node in drawn.nodes if any(gpu.segments for gpu in node.gpus)]
    return node


def test_two_grants_on_the_same_slices_one_after_the_other_are_drawn_one_at_a_time(world: World) -> None:
    first, second = back_to_back(world)

    now = the_node(gpu_map(cluster=world.cluster))
    [gpu] = [gpu for gpu in now.gpus if gpu.segments]
    assert {segment.allocation_id for segment in gpu.segments} == {first.pk}
    assert gpu.used_percent == 86 and len(gpu.segments) == 2  # 6 of 7 compute slices, not 12 of 7
    assert [(booking.allocation_id, booking.units, booking.gpus) for booking in now.later] == [(second.pk, 2, (gpu.index,))]
    when = f"{second.starts_at:%Y-%m-%d %H:%M}"
    assert now.later[0].label == f"#{second.pk} nlp: 2 × a100-mig-3g-40gb booked from {when} UTC on gpu{gpu.index}"
    assert gpu.description.endswith(f"; #{second.pk} nlp: 2 × a100-mig-3g-40gb booked from {when} UTC")

    then = the_node(gpu_map(cluster=world.cluster, at=second.starts_at))  # the first has ended by then
    [gpu] = [gpu for gpu in then.gpus if gpu.segments]
    assert {segment.allocation_id for segment in gpu.segments} == {second.pk} and gpu.used_percent == 86
    assert then.later == () and gpu.later == []

    clock_set(first.ends_at + datetime.timedelta(seconds=30))  # the second started, the first not expired yet
    late = the_node(gpu_map(cluster=world.cluster))
    assert [{s.allocation_id for s in gpu.segments} for gpu in late.gpus if gpu.segments] == [{second.pk}]


def test_the_page_draws_the_map_at_the_instant_asked_for(world: World, login: Login) -> None:
    first, second = back_to_back(world)
    page = f"/platform/clusters/{world.cluster.pk}/"
    html = login("platform").get(page).content.decode()
    when = f"{second.starts_at:%Y-%m-%d %H:%M} UTC"
    assert f'<p id="map-when">Now: {clock_now():%Y-%m-%d %H:%M} UTC.</p>' in html
    assert f"<li>#{second.pk} nlp: 2 × a100-mig-3g-40gb booked from {when} on gpu" in html
    assert "86%" in html and "171%" not in html

    later = login("platform").get(page, {"at": f"{second.starts_at:%Y-%m-%dT%H:%M}"})
    assert later.status_code == 200
    html = later.content.decode()
    assert f'<p id="map-when">At: {when}.</p>' in html
    assert f'grant #{second.pk} (nlp, 2 × a100-mig-3g-40gb), 86 % allocated"' in html  # the GPU's accessible name
    assert f"#{first.pk} (nlp" not in html and f"#{first.pk} nlp" not in html
    assert "booked from" not in html.split('id="map-when"')[1]


@pytest.mark.parametrize(("value", "says"), [
    ("tomorrow", "at: give an instant as YYYY-MM-DDTHH:MM (UTC) or ISO 8601 with an offset."),
    ("2020-01-01T00:00", "at: must not lie in the past"),
])
def test_a_bad_instant_is_a_400_naming_at(world: World, login: Login, value: str, says: str) -> None:
    response = login("platform").get(f"/platform/clusters/{world.cluster.pk}/", {"at": value})
    assert response.status_code == 400
    html = response.content.decode()
    assert '<div class="field-errors" id="id_at_error"><p>' + says in html
    assert 'id="map-errors">Correct the instant above to see the map.' in html
    assert login("platform").get(f"/platform/clusters/{world.cluster.pk}/", {"at": ""}).status_code == 200
