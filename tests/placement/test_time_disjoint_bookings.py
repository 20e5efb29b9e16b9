"""Bookings that never hold at the same instant do not add up (issue 31, defect 1).

Two advance grants booked one after the other on the same MIG slices are right: they never meet.
Every picture of the cluster (the kept one, a request's, the preview's) shows per GPU what is held
at some instant of its interval: the union of the MIG instances' memory slices and the most
compute held at once, the most share, CPU and memory held at once; never the sum of bookings that
do not overlap. These tests drive the real services (and the portal over HTTP) on PostgreSQL,
where the kept placement states are shared and brought forward.
"""

from __future__ import annotations

import datetime
import re
from decimal import Decimal

import pytest
from django.test import Client

from allocations.booking import kept_views
from allocations.booking.preview import placement_preview
from allocations.booking.reservations import reservations_where
from allocations.booking.state import cluster_state
from allocations.booking.view import placement_view, unit_shape
from allocations.grants import changes, services
from allocations.models import Allocation, AllocationState, Flavor, SharingMode
from clusters.models import Cluster
from frontend.feedback import request_feedback
from kernel.clock import clock_now
from tests.conftest import A100, World, build_world, requires_postgres
from tests.placement.kept_compare import picture

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres()]

DAY = datetime.timedelta(days=1)


def half_flavor() -> Flavor:
    return Flavor.objects.create(
        name="a100-mig-3g-40gb", display_name="A100 MIG 3g.40gb", gpu_model=A100, sharing_mode=SharingMode.MIG,
        mig_profile="3g.40gb", resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42,
        gpu_equivalents=Decimal("0.4286"), cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )


def tomorrow_nine() -> datetime.datetime:
    return clock_now().replace(hour=9, minute=0, second=0, microsecond=0) + DAY


def ask(world: World, flavor: Flavor, *, quantity: int, starts_at: datetime.datetime, ends_at: datetime.datetime,
        why: str = "advance booking") -> Allocation:
    return services.allocation_request(
        actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
        priority_class=world.standard, starts_at=starts_at, ends_at=ends_at, justification=why,
    )


def grant(world: World, flavor: Flavor, *, quantity: int, starts_at: datetime.datetime,
          ends_at: datetime.datetime) -> Allocation:
    allocation = ask(world, flavor, quantity=quantity, starts_at=starts_at, ends_at=ends_at)
    return services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=allocation.pk)


def places(allocation: Allocation) -> set[tuple[str, str]]:
    return {(node, label) for node, labels in reservations_where(allocation=allocation).items() for label in labels}


def login(world: World, persona: str) -> Client:
    client = Client()
    client.force_login(world.users[persona])
    return client


def test_two_advance_mig_bookings_on_the_same_slices_leave_every_a100_placement_working() -> None:
    """The issue's reproduction: ×3 3g.40gb tomorrow 09:00 for a day, ×3 again the day after, both
    approved on the same slices; then previews, feedback, the approvals page, a submit and
    approvals on the A100 nodes all answer, and answer right."""
    world = build_world(a100_gpus=16, h100_gpus=8)
    half = half_flavor()
    start = tomorrow_nine()
    first = grant(world, half, quantity=3, starts_at=start, ends_at=start + DAY)
    second = grant(world, half, quantity=3, starts_at=start + DAY, ends_at=start + 2 * DAY)
    assert first.state == second.state == AllocationState.SCHEDULED
    assert places(first) == places(second) and len(places(first)) == 3  # they never meet: the same slices

    # The dry run sees the three slices taken once: 32 3g.40gb places on 16 A100s, 29 left.
    [fit] = placement_preview(flavor=half, quantity=3)
    assert fit.fits and fit.free == 29 and not fit.free_is_lower_bound
    both = ask(world, half, quantity=3, starts_at=start, ends_at=start + 2 * DAY, why="spans both")
    preview = login(world, "nlp_admin").get(f"/api/v1/allocations/{both.pk}/placement-preview/")
    assert preview.status_code == 200 and preview["Content-Type"] == "application/json"
    body = preview.json()
    assert body["fits"] and body["admitted"] and body["refusal"] is None and body["starts"] == "at-start"
    assert body["clusters"][0]["free"] == 29

    feedback = login(world, "nlp_member").get("/allocations/new/feedback/", {
        "project": world.llm.pk, "flavor": half.pk, "quantity": 3, "priority_class": world.standard.pk,
    })
    assert feedback.status_code == 200
    assert re.search(r"Fits on cluster <strong>test-cluster</strong>: 29 units of a100-mig-3g-40gb free now",
                     feedback.content.decode())
    assert login(world, "nlp_admin").get("/approvals/").status_code == 200
    submitted = login(world, "nlp_member").post("/allocations/new/", {
        "project": world.llm.pk, "flavor": half.pk, "quantity": 1, "priority_class": world.standard.pk,
        "cluster": "", "starts_at": "", "duration_days": 3, "justification": "after the bookings",
    })
    assert submitted.status_code == 302

    # A grant over both days goes beside both; one after them may take their slices again.
    approved = login(world, "nlp_admin").post(f"/api/v1/allocations/{both.pk}/approve/", {"comment": "ok"},
                                              content_type="application/json")
    assert approved.status_code == 200, approved.content
    assert not places(both) & places(first) and len(places(both)) == 3
    later = grant(world, half, quantity=3, starts_at=start + 2 * DAY, ends_at=start + 3 * DAY)
    assert not places(later) & places(both)
    now = Allocation.objects.get(justification="after the bookings")
    services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=now.pk)
    assert not places(now) & (places(first) | places(both))  # it runs into tomorrow: beside both


