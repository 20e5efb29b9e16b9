"""Property: the placement state a process keeps, brought forward from what changed, always equals
the state read and built from scratch, after any sequence of approvals, releases, resizes,
expiries, defragmentation moves and inventory changes, committed one by one on PostgreSQL and
seen by several processes that each look at a different moment (allocations.booking.state).

Two kept caches stand for two processes: "eager" looks after every step, "lagging" only now and
then, so it brings its state forward across many versions at once. Each step compares, for every
flavor's unit shape (MIG ones carved open and not), the engine's picture derived from the kept one
with the picture ``placement_view`` builds from rows read afresh, for the live reservations, for a
request's subset of them without some grants, and for a tenant kept off some nodes.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocations.booking import kept_views
from allocations.booking import state as kept
from allocations.booking.defrag import defrag_apply
from allocations.catalogue.states import HOLDING_STATES
from allocations.grants import changes, services
from allocations.models import Allocation, Flavor
from clusters.inventory import GpuSpec, node_upsert
from clusters.models import Cluster, Node, NodeSharing
from kernel.errors import ApplicationError
from tests.conftest import A100, H100, World, build_world, requires_postgres
from tests.placement.kept_compare import differences

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres()]


def compare(world: World, state: kept.ClusterState, rng: random.Random) -> None:
    found = differences(state, cluster_id=world.cluster.pk, rng=rng)
    assert not found, found


class Caches:
    """The kept states of two processes, swapped in and out of the module."""

    def __init__(self) -> None:
        self.saved: dict[str, tuple[dict[Any, Any], dict[Any, Any]]] = {"eager": ({}, {}), "lagging": ({}, {})}

    def look(self, name: str, world: World, rng: random.Random) -> None:
        """Be process ``name`` for a moment: bring its kept state forward and compare."""
        states, views = self.saved[name]
        kept._STATES.clear()
        kept._STATES.update(states)
        kept_views._VIEWS.clear()
        kept_views._VIEWS.update(views)
        state = kept.cluster_state(cluster=Cluster.objects.get(pk=world.cluster.pk))
        assert state.shared
        compare(world, state, rng)
        self.saved[name] = (dict(kept._STATES), dict(kept_views._VIEWS))


def step(world: World, rng: random.Random, flavors: list[Flavor], number: int) -> str:
    holding = list(Allocation.objects.filter(state__in=HOLDING_STATES).order_by("pk").values_list("pk", flat=True))
    choice = rng.random()
    admin = world.users["platform"]
    if choice < 0.45 or not holding:
        flavor = rng.choice(flavors)
        h100 = flavor.gpu_model == H100
        start = timezone.now()
        later = rng.random() < 0.15  # a scheduled grant: its interval misses a request of now
        allocation = services.allocation_request(
            actor=world.users["vision_member" if h100 else "nlp_member"], project=world.seg if h100 else world.llm,
            flavor=flavor, quantity=rng.randint(1, 3), priority_class=world.standard,
            starts_at=start + datetime.timedelta(days=3 if later else 0),
            ends_at=start + datetime.timedelta(days=5), justification="kept state",
        )
        try:
            services.allocation_approve(actor=world.users["vision_admin" if h100 else "nlp_admin"],
                                        allocation_id=allocation.pk)
        except ApplicationError:
            return "refused"
        return "approved"
    if choice < 0.65:
        services.allocation_release(actor=admin, allocation_id=rng.choice(holding))
        return "released"
    if choice < 0.72:
        target = Allocation.objects.get(pk=rng.choice(holding))
        if target.quantity > 1:
            changes.allocation_resize(actor=admin, allocation_id=target.pk, quantity=target.quantity - 1)
            return "shrunk"
        return "kept"
    if choice < 0.78:
        target = Allocation.objects.get(pk=rng.choice(holding))
        services.allocation_expire(allocation_id=target.pk, now=target.ends_at + datetime.timedelta(seconds=1))
        return "expired"
    if choice < 0.84:
        defrag_apply(cluster_id=world.cluster.pk)
        return "defragmented"
    if choice < 0.92:
        node = rng.choice(list(Node.objects.filter(cluster=world.cluster)))
        Node.objects.filter(pk=node.pk).update(is_schedulable=not node.is_schedulable)  # a raw write: the trigger sees it
        return "cordon"
    node_upsert(actor=None, cluster=world.cluster, name=f"extra-{number}", cpu_millicores=64000, memory_mib=524288,
                gpus=[GpuSpec(index=i, model=rng.choice([A100, H100]), memory_mib=81920, mig_capable=False)
                      for i in range(rng.randint(1, 4))])
    return "node added"


def test_the_kept_state_always_equals_a_fresh_rebuild_across_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert connection.vendor == "postgresql"
    forwarded: list[int] = []
    forward = kept_views._forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        forwarded.append(len(kwargs["nodes"]))
        return forward(*args, **kwargs)

    monkeypatch.setattr(kept_views, "_forward", counted)
    world = build_world(a100_gpus=16, h100_gpus=16)
    Node.objects.filter(name="h100-1").update(sharing=NodeSharing.MPS, sharing_replicas=4)
    mig3 = Flavor.objects.create(
        name="a100-3g", display_name="3g", gpu_model=A100, sharing_mode="mig", mig_profile="3g.40gb",
        resource_name="nvidia.com/mig-3g.40gb", memory_mib=40192, compute_percent=42, gpu_equivalents="0.4286",
        cpu_millicores_per_unit=4000, memory_mib_per_unit=32768,
    )
    flavors = [world.a100, world.h100, world.mig, world.mps, mig3]
    rng = random.Random(20261202)
    caches = Caches()
    seen: dict[str, int] = {}
    for number in range(90):
        what = step(world, rng, flavors, number)
        seen[what] = seen.get(what, 0) + 1
        caches.look("eager", world, rng)
        if number % 7 == 6:
            caches.look("lagging", world, rng)
    assert seen.get("approved", 0) >= 20 and seen.get("released", 0) >= 8, seen
    assert {"shrunk", "expired", "defragmented", "cordon", "node added"} <= set(seen), seen
    assert len(forwarded) >= 100 and max(forwarded) >= 2, forwarded  # pictures were brought forward, not rebuilt


def test_a_state_read_by_the_transaction_that_booked_is_kept_for_nobody() -> None:
    world = build_world(a100_gpus=8, h100_gpus=8)
    first = kept.cluster_state(cluster=world.cluster)
    assert first.shared and kept._STATES[world.cluster.pk] is first
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic():
        kept.placement_version_bump(cluster_id=world.cluster.pk)
        inside = kept.cluster_state(cluster=Cluster.objects.get(pk=world.cluster.pk))
        assert not inside.shared
        assert kept._STATES[world.cluster.pk] is first  # what the open transaction read is not kept
        raise RuntimeError("roll back")
    after = kept.cluster_state(cluster=Cluster.objects.get(pk=world.cluster.pk))
    assert after.shared and after.version == first.version
