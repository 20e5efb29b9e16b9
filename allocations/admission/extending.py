"""Admission of a change to a grant (``allocations.grants.changes``): more time, or more units.

A renewal adds the interval ``[old end, new end)``. The quota must have room for the grant at
every moment of that interval (step by step, as an approval: grants that never meet are not added
up), and the GPUs it holds must stay its own: at no instant of the added interval may the other
holding grants booked on them then conflict with it (a whole GPU shared, MIG slices overlapping,
more compute slices than the GPU has, shares beyond one GPU, or the node's CPU or memory
exceeded); grants that never hold at one instant are not added up. The grant keeps its
reservations; nothing moves.

A raise adds units over what remains of the grant's interval (from now, or from its start when
that is ahead): the quota is checked with the full new quantity, and only the added units are
placed, on the grant's own cluster, next to everything booked there over that interval (the
grant's own units included).

Neither reclaims anything, unlike an approval (``docs/quotas.md``): a change that does not fit is
refused with the numbers, or with the grants in the way. Read-only: ``allocations.grants.changes`` calls
these under its locks (the allocation, the department chain, the grant's cluster).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from allocations.admission.planning import department_rows, department_totals, grant_amounts, in_steps, interval_tree
from allocations.admission.project_caps import project_cap_refusal
from allocations.booking.attempts import Attempt, AttemptAsk, placement_attempt
from allocations.booking.policy import placement_policy_for
from allocations.booking.reservations import placement_refusal, placement_workload
from allocations.booking.tenancy import tenant_of
from allocations.booking.view import gpu_label, node_rows
from allocations.catalogue.selectors import live_reservations_on
from allocations.catalogue.states import HOLDING_STATES
from allocations.models import Allocation, Reservation
from allocations.quotas import algebra
from allocations.quotas.effective_tree import QuotaView, binding_checks, unstepped
from allocations.quotas.wording import change_exceeded_words, no_quota_words, scope_words
from clusters.models import Cluster, Gpu, Node
from kernel.errors import CapacityExceeded, QuotaExceeded
from kernel.numbers import plain
from kernel.times import span_utc
from placement.mig import COMPUTE_SLICES, geometry_for_model
from placement.peaks import at_one_instant, sweep
from tenants.access import department_ancestor_ids, department_parent_map, department_subtree_ids
from tenants.models import Department

GPU_MILLI = 1000


def _interval(starts_at: datetime.datetime, ends_at: datetime.datetime) -> dict[str, str]:
    return {"from": starts_at.isoformat(), "until": ends_at.isoformat()}


def quota_refusal(
    *, allocation: Allocation, quantity: int, starts_at: datetime.datetime, ends_at: datetime.datetime
) -> QuotaExceeded | None:
    """Why ``quantity`` units of the allocation do not fit its department chain's quotas over
    ``[starts_at, ends_at)`` next to every other holding grant there, or None when they do. The
    allocation's own holding is left out (it is what is being checked). The project's caps first."""
    capped = project_cap_refusal(allocation=allocation, quantity=quantity, starts_at=starts_at, ends_at=ends_at)
    if capped is not None:
        return capped
    flavor = allocation.flavor
    parents = department_parent_map()
    department_id = allocation.project.department_id
    chain = department_ancestor_ids(department_id=department_id, parents=parents)
    names = dict(Department.objects.filter(pk__in=chain).values_list("pk", "slug"))
    amounts = grant_amounts(flavor_id=flavor.pk, quantity=quantity, gpu_equivalents=flavor.gpu_equivalents)
    # The same grant over the interval asked about: the grouped rows leave it out by its id.
    hypothetical = Allocation(
        pk=allocation.pk, project=allocation.project, flavor=flavor, quantity=quantity,
        priority_class=allocation.priority_class, starts_at=starts_at, ends_at=ends_at,
    )
    tree_ids = department_subtree_ids(root_ids=[chain[-1]], parents=parents)
    rows = department_rows(allocation=hypothetical, department_ids=tree_ids)
    # The effective quotas over the interval, step by step where a window or another grant changes:
    # grants that never meet within it are not added up.
    tree = interval_tree(QuotaView.read(parents=parents), rows=rows, start=starts_at, end=ends_at)
    ask = algebra.Ask(
        department_id=department_id,
        amounts=in_steps(tree, tree.class_amounts(department_id, allocation.priority_class_id, amounts), starts_at,
                         ends_at),
        priority=allocation.priority_class.value,
        factor=allocation.priority_class.oversubscription_factor,
    )
    totals, _ = department_totals(allocation=hypothetical, rows=rows, tree=tree)
    checks = binding_checks(algebra.checks_from_totals(tree, totals, ask))
    if not checks:
        return QuotaExceeded(
            no_quota_words(department=names[department_id], flavor=flavor.name),
            details={"department": names[department_id], "flavor": flavor.name, "requested": str(quantity),
                     "limit": "0", **_interval(starts_at, ends_at)},
        )
    failing = [check for check in checks if not check.fits]
    if not failing:
        return None
    check = failing[0]
    what = scope_words(check.scope, flavor=flavor.name, priority_class=allocation.priority_class.name)
    department = names.get(check.department_id, str(check.department_id))
    return QuotaExceeded(
        change_exceeded_words(check=check, what=what, department=department, starts_at=starts_at, ends_at=ends_at),
        details={
            "department": department,
            "flavor": flavor.name if unstepped(check.scope)[0] is not None else None,
            "requested": plain(check.requested),
            "in_use": plain(check.holds),
            "limit": plain(check.limit),
            "effective_limit": plain(check.effective_limit),
            **_interval(starts_at, ends_at),
        },
    )


def _overlapping_rows(
    *, node_ids: set[int], starts_at: datetime.datetime, ends_at: datetime.datetime
) -> list[Reservation]:
    """The live reservations on these nodes of holding grants whose intervals overlap ``[starts_at, ends_at)``."""
    return list(
        live_reservations_on(node_ids=node_ids)
        .filter(allocation__state__in=HOLDING_STATES, allocation__starts_at__lt=ends_at,
                allocation__ends_at__gt=starts_at)
        .select_related("node", "allocation__project")
        .order_by("pk")
    )


def _slices_clash(model: tuple[str, int] | None, own: list[Reservation], others: list[Reservation]) -> bool:
    """Whether MIG instances of ``own`` and ``others`` on one GPU cannot coexist: their memory
    slices overlap, or together they need more compute slices than the GPU has. Unknown geometry
    or profile: assume they clash."""
    geometry = geometry_for_model(*model) if model is not None else None
    if geometry is None:
        return True
    masks: list[int] = []
    compute = 0
    for row in (*own, *others):
        profile = geometry.by_name.get(row.mig_profile)
        if profile is None:
            return True
        masks.append(profile.slice_mask(int(row.mig_start or 0)))
        compute += profile.compute
    own_mask = 0
    for mask in masks[: len(own)]:
        own_mask |= mask
    return compute > COMPUTE_SLICES or any(mask & own_mask for mask in masks[len(own):])


def _at_once(
    theirs: list[Reservation], starts_at: datetime.datetime, ends_at: datetime.datetime,
    clash: Callable[[list[Reservation]], bool],
) -> list[Reservation]:
    """The rows of ``theirs`` that ``clash`` with what the grant keeps at some instant of
    ``[starts_at, ends_at)`` (when the grant holds all of its own rows): rows that never hold at one
    instant are never put together (``placement.peaks``). ``clash`` grows with the
    rows it is given, so the sets held right after a row begins are the only ones asked."""
    spans = [(max(row.allocation.starts_at, starts_at).timestamp(), min(row.allocation.ends_at, ends_at).timestamp())
             for row in theirs]
    if at_one_instant(spans):
        return list(theirs) if clash(theirs) else []
    held: list[int] = []
    found: dict[int, Reservation] = {}
    for position, begins in sweep(spans):
        if not begins:
            held.remove(position)
            continue
        held.append(position)
        now = [theirs[index] for index in held]
        if clash(now):
            found.update((row.pk, row) for row in now)
    return sorted(found.values(), key=lambda row: row.pk)


def _gpu_clash(model: tuple[str, int] | None, mine: list[Reservation]) -> Callable[[list[Reservation]], bool]:
    def clash(theirs: list[Reservation]) -> bool:
        if any(row.mig_profile for row in (*mine, *theirs)):
            return any(not row.mig_profile for row in (*mine, *theirs)) or _slices_clash(model, mine, theirs)
        return sum(row.gpu_milli for row in (*mine, *theirs)) > GPU_MILLI
    return clash


def _node_clash(node: Node, mine: list[Reservation]) -> Callable[[list[Reservation]], bool]:
    def clash(theirs: list[Reservation]) -> bool:
        here = (*mine, *theirs)
        cpu_over = node.cpu_millicores > 0 and sum(row.cpu_millicores for row in here) > node.cpu_millicores
        return cpu_over or (node.memory_mib > 0 and sum(row.memory_mib for row in here) > node.memory_mib)
    return clash


def gpu_conflicts(
    *, allocation: Allocation, starts_at: datetime.datetime, ends_at: datetime.datetime
) -> CapacityExceeded | None:
    """Why the allocation cannot keep its booked GPUs over ``[starts_at, ends_at)``: the other
    holding grants booked on them at some instant of it, in a way that conflicts then; None when
    none is. Grants that never hold at one instant are not added up (MIG compute, shares, CPU and
    memory: the most held at once)."""
    own = list(live_reservations_on().filter(allocation=allocation).select_related("node").order_by("pk"))
    others = [
        row for row in _overlapping_rows(node_ids={row.node_id for row in own}, starts_at=starts_at, ends_at=ends_at)
        if row.allocation_id != allocation.pk
    ]
    if not own or not others:
        return None
    by_gpu: dict[tuple[int, int], tuple[list[Reservation], list[Reservation]]] = defaultdict(lambda: ([], []))
    for row in [*own, *others]:
        for index in row.gpu_indices:
            by_gpu[(row.node_id, int(index))][0 if row.allocation_id == allocation.pk else 1].append(row)
    models = {
        (node_id, index): (model, memory)
        for node_id, index, model, memory in Gpu.objects.filter(node_id__in={row.node_id for row in own})
        .values_list("node_id", "index", "model", "memory_mib")
    }
    clashing: list[Reservation] = []
    where: list[str] = []
    for (node_id, index), (mine, theirs) in sorted(by_gpu.items()):
        found = _at_once(theirs, starts_at, ends_at, _gpu_clash(models.get((node_id, index)), mine)) if mine else []
        if found:
            clashing += found
            where.append(f"{mine[0].node.name}:{gpu_label([index], None, None)}")
    for node_id in sorted({row.node_id for row in own}):
        mine = [row for row in own if row.node_id == node_id]
        found = _at_once([row for row in others if row.node_id == node_id], starts_at, ends_at,
                         _node_clash(mine[0].node, mine))
        if found:
            clashing += found
            where.append(f"{mine[0].node.name}: CPU or memory")
    if not clashing:
        return None
    grants = sorted({row.allocation_id: row for row in clashing}.items())
    names = ", ".join(f"#{pk} ({row.allocation.project.slug})" for pk, row in grants)
    return CapacityExceeded(
        f"Allocation #{allocation.pk} cannot keep its GPUs from {span_utc(starts_at, ends_at)}: grant {names} is "
        f"booked on them then ({'; '.join(where)}). "
        "A change reclaims nothing.",
        details={"conflicts": [pk for pk, _ in grants], "where": where, **_interval(starts_at, ends_at)},
    )


def renewal_refusal(*, allocation: Allocation, ends_at: datetime.datetime) -> QuotaExceeded | CapacityExceeded | None:
    """Why the holding allocation cannot run on to ``ends_at`` (quota first, then its GPUs)."""
    start = allocation.ends_at
    return quota_refusal(allocation=allocation, quantity=allocation.quantity, starts_at=start, ends_at=ends_at) or (
        gpu_conflicts(allocation=allocation, starts_at=start, ends_at=ends_at)
    )


def added_units_attempt(
    *, allocation: Allocation, cluster: Cluster, added: int, starts_at: datetime.datetime
) -> Attempt:
    """Where ``added`` more units of the allocation would go on ``cluster`` over ``[starts_at,
    its end)``, next to every booking of that interval (its own units included). Nothing stored."""
    flavor = allocation.flavor
    nodes = node_rows(cluster, gpu_model=flavor.gpu_model)
    rows = _overlapping_rows(node_ids={row.node.pk for row in nodes}, starts_at=starts_at, ends_at=allocation.ends_at)
    workload = placement_workload(include=flavor)
    ask = AttemptAsk(cluster, flavor, added, placement_policy_for(flavor, workload), tenant_of(allocation.project))
    return placement_attempt(ask, nodes=nodes, reservations=rows)


def raise_refusal(*, allocation: Allocation, attempt: Attempt) -> CapacityExceeded:
    return placement_refusal(flavor=allocation.flavor, quantity=attempt.quantity, attempts=[attempt])


def refusal_details(refusal: QuotaExceeded | CapacityExceeded) -> dict[str, Any]:
    return {"code": refusal.code, "message": refusal.message, **refusal.details}