def test_a_scheduled_grant_and_one_after_it_on_the_same_slice_leave_placement_working() -> None:
    """The seeded #12 case: 2 × 1g.10gb from the day after tomorrow for five days, then one more
    1g.10gb grant after it, booked on one of its slices."""
    world = build_world(a100_gpus=16, h100_gpus=8)
    start = tomorrow_nine() + DAY
    scheduled = grant(world, world.mig, quantity=2, starts_at=start, ends_at=start + 5 * DAY)
    after = grant(world, world.mig, quantity=1, starts_at=start + 5 * DAY, ends_at=start + 7 * DAY)
    assert scheduled.state == after.state == AllocationState.SCHEDULED
    assert places(after) <= places(scheduled)

    feedback = request_feedback(project=world.llm, flavor=world.mig, quantity=2,
                                cluster=None)
    [line] = feedback.clusters
    assert line.fits and line.free == 32 and line.free_is_lower_bound  # 112 places, two taken once
    spanning = grant(world, world.mig, quantity=2, starts_at=clock_now() + datetime.timedelta(minutes=5),
                     ends_at=start + 6 * DAY)
    assert not places(spanning) & places(scheduled)
    [fit] = placement_preview(flavor=world.mig, quantity=1)
    assert fit.fits


def test_a_slice_between_two_bookings_is_free_only_to_a_request_that_meets_neither() -> None:
    """Two grants on one slice with a day between them: a request in the gap takes the slice too;
    one that covers both days does not."""
    world = build_world(a100_gpus=8, h100_gpus=8)
    start = tomorrow_nine()
    monday = grant(world, world.mig, quantity=1, starts_at=start, ends_at=start + DAY)
    wednesday = grant(world, world.mig, quantity=1, starts_at=start + 2 * DAY, ends_at=start + 3 * DAY)
    assert places(monday) == places(wednesday)
    tuesday = grant(world, world.mig, quantity=1, starts_at=start + DAY, ends_at=start + 2 * DAY)
    assert places(tuesday) == places(monday)  # touching ends are not an overlap
    week = grant(world, world.mig, quantity=1, starts_at=start, ends_at=start + 7 * DAY)
    assert not places(week) & places(monday)
    across = grant(world, world.mig, quantity=1, starts_at=start + DAY / 2, ends_at=start + 5 * DAY / 2)
    assert not places(across) & (places(monday) | places(week))


def test_a_renewal_that_makes_two_bookings_meet_is_seen_by_the_kept_pictures() -> None:
    """The kept state knows when each row holds its GPUs: a renewal restamps the grant's rows, so
    the kept picture still equals a fresh build once two bookings meet."""
    world = build_world(a100_gpus=8, h100_gpus=8)
    start = tomorrow_nine()
    placeholder = grant(world, world.mig, quantity=1, starts_at=start, ends_at=start + DAY)
    renewed = grant(world, world.mig, quantity=1, starts_at=start, ends_at=start + DAY)
    freed = places(placeholder)
    services.allocation_release(actor=world.users["nlp_admin"], allocation_id=placeholder.pk)
    later = grant(world, world.mig, quantity=1, starts_at=start + 2 * DAY, ends_at=start + 3 * DAY)
    assert places(later) == freed != places(renewed)  # one GPU, two slices, never at once
    shape = unit_shape(world.mig)

    def kept_and_fresh() -> tuple[dict[str, object], dict[str, object]]:
        cluster = Cluster.objects.get(pk=world.cluster.pk)
        state = cluster_state(cluster=cluster)
        kept = kept_views.kept_view(state, cluster=cluster, terms=kept_views.PictureTerms(shape),
                                    reservations=state.rows_of_model(world.mig.gpu_model))
        return picture(kept), picture(placement_view(cluster=cluster, shape=shape))

    kept, fresh = kept_and_fresh()
    assert kept == fresh
    outcome = changes.allocation_renew(actor=world.users["nlp_member"], allocation_id=renewed.pk,
                                       ends_at=start + 5 * DAY / 2)
    assert outcome.applied
    kept, fresh = kept_and_fresh()
    assert kept == fresh
    view = placement_view(cluster=world.cluster, shape=shape)
    assert view.engine is not None and view.engine.mig_compute_used() == 2  # they meet now
