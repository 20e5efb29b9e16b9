"""Room on one node (``allocations.quotas.node_room``): a request within its guarantee whose units
need a node that no victims of the plan leave empty gets the one node its borrowers can empty while
each stays at or above its guarantee; never a node where that would take a department below its
guarantee, nor its own department's grants, nor a request beyond its guarantee (docs/quotas.md,
"Room on one node")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from allocations.quotas import algebra, victims
from allocations.quotas.node_room import node_room_plan

D = Decimal
ROOT, BORROWER, ASKER, OTHER = 1, 2, 3, 4


def tree(borrower_guarantee: int = 2) -> algebra.Tree:
    limits: dict[tuple[int, algebra.Scope], algebra.Limit] = {(ROOT, None): algebra.Limit(ROOT, None, D(8), D(8))}
    for department, guarantee in ((BORROWER, borrower_guarantee), (ASKER, 2), (OTHER, 2)):
        limits[(department, None)] = algebra.Limit(department, None, D(guarantee), D(8))
    return algebra.Tree(parents={ROOT: None, BORROWER: ROOT, ASKER: ROOT, OTHER: ROOT}, limits=limits)


def grant(gid: int, department: int, units: int = 1) -> algebra.Grant:
    return algebra.Grant(allocation_id=gid, department_id=department, amounts={None: D(units)}, priority=10,
                         age=gid, units=units)


def fits_when_a_node_is_empty(units_on: Mapping[int, Sequence[str]],
                              grants: Sequence[algebra.Grant]) -> Callable[[victims.Cut], bool]:
    """The capacity callback: the request needs a whole node (every unit is one GPU)."""
    def fits(cut: victims.Cut) -> bool:
        taken = dict(cut)
        for node in {n for nodes in units_on.values() for n in nodes}:
            used = 0
            for g in grants:
                nodes = list(units_on.get(g.allocation_id, ()))
                keep = len(nodes) - taken.get(g.allocation_id, 0)
                used += sum(1 for n in nodes[:keep] if n == node)
            if used == 0:
                return True
        return False
    return fits


# The borrower holds 4 against a guarantee of 2: its two oldest grants (1 and 2) are within it by
# rank and one sits on each node, next to a newer one, so no set of borrowed grants empties a node.
GRANTS = [grant(1, BORROWER), grant(2, BORROWER), grant(3, BORROWER), grant(4, BORROWER)]
UNITS_ON = {1: ["a"], 2: ["b"], 3: ["a"], 4: ["b"]}
ASK = algebra.Ask(department_id=ASKER, amounts={None: D(2)}, priority=10)


def test_the_plan_frees_grants_but_no_node_so_one_node_is_emptied_from_the_borrowers_surplus() -> None:
    fits = fits_when_a_node_is_empty(UNITS_ON, GRANTS)
    room = victims.room_facts(tree(), GRANTS, ASK, local={1, 2, 3, 4})
    assert set(room) == {3, 4}  # only the newest two lie beyond the borrower's guarantee
    assert not victims.plan(tree(), GRANTS, ASK, capacity_fits=fits, capacity_candidates=room).admitted
    plan = node_room_plan(tree(), GRANTS, ASK, units_on=UNITS_ON, capacity_fits=fits)
    assert plan is not None and plan.admitted
    assert {(v.allocation_id, v.units) for v in plan.victims} == {(1, 1), (3, 1)}  # node a: the first by name
    assert all(v.why == "borrowed" and v.fact is not None and v.fact.basis == "surplus" for v in plan.victims)
    assert plan.victims[0].fact is not None and plan.victims[0].fact.held == 4 and plan.victims[0].fact.line == 2


def test_no_node_is_emptied_below_a_guarantee_nor_for_a_request_beyond_its_own() -> None:
    fits = fits_when_a_node_is_empty(UNITS_ON, GRANTS)
    assert node_room_plan(tree(borrower_guarantee=3), GRANTS, ASK, units_on=UNITS_ON, capacity_fits=fits) is None
    beyond = algebra.Ask(department_id=ASKER, amounts={None: D(3)}, priority=10)  # its guarantee is 2
    assert node_room_plan(tree(), GRANTS, beyond, units_on=UNITS_ON, capacity_fits=fits) is None


def test_its_own_departments_grants_and_grants_being_reclaimed_are_never_taken() -> None:
    own = [grant(1, ASKER), *GRANTS[1:]]  # node a holds a grant of the asker's own department
    small = algebra.Ask(department_id=ASKER, amounts={None: D(1)}, priority=10)
    plan = node_room_plan(tree(borrower_guarantee=1), own, small, units_on=UNITS_ON,
                          capacity_fits=fits_when_a_node_is_empty(UNITS_ON, own))
    assert plan is not None and {v.allocation_id for v in plan.victims} == {2, 4}  # node b instead
    locked = [GRANTS[0], GRANTS[1], algebra.Grant(3, BORROWER, {None: D(1)}, 10, 3, takeable=False), GRANTS[3]]
    plan = node_room_plan(tree(), locked, ASK, units_on=UNITS_ON,
                          capacity_fits=fits_when_a_node_is_empty(UNITS_ON, locked))
    assert plan is not None and {v.allocation_id for v in plan.victims} == {2, 4}  # node a holds a grant being reclaimed


def test_a_grant_gives_back_its_units_from_the_first_on_the_node_to_its_last() -> None:
    spread = [grant(1, BORROWER), grant(2, BORROWER, units=3)]
    units_on = {1: ["a"], 2: ["b", "a", "b"]}  # its second unit is on a: the second and third go
    plan = node_room_plan(tree(borrower_guarantee=1), spread, ASK, units_on=units_on,
                          capacity_fits=fits_when_a_node_is_empty(units_on, spread))
    assert plan is not None and {(v.allocation_id, v.units) for v in plan.victims} == {(1, 1), (2, 2)}
    assert node_room_plan(tree(), spread, ASK, units_on=units_on,
                          capacity_fits=fits_when_a_node_is_empty(units_on, spread)) is None  # 3 beyond a surplus of 2


def test_the_node_emptied_may_also_free_the_quota_the_request_needs() -> None:
    full = tree()
    limits = dict(full.limits)
    limits[(ROOT, None)] = algebra.Limit(ROOT, None, D(4), D(4))  # the borrower's 4 fill the root's limit
    full = algebra.Tree(parents=full.parents, limits=limits)
    fits = fits_when_a_node_is_empty(UNITS_ON, GRANTS)
    assert not victims.plan(full, GRANTS, ASK, capacity_fits=fits,
                            capacity_candidates=victims.room_facts(full, GRANTS, ASK, local={1, 2, 3, 4})).admitted
    plan = node_room_plan(full, GRANTS, ASK, units_on=UNITS_ON, capacity_fits=fits)
    assert plan is not None and {v.allocation_id for v in plan.victims} == {1, 3}  # 2 + 2 of the root's 4
    smaller = dict(limits)
    smaller[(ROOT, None)] = algebra.Limit(ROOT, None, D(3), D(3))  # 4 - 2 + 2 is beyond 3: no node frees enough
    assert node_room_plan(algebra.Tree(parents=full.parents, limits=smaller), GRANTS, ASK, units_on=UNITS_ON,
                          capacity_fits=fits) is None
