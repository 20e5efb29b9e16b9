"""The request form's free count (``placement_preview``, the dry run behind the live feedback)
places the request's own units one by one and counts the rest of a share, of whole GPUs or of MIG
instances without placing them (``placement.placing.free_units``, and the free pinned instances):
its answer is the one placing every unit one after another gives (the free count, whether it is a
lower bound, where the request's units go), and the engine is asked for no unit past the
request's.

The one-by-one answer is the preview as it was: one attempt of ``max(quantity, 32)`` units."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from allocations.booking import attempts
from allocations.booking.attempts import Attempt, AttemptAsk, placement_attempt
from allocations.booking.policy import placement_policy_for
from allocations.booking.preview import ClusterFit, placement_preview
from allocations.booking.reservations import placement_workload
from allocations.booking.state import cluster_state
from allocations.booking.tenancy import tenant_of
from allocations.grants import services
from allocations.models import Flavor
from clusters.models import Node, NodeSharing
from tenants.models import Project
from tests.conftest import World, build_world

pytestmark = pytest.mark.django_db
LIMIT = 32


@pytest.fixture
def wide(db: None) -> World:
    """48 A100s (MIG mixed strategy) and 40 H100s: two H100 nodes MPS with 4 replicas, one
    time-sliced with 2, two whole; nlp holds 3 whole A100s, 3 MPS quarters and 2 MIG slices."""
    world = build_world(a100_gpus=48, h100_gpus=40)
    Node.objects.filter(name__in=["h100-0", "h100-1"]).update(sharing=NodeSharing.MPS, sharing_replicas=4)
    Node.objects.filter(name="h100-2").update(sharing=NodeSharing.TIMESLICE, sharing_replicas=2)
    start = timezone.now()
    for flavor, quantity in ((world.a100, 3), (world.mps, 3), (world.mig, 2)):
        made = services.allocation_request(
            actor=world.users["nlp_member"], project=world.llm, flavor=flavor, quantity=quantity,
            priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=7),
            justification="held",
        )
        services.allocation_approve(actor=world.users["nlp_admin"], allocation_id=made.pk)
    return world


@pytest.fixture
def placements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many decisions the engine is asked for (``place``), counted as the attempts ask."""
    asked = [0]
    real: Callable[..., Any] = vars(attempts)["place"]

    def counting(*args: Any, **kwargs: Any) -> Any:
        asked[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(attempts, "place", counting)
    yield asked


def one_by_one(world: World, flavor: Flavor, quantity: int, project: Project | None) -> Attempt:
    """The preview's attempt as it was: every unit up to the limit placed one after another."""
    ask = AttemptAsk(world.cluster, flavor, max(quantity, LIMIT), placement_policy_for(flavor, placement_workload(
        include=flavor)), None if project is None else tenant_of(project))
    return placement_attempt(ask, state=cluster_state(cluster=world.cluster))


def preview(world: World, flavor: Flavor, quantity: int, project: Project | None) -> ClusterFit:
    [fit] = placement_preview(flavor=flavor, quantity=quantity, cluster=world.cluster, free_limit=LIMIT,
                              project=project)
    return fit


CASES = [("a100", 1), ("a100", 4), ("a100", 40), ("a100", 60), ("h100", 2), ("h100", 20), ("mps", 1), ("mps", 3),
         ("mps", 30), ("mig", 2)]


@pytest.mark.parametrize(("flavor_name", "quantity"), CASES)
@pytest.mark.parametrize("who", ["nlp_llm", "vision_seg", "nobody"])
def test_the_free_count_is_what_placing_every_unit_one_by_one_gives(
    wide: World, placements: list[int], flavor_name: str, quantity: int, who: str,
) -> None:
    flavor = getattr(wide, flavor_name)
    project = {"nlp_llm": wide.llm, "vision_seg": wide.seg, "nobody": None}[who]
    expected = one_by_one(wide, flavor, quantity, project)
    placements[0] = 0
    fit = preview(wide, flavor, quantity, project)
    assert fit.free == len(expected.bookings)
    assert fit.free_is_lower_bound == expected.complete
    assert fit.fits == (len(expected.bookings) >= quantity)
    assert fit.placed == min(quantity, len(expected.bookings))
    assert fit.where == (expected.where(quantity) if fit.fits else {})
    assert (fit.reason, fit.kind) == (("", "") if fit.fits else (expected.reason, expected.kind))
    # The engine is asked only for the request's units (a MIG unit: the carved-first picture, then
    # the policy's), and once more for the unit that finds no place.
    assert placements[0] <= 2 * quantity + (0 if fit.fits else 2)


def test_the_count_spares_the_engine_the_units_past_the_request(wide: World, placements: list[int]) -> None:
    """Counting the free whole A100s (45 of 48: more than the limit) takes one placement, where
    placing them one by one takes one a unit up to the limit."""
    one_by_one(wide, wide.a100, 1, wide.llm)
    assert placements[0] == LIMIT
    placements[0] = 0
    fit = preview(wide, wide.a100, 1, wide.llm)
    assert (fit.free, fit.free_is_lower_bound, placements[0]) == (LIMIT, True, 1)


@pytest.mark.parametrize("quantity", [1, 3, 9, 40])
@pytest.mark.parametrize("who", ["nlp_llm", "vision_seg"])
@pytest.mark.parametrize("others", ["open", "all but one cordoned", "cordoned"])
def test_free_pinned_instances_are_counted_as_placing_them_would_take_them(
    wide: World, placements: list[int], quantity: int, who: str, others: str,
) -> None:
    """A node whose layout is pinned offers its free instances first, then the policy's picture the
    rest: the count adds both, as placing every unit one by one does (the other A100 nodes open,
    all but a100-0 cordoned, or all cordoned: no policy's picture, the pinned instances alone)."""
    Node.objects.filter(name="a100-1").update(
        mig_layout=[{"devices": [0, 1, 2], "mig-devices": {"1g.10gb": 2}}, {"devices": [3], "mig-devices": {"3g.40gb": 2}}]
    )
    cordoned = {"open": [], "all but one cordoned": ["a100-2", "a100-3", "a100-4", "a100-5"],
                "cordoned": ["a100-0", "a100-2", "a100-3", "a100-4", "a100-5"]}[others]
    Node.objects.filter(name__in=cordoned).update(is_schedulable=False)
    project = wide.llm if who == "nlp_llm" else wide.seg
    expected = one_by_one(wide, wide.mig, quantity, project)
    assert any(booking.policy == "pinned-layout" for booking in expected.bookings)
    placements[0] = 0
    fit = preview(wide, wide.mig, quantity, project)
    assert (fit.free, fit.free_is_lower_bound, fit.fits) == (len(expected.bookings), expected.complete,
                                                             len(expected.bookings) >= quantity)
    assert fit.where == (expected.where(quantity) if fit.fits else {})
    assert placements[0] <= 2 * quantity + (0 if fit.fits else 2)
