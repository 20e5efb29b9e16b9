"""Which scopes protect a grant within its department's guarantee (the victim choice, pure).

Found by the simulator (seed 11, step 610): vision's 2 MPS shares lay within vision's guarantee of
4 GPU-equivalents, yet both were taken to make room on the MPS GPUs for an nlp request, because a
quota window had set the standard class's share at acme, the root: the nearest quota of that scope
on vision's chain was acme's, whose subtree holds nlp too, and that alone let every unit go. A
scope whose nearest quota lies above both departments neither protects a grant nor frees it; the
guarantee of vision still does."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from allocations.quotas import algebra, victims

ACME, NLP, VISION = 1, 2, 4
MPS = 4  # the flavor
STANDARD = algebra.class_scope(1, None)  # the standard class's share, set at acme by a window
SHARES = 11  # vision's grant of 2 MPS shares on the MPS GPUs, the only grant there


def _tree(*, share_at_root: bool) -> algebra.Tree:
    limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {
        (ACME, None): algebra.Limit(ACME, None, Decimal(10), Decimal(10)),
        (NLP, None): algebra.Limit(NLP, None, Decimal(5), Decimal(8)),
        (NLP, MPS): algebra.Limit(NLP, MPS, Decimal(2), Decimal(6)),
        (VISION, None): algebra.Limit(VISION, None, Decimal(4), Decimal(7)),
    }
    if share_at_root:
        limits[(ACME, STANDARD)] = algebra.Limit(ACME, STANDARD, Decimal(8), Decimal(8), cap=Decimal(8))
    return algebra.Tree(parents={ACME: None, NLP: ACME, VISION: ACME}, limits=limits)


def _standard(amounts: Mapping[algebra.Scope, Decimal], *, share_at_root: bool) -> dict[algebra.Scope, Decimal]:
    return {**amounts, STANDARD: amounts[None]} if share_at_root else dict(amounts)


def _plan(*, share_at_root: bool) -> algebra.Plan:
    tree = _tree(share_at_root=share_at_root)
    shares = algebra.Grant(SHARES, VISION, _standard({None: Decimal("0.5"), MPS: Decimal(2)}, share_at_root=share_at_root),
                           priority=1000, age=1, units=2)
    exclusive = algebra.Grant(12, VISION, {None: Decimal(1)}, priority=1000, age=2)
    grants = [shares, exclusive]  # vision holds 1.5 of its guaranteed 4
    ask = algebra.Ask(NLP, _standard({None: Decimal("0.25"), MPS: Decimal(1)}, share_at_root=share_at_root), priority=1000)
    room = victims.room_facts(tree, grants, ask, local={SHARES})
    return victims.plan(tree, grants, ask, capacity_fits=lambda cut: any(gid == SHARES for gid, _ in cut),
                        capacity_candidates=room)


def test_a_grant_within_its_guarantee_is_not_taken_for_room_by_another_department() -> None:
    plan = _plan(share_at_root=False)

    assert not plan.admitted and plan.victims == ()


def test_a_class_share_at_the_root_does_not_free_a_grant_its_departments_guarantee_protects() -> None:
    plan = _plan(share_at_root=True)

    assert not plan.admitted and plan.victims == ()


def test_a_scope_whose_nearest_quota_holds_the_request_too_neither_protects_nor_frees() -> None:
    tree = _tree(share_at_root=True)
    grant = algebra.Grant(SHARES, VISION, {None: Decimal("0.5"), STANDARD: Decimal("0.5")}, priority=1000, age=1, units=2)
    only_the_share = algebra.Grant(13, VISION, {STANDARD: Decimal("0.5")}, priority=1000, age=2, units=2)
    ask = algebra.Ask(NLP, {None: Decimal("0.25"), STANDARD: Decimal("0.25")}, priority=1000)
    view = victims.View(tree, [grant, only_the_share])

    assert view.free_units(grant, ask) == 0  # vision's guarantee protects it
    assert view.free_units(only_the_share, ask) == 2  # nothing below acme protects it
