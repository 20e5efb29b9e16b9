"""Periodic defragmentation (``GPUPORTAL_DEFRAG_EVERY``, off by default): each active cluster's
defragmentation plan (``allocations.booking.defrag``), kept to a move budget, applied through
``defrag_apply`` or, in dry-run, only reported; audited as ``placement.defrag_run``.

Only units no workload can be using move (``movable_allocation_ids``: allocations still
``approved`` or whose start lies ahead), as with ``manage.py placement_defrag``.

The budget (``GPUPORTAL_DEFRAG_MOVE_BUDGET``, units per cluster per run) cannot be kept by cutting
a plan short: a plan re-places all movable units together, so a unit's new place may be one that
another unit of the same plan leaves. A budgeted plan therefore re-plans over fewer allocations:
the full plan when it keeps to the budget, else the plan over the longest prefix (oldest first) of
the movable allocations that does, found by bisection (a few whole re-plans). Every such plan is
a complete plan of its own, so what it moves is safe to apply; what it leaves is for the next run.
``defrag_apply`` runs the budgeted planner under its locks, so the budget holds whatever changed
since the plan was first read.

A run that moves nothing (or, in dry-run, would move nothing) writes no audit event: every
cluster would otherwise add one event per run. The task's result lists every cluster.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from allocations.booking.defrag import DefragPlan, defrag_apply, defrag_plan, movable_allocation_ids
from audit import actions
from audit.services import audit_record
from clusters.models import Cluster
from kernel.clock import clock_now
from kernel.conf import setting_bool, setting_int

log = logging.getLogger(__name__)


def defrag_move_budget() -> int:
    return max(setting_int("GPUPORTAL_DEFRAG_MOVE_BUDGET"), 0)


def defrag_dry_run() -> bool:
    return setting_bool("GPUPORTAL_DEFRAG_DRY_RUN")


class BudgetedPlanner:
    """A ``planner`` for ``defrag_apply`` (same keywords as ``defrag_plan``) that keeps to
    ``budget`` moves; ``wanted`` is what the unbudgeted plan of its last call would have moved."""

    def __init__(self, *, budget: int) -> None:
        self.budget = budget
        self.wanted = 0

    def __call__(
        self, *, cluster: Cluster, now: datetime.datetime | None = None, movable_ids: list[int] | None = None
    ) -> DefragPlan:
        moment = now or clock_now()
        ids = sorted(movable_allocation_ids(cluster=cluster, now=moment) if movable_ids is None else movable_ids)
        full = defrag_plan(cluster=cluster, now=moment, movable_ids=ids)
        self.wanted = len(full.moves)
        if len(full.moves) <= self.budget:
            return full
        # Invariant: the plan over ids[:keep] keeps to the budget (ids[:0] moves nothing); the plan
        # over ids[:over] does not.
        keep, over, best = 0, len(ids), defrag_plan(cluster=cluster, now=moment, movable_ids=[])
        while over - keep > 1:
            middle = (keep + over) // 2
            plan = defrag_plan(cluster=cluster, now=moment, movable_ids=ids[:middle])
            if len(plan.moves) <= self.budget:
                keep, best = middle, plan
            else:
                over = middle
        # Say what the cluster holds as a whole, not only the prefix re-planned.
        best.movable_units, best.movable_allocations = full.movable_units, full.movable_allocations
        return best


@dataclass(frozen=True)
class DefragRun:
    """What one periodic run did on one cluster."""

    cluster: str
    dry_run: bool
    budget: int
    wanted: int  # moves the unbudgeted plan would make
    plan: DefragPlan

    def summary(self) -> dict[str, Any]:
        moves = [move.as_dict() for move in self.plan.moves]
        return {
            "cluster": self.cluster,
            "dry_run": self.dry_run,
            "move_budget": self.budget,
            "movable_units": self.plan.movable_units,
            "movable_allocations": self.plan.movable_allocations,
            "fragmentation_before": self.plan.before.as_dict(),
            "fragmentation_after": self.plan.after.as_dict(),
            "policy": self.plan.policy,
            "moves_wanted": self.wanted,
            ("moves_proposed" if self.dry_run else "moves_applied"): moves,
        }


def _run_one(*, cluster: Cluster, now: datetime.datetime, budget: int, dry_run: bool) -> DefragRun:
    planner = BudgetedPlanner(budget=budget)
    with transaction.atomic():
        if dry_run:
            plan = planner(cluster=cluster, now=now)
        else:
            plan = defrag_apply(cluster_id=cluster.pk, now=now, planner=planner)
        run = DefragRun(cluster=cluster.name, dry_run=dry_run, budget=budget, wanted=planner.wanted, plan=plan)
        if plan.moves:
            audit_record(
                actor=None, action=actions.PLACEMENT_DEFRAG_RUN, target=cluster,
                before={"fragmentation": plan.before.as_dict()},
                after={"fragmentation": (plan.before if dry_run else plan.after).as_dict()},
                details=run.summary(),
            )
    return run


def defrag_scheduled_run(
    *, now: datetime.datetime | None = None, budget: int | None = None, dry_run: bool | None = None
) -> list[DefragRun]:
    """One periodic pass over the active clusters, each in its own transaction (a cluster that
    fails is logged and the others still run). ``budget`` and ``dry_run`` default to the settings."""
    moment = now or clock_now()
    budget = defrag_move_budget() if budget is None else budget
    dry_run = defrag_dry_run() if dry_run is None else dry_run
    runs = []
    for cluster in Cluster.objects.filter(is_active=True).order_by("pk"):
        try:
            runs.append(_run_one(cluster=cluster, now=moment, budget=budget, dry_run=dry_run))
        except Exception:  # the other clusters still run; the next pass tries this one again
            log.exception("periodic defragmentation of cluster %s failed", cluster.name)
    return runs
