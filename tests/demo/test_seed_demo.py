"""``seed_demo`` gives ``make run`` a history to look at: grants in every state that matters, in
both departments and every sharing mode, made through the services (so audited), shown on the
pages at first look; running it again adds nothing; every demo flavor fits a demo node."""

from __future__ import annotations

import datetime
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client

from allocations.api.preview import admission_preview
from allocations.booking.attempts import AttemptAsk, placement_attempt
from allocations.booking.policy import placement_policy_for
from allocations.catalogue.selectors import live_reservations_on
from allocations.models import Allocation, Flavor, Reservation
from audit.models import AuditEvent
from clusters.models import Cluster
from demo.seed import FLAVORS, demo_seed
from demo.usage import demo_usage_continue
from gpuportal.periodic import SCHEDULE
from kernel.clock import clock_at, clock_now
from telemetry.gpu_busy import gpu_busy_overlay
from telemetry.models import AllocationUsage

pytestmark = pytest.mark.django_db

BY_NAME = {entry.name: entry for entry in SCHEDULE}
GRANTED = {"approved", "provisioning", "active"}  # active on make run, where the pushes run; approved in tests
STORY = {
    # state: {(department, sharing mode)}
    "granted": {("vision", "exclusive"), ("vision", "vgpu"), ("vision", "mig"), ("nlp", "exclusive"), ("nlp", "mps")},
    "scheduled": {("nlp", "mig")},
    "pending": {("vision", "timeslice"), ("nlp", "exclusive")},
    "released": {("nlp", "mig"), ("vision", "timeslice"), ("nlp", "exclusive")},
    "rejected": {("vision", "vgpu"), ("nlp", "exclusive")},  # nlp's: last week's demand over its limit
    "cancelled": {("nlp", "mps")},
}


def counts() -> tuple[int, ...]:
    return (Allocation.objects.count(), Reservation.objects.count(), AuditEvent.objects.count(),
            AllocationUsage.objects.count())  # fmt: skip


def page(username: str, path: str) -> str:
    client = Client()
    client.force_login(User.objects.get(username=username))
    response = client.get(path)
    assert response.status_code == 200, (username, path, response.status_code)
    return response.content.decode()


def test_the_demo_holds_every_state_in_both_departments_and_every_sharing_mode_once() -> None:
    """Seeding again adds nothing. Both seeds read one instant: usage is written in 5-minute
    buckets up to the seed's now, so a seed after a bucket's edge would rightly add the newest
    bucket of each running grant (the run that straddled 06:20 UTC added 6)."""
    with clock_at(clock_now()):
        _seed_twice_alike()


def _seed_twice_alike() -> None:
    call_command("seed_demo")
    seen: dict[str, set[tuple[str, str]]] = {}
    for state, department, mode in Allocation.objects.values_list(
        "state", "project__department__slug", "flavor__sharing_mode"
    ):
        seen.setdefault("granted" if state in GRANTED else state, set()).add((department, mode))
    assert seen == STORY
    assert {mode for pairs in STORY.values() for _, mode in pairs} == {flavor["sharing_mode"] for flavor in FLAVORS}
    before = counts()
    call_command("seed_demo")
    assert counts() == before


def test_each_demo_allocation_was_made_through_the_services_and_audited() -> None:
    call_command("seed_demo")
    actions = Counter(
        (event.target_id, event.action)
        for event in AuditEvent.objects.filter(target_type="allocations.allocation", action__startswith="allocation.")
    )
    for allocation in Allocation.objects.all():
        key = str(allocation.pk)
        assert actions[(key, "allocation.requested")] == 1, allocation
        decided = "rejected" if allocation.state == "rejected" else "approved"
        if allocation.state != "pending" and allocation.state != "cancelled":
            assert actions[(key, f"allocation.{decided}")] == 1, allocation
        if allocation.state in ("released", "cancelled"):
            assert actions[(key, f"allocation.{allocation.state}")] == 1, allocation


def test_the_released_grants_lie_in_the_past_with_their_usage_and_the_scheduled_one_ahead() -> None:
    call_command("seed_demo")
    for grant in Allocation.objects.filter(state="released"):
        ended = max(row.released_at for row in grant.reservations.all() if row.released_at is not None)
        usage = AllocationUsage.objects.filter(allocation=grant)
        assert usage.exists(), grant
        assert usage.order_by("-bucket_start").first().bucket_start < ended  # type: ignore[union-attr]
        assert grant.starts_at < ended < grant.ends_at
    scheduled = Allocation.objects.get(state="scheduled")
    assert scheduled.reservations.filter(released_at__isnull=True).count() == scheduled.quantity
    assert not AllocationUsage.objects.filter(allocation=scheduled).exists()


def test_approving_alices_pending_request_would_reclaim_visions_borrowed_slices_only() -> None:
    call_command("seed_demo")
    request = Allocation.objects.get(state="pending", project__slug="nlp-llm")
    preview = admission_preview(allocation_id=request.pk)
    assert preview["admitted"] and preview["starts"] == "after-notice"
    assert [(victim["flavor"], victim["why"]) for victim in preview["reclaim"]] == [("a100-mig-3g-40gb", "borrowed")]


