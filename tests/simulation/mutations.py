"""Five ways to break the code on purpose, each by monkeypatching the real function, and the
invariant that must catch it (``python -m tests.simulation --mutation NAME``, docs/simulation.md):

* ``count-non-overlapping``: the quotas' displayed use counts a grant that does not hold now;
* ``skip-edge-reclaim``: a quota window's shrink edge reclaims nothing;
* ``drop-notice``: a reclaimed grant gets no notice, whatever its class says;
* ``double-book-slice``: a MIG unit is booked on memory slices a grant holding at the same time has;
* ``reclaim-beneficiary``: an approval also takes a grant that waits for its own victims (and the
  check that refuses such a plan under the locks is gone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import allocations.admission.planning
import allocations.api.catalogue
import allocations.api.preview
import allocations.grants.reclaims
import allocations.grants.services
import allocations.quotas.usage
import allocations.windows.tick
from allocations.admission.planning import VictimInfo
from allocations.booking import reservations
from allocations.models import Allocation, Reservation
from kernel.clock import clock_now
from tests.simulation.ledger import HOLDING

Patch = list[tuple[Any, str, Any]]


def _count_non_overlapping(patch: Patch) -> None:
    original = allocations.quotas.usage.quota_usages

    def quota_usages(*args: Any, **kwargs: Any) -> Any:
        usages = original(*args, **kwargs)
        now = clock_now()
        other = (Allocation.objects.filter(state__in=HOLDING, starts_at__gt=now).select_related("flavor", "project")
                 .order_by("pk").first())
        if other is None:
            return usages
        out = []
        for usage in usages:
            quota = usage.quota
            if quota.department_id == other.project.department_id and quota.flavor_id in (None, other.flavor_id):
                extra = other.quantity if quota.flavor_id else other.flavor.gpu_equivalents * other.quantity
                usage = dataclasses.replace(usage, in_use=usage.in_use + extra)
            out.append(usage)
        return out

    patch.append((allocations.api.catalogue, "quota_usages", quota_usages))


def _skip_edge_reclaim(patch: Patch) -> None:
    def victims_locked(**kwargs: Any) -> tuple[list[VictimInfo], dict[int, Allocation], bool]:
        del kwargs
        return [], {}, False

    patch.append((allocations.windows.tick, "_victims_locked", victims_locked))


def _drop_notice(patch: Patch) -> None:
    original = allocations.admission.planning.victim_infos

    def victim_infos(*args: Any, **kwargs: Any) -> list[VictimInfo]:
        return [dataclasses.replace(info, notice_minutes=0) for info in original(*args, **kwargs)]

    patch.append((allocations.admission.planning, "victim_infos", victim_infos))


def _double_book_slice(patch: Patch) -> None:
    original = reservations.reservations_store

    def reservations_store(*, allocation: Allocation, attempt: Any, first_unit: int = 0) -> list[Reservation]:
        rows = original(allocation=allocation, attempt=attempt, first_unit=first_unit)
        for row in rows:
            if not row.mig_profile:
                continue
            other = (Reservation.objects.filter(released_at__isnull=True, node_id=row.node_id, mig_profile=row.mig_profile,
                                                allocation__state__in=HOLDING, gpu_indices=row.gpu_indices,
                                                allocation__starts_at__lt=allocation.ends_at,
                                                allocation__ends_at__gt=allocation.starts_at)
                     .exclude(allocation=allocation).order_by("pk").first())
            if other is not None and other.mig_start != row.mig_start:
                Reservation.objects.filter(pk=row.pk).update(mig_start=other.mig_start)
                row.mig_start = other.mig_start
                break
        return rows

    patch.append((reservations, "reservations_store", reservations_store))


def _reclaim_beneficiary(patch: Patch) -> None:
    original = allocations.admission.planning.admission_decide

    def admission_decide(*, allocation: Allocation, **kwargs: Any) -> Any:
        decision = original(allocation=allocation, **kwargs)
        if decision.refusal is not None:
            return decision
        from allocations.catalogue.states import reclaim_pending_q  # a tree without partial reclaims has none

        promised = Allocation.objects.filter(reclaim_pending_q()).exclude(reclaimed_for=None).values("reclaimed_for_id")
        waiting = (Allocation.objects.filter(pk__in=promised, state__in=HOLDING - {"reclaiming"})
                   .exclude(pk=allocation.pk).select_related("project__department", "flavor", "priority_class")
                   .order_by("pk").first())
        if waiting is None or any(victim.allocation_id == waiting.pk for victim in decision.victims):
            return decision
        decision.victims.append(VictimInfo(
            allocation_id=waiting.pk, project=waiting.project.slug, department=waiting.project.department.slug,
            flavor=waiting.flavor.name, quantity=waiting.quantity, priority_class=waiting.priority_class.name,
            state=waiting.state, why="oversubscribed", notice_minutes=waiting.priority_class.notice,
        ))
        return decision

    def check_victims(*args: Any, **kwargs: Any) -> None:
        del args, kwargs  # the guard that holds a plan to leaving such grants out, gone too

    patch.append((allocations.grants.services, "admission_decide", admission_decide))
    patch.append((allocations.api.preview, "admission_decide", admission_decide))
    patch.append((allocations.grants.reclaims, "_check_victims", check_victims))


MUTATIONS: dict[str, tuple[str, Callable[[Patch], None]]] = {
    "count-non-overlapping": ("displayed-in-use", _count_non_overlapping),
    "skip-edge-reclaim": ("shrink-reclaim-met", _skip_edge_reclaim),
    "drop-notice": ("reclaim-notice", _drop_notice),
    "double-book-slice": ("capacity", _double_book_slice),
    "reclaim-beneficiary": ("reclaim-beneficiary", _reclaim_beneficiary),
}


@contextmanager
def mutated(name: str) -> Iterator[str]:
    """The code broken as ``name`` says for the block; yields the invariant that must catch it."""
    expected, build = MUTATIONS[name]
    patch: Patch = []
    build(patch)
    originals = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patch]
    for owner, attribute, replacement in patch:
        setattr(owner, attribute, replacement)
    try:
        yield expected
    finally:
        for owner, attribute, original in reversed(originals):
            setattr(owner, attribute, original)
