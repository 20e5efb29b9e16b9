"""Among victims of equal priority, the department most over its fair share gives first, whatever
the grants' ages: in the pure algebra (``allocations.quotas.algebra``) and through approval."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from allocations.grants import services
from allocations.models import Allocation, AllocationState, Quota
from allocations.models.fair_share import FairShare
from allocations.quotas import algebra, victims
from tenants.models import Department, Project, Role
from tests.conftest import World
from tests.quotas.test_algebra_properties import CLASSES, SETTINGS, Stream, streams

D = Decimal
ORG, NLP, VISION, AUDIO = 1, 2, 3, 4


def borrowing_tree() -> algebra.Tree:
    """An organisation with a limit of 4 and three departments: nlp and vision guaranteed nothing
    (whatever they hold, they borrow), audio guaranteed 2."""
    return algebra.Tree(
        parents={ORG: None, NLP: ORG, VISION: ORG, AUDIO: ORG},
        limits={
            (ORG, None): algebra.Limit(ORG, None, D(0), D(4)),
            (NLP, None): algebra.Limit(NLP, None, D(0), D(4)),
            (VISION, None): algebra.Limit(VISION, None, D(0), D(4)),
            (AUDIO, None): algebra.Limit(AUDIO, None, D(2), D(4)),
        },
    )


@pytest.mark.parametrize("nlp_is_newer", [True, False])
@pytest.mark.parametrize(("nlp_factor", "vision_factor", "taken"), [(0.25, 0.75, NLP), (0.75, 0.25, VISION)])
def test_the_department_furthest_over_its_share_gives_first_whatever_the_ages(
    nlp_is_newer: bool, nlp_factor: float, vision_factor: float, taken: int
) -> None:
    ages = {NLP: 2, VISION: 1} if nlp_is_newer else {NLP: 1, VISION: 2}
    grants = [
        algebra.Grant(10, NLP, {None: D(2)}, priority=1000, age=ages[NLP], fair_share=nlp_factor),
        algebra.Grant(11, VISION, {None: D(2)}, priority=1000, age=ages[VISION], fair_share=vision_factor),
    ]
    plan = victims.plan(borrowing_tree(), grants, algebra.Ask(AUDIO, {None: D(2)}, priority=1000))
    assert plan.admitted
    assert [(victim.allocation_id, victim.why) for victim in plan.victims] == [(10 if taken == NLP else 11, "borrowed")]


def test_with_equal_fair_shares_the_newest_gives_first_and_priority_still_comes_before_fair_share() -> None:
    tree, ask = borrowing_tree(), algebra.Ask(AUDIO, {None: D(2)}, priority=1000)
    equal = [algebra.Grant(10, NLP, {None: D(2)}, 1000, age=1), algebra.Grant(11, VISION, {None: D(2)}, 1000, age=2)]
    assert [victim.allocation_id for victim in victims.plan(tree, equal, ask).victims] == [11]
    lower = [algebra.Grant(10, NLP, {None: D(2)}, 100, age=1, fair_share=1.0),
             algebra.Grant(11, VISION, {None: D(2)}, 1000, age=2, fair_share=0.1)]
    assert [victim.allocation_id for victim in victims.plan(tree, lower, ask).victims] == [10]


@SETTINGS
@given(stream=streams(), factors=st.lists(st.sampled_from([0.2, 0.5, 1.0]), min_size=32, max_size=32))
def test_victims_are_ordered_oversubscribed_first_then_priority_then_fair_share_then_newest(
    stream: Stream, factors: list[float]
) -> None:
    """The quota properties' random streams, each department given a fair-share factor."""
    tree, ops, locked = stream
    grants: list[algebra.Grant] = []
    for pk, (kind, department, flavor, units, name) in enumerate(ops, start=1):
        if kind == "release":
            if grants:
                grants.pop(department % len(grants))
            continue
        priority, factor, preempts = CLASSES[name]
        amounts: dict[algebra.Scope, Decimal] = {flavor: D(units), None: D(units) * (D(1) if flavor == 7 else D("0.5"))}
        ask = algebra.Ask(department, amounts, priority, factor, preempts)
        plan = victims.plan(tree, list(grants), ask)
        if not plan.admitted:
            continue
        by_id = {grant.allocation_id: grant for grant in grants}
        keys = [(v.why != "oversubscribed", by_id[v.allocation_id].priority, by_id[v.allocation_id].fair_share,
                 -by_id[v.allocation_id].age) for v in plan.victims]  # fmt: skip
        assert keys == sorted(keys)
        gone = {victim.allocation_id for victim in plan.victims}
        grants = [grant for grant in grants if grant.allocation_id not in gone]
        grants.append(algebra.Grant(pk, department, amounts, priority, age=pk, takeable=pk not in locked,
                                    fair_share=factors[department % len(factors)]))  # fmt: skip


# ------------------------------------------------------------------------------------ through approval


def ask(world: World, persona: str, project: Project, quantity: int, flavor: str = "a100") -> Allocation:
    start = timezone.now()
    return services.allocation_request(
        actor=world.users[persona], project=project, flavor=getattr(world, flavor), quantity=quantity,
        priority_class=world.standard, starts_at=start, ends_at=start + datetime.timedelta(days=1),
        justification="fair share",
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("usage", "shares", "taken"),
    [
        ({"nlp": 100.0, "vision": 1.0}, {}, "nlp"),
        ({"nlp": 1.0, "vision": 100.0}, {}, "vision"),
        ({"nlp": 100.0, "vision": 1.0}, {"nlp": 1000}, "vision"),  # nlp used more, but for far more shares
    ],
)
@pytest.mark.parametrize("taken_is_newer", [True, False])
def test_approval_reclaims_the_borrowed_grant_of_the_department_most_over_its_share(
    world: World, usage: dict[str, float], shares: dict[str, int], taken: str, taken_is_newer: bool
) -> None:
    """acme may hold 4; nlp and vision (guaranteed nothing) borrow 2 each; audio, within its
    guarantee of 2, asks for 2. One of the two borrowed grants must go: the one of the department
    with the larger decayed usage for its shares, older or newer."""
    Quota.objects.filter(department=world.acme, flavor=None).update(limit=Decimal(4))
    audio = Department.objects.create(slug="audio", name="Audio", parent=world.acme)
    Quota.objects.create(department=audio, flavor=None, guaranteed=Decimal(2), limit=Decimal(4))
    studio = Project.objects.create(slug="audio-studio", name="Studio", department=audio)
    studio.members.add(world.persona_add("audio_member", role=Role.RESEARCHER, department=audio))
    world.persona_add("audio_admin", role=Role.DEPARTMENT_ADMIN, department=audio)
    kept = "vision" if taken == "nlp" else "nlp"
    granted = {}
    for name in [kept, taken] if taken_is_newer else [taken, kept]:  # the later one is the newer
        project, flavor = (world.llm, "a100") if name == "nlp" else (world.seg, "h100")
        request = ask(world, f"{name}_member", project, 2, flavor)
        granted[name] = services.allocation_approve(actor=world.users[f"{name}_admin"], allocation_id=request.pk)
    now = timezone.now()
    for name, used in usage.items():
        FairShare.objects.create(department=getattr(world, name), usage=used, shares=shares.get(name, 1), as_of=now)

    request = ask(world, "audio_member", studio, 2)
    services.allocation_approve(actor=world.users["audio_admin"], allocation_id=request.pk)

    states = {name: Allocation.objects.get(pk=grant.pk).state for name, grant in granted.items()}
    assert states[taken] == AllocationState.RECLAIMING
    assert states[kept] != AllocationState.RECLAIMING