def test_the_pages_show_the_demo_at_first_look() -> None:
    call_command("seed_demo")
    mine = Allocation.objects.filter(requested_by__username="alice").exclude(state__in=["rejected", "cancelled"])
    dashboard = page("alice", "/")
    assert all(f'aria-label="Allocation {pk}"' in dashboard for pk in mine.values_list("pk", flat=True))
    assert "Evaluation of the new checkpoints" in page("bob", "/approvals/")
    assert "Workshop notebooks for the summer students" in page("erin", "/approvals/")
    assert "allocation.released" in page("carol", "/audit/")
    cluster = Cluster.objects.get(name="demo")
    assert "h100-node-5" in page("admin", f"/platform/clusters/{cluster.pk}/")


def test_every_demo_flavor_fits_a_demo_node() -> None:
    """One unit of each flavor, placed by the real engine on the empty demo inventory."""
    demo_seed()
    cluster = Cluster.objects.get(name="demo")
    refused = {}
    for flavor in Flavor.objects.all():
        attempt = placement_attempt(AttemptAsk(cluster, flavor, 1, placement_policy_for(flavor)), reservations=[])
        if len(attempt.bookings) != 1:
            refused[flavor.name] = attempt.reason
    assert Flavor.objects.count() == len(FLAVORS)
    assert refused == {}


def test_the_demo_goes_on_reading_its_gpus_so_the_map_has_a_busy_value_later() -> None:
    """The seed's week ended when it ran and nothing measured the demo cluster after it: a quarter
    of an hour later the GPU map said "busy: unknown" on every GPU. The demo's readings go on."""
    call_command("seed_demo")
    cluster = Cluster.objects.get(name="demo")
    admin = User.objects.get(username="admin")
    later = clock_now() + datetime.timedelta(hours=1)
    held = {
        (node, int(index))
        for node, indices in live_reservations_on(cluster=cluster).filter(
            allocation__starts_at__lte=later, allocation__ends_at__gt=later
        ).values_list("node__name", "gpu_indices")
        for index in indices
    }
    assert held
    stale = gpu_busy_overlay(user=admin, cluster_id=cluster.pk, now=later)
    assert all(stale[key].ratio is None for key in held)  # what the map showed

    assert demo_usage_continue(now=later) > 0
    fresh = gpu_busy_overlay(user=admin, cluster_id=cluster.pk, now=later)
    assert all(fresh[key].ratio is not None for key in held), [key for key in held if fresh[key].ratio is None]
    assert demo_usage_continue(now=later) == 0  # nothing twice
    assert BY_NAME["demo-usage-continue"].task == "demo.tasks.demo_usage_continue_task"
    assert BY_NAME["demo-usage-continue"].wanted(lambda name: name == "GPUPORTAL_DEMO_READINGS")
    assert not BY_NAME["demo-usage-continue"].wanted(lambda name: False)  # off unless make run asks for it



def _stands_for(event: AuditEvent, allocation: Allocation) -> datetime.datetime | None:
    """The moment an allocation's event stands for, by the allocation's own fields."""
    if event.action == "allocation.requested":
        return allocation.created_at
    if event.action in ("allocation.approved", "allocation.rejected"):
        return allocation.decided_at
    if event.action == "allocation.released":
        return max(row.released_at for row in allocation.reservations.all() if row.released_at is not None)
    return None


def test_the_seeded_events_come_in_the_order_and_at_the_moments_they_stand_for() -> None:
    """The seed made its stories at the seeding's moment, the past ones first, and dated their rows
    back afterwards: the audit log, which cannot be dated back, told them out of order and every
    timeline said all happened when the demo was seeded. The seed now plays each step at its moment
    (demo.play), so the log tells the stories in the order they happened and, where the portal's
    clock stamps the log (SQLite: ``make run``'s default), at those moments. PostgreSQL stamps it
    with the database's own clock (docs/audit.md), which no seed moves."""
    call_command("seed_demo")
    allocations = {str(allocation.pk): allocation for allocation in Allocation.objects.prefetch_related("reservations")}
    told = [(event, moment) for event in AuditEvent.objects.filter(target_type="allocations.allocation").order_by("seq")
            if (moment := _stands_for(event, allocations[event.target_id])) is not None]  # fmt: skip
    assert len(told) == 18 + 14 + 3  # 18 requests, 14 decisions (3 requests wait, 1 was withdrawn), 3 releases
    assert [moment for _, moment in told] == sorted(moment for _, moment in told)
    training = Allocation.objects.get(justification="Segmentation model training")
    assert training.decided_at is not None
    assert datetime.timedelta(days=6) < clock_now() - training.decided_at < datetime.timedelta(days=8)
    if connection.vendor == "sqlite":
        assert all(abs(event.occurred_at - moment) < datetime.timedelta(seconds=1) for event, moment in told), told
        assert f"{training.decided_at:%Y-%m-%d %H:%M}" in page("dave", f"/allocations/{training.pk}/")
