from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.booking.defrag import DefragPlan, defrag_apply, defrag_plan
from clusters.models import Cluster
from kernel.words import counted


def describe(plan: DefragPlan, *, applied: bool) -> list[str]:
    lines = [
        f"cluster {plan.cluster.name}: {counted(plan.movable_units, 'movable unit')} of "
        f"{counted(plan.movable_allocations, 'allocation')} not started yet",
        f"  fragmentation before: {plan.before.describe()}",
    ]
    if plan.moves:
        lines.append(f"  fragmentation after:  {plan.after.describe()}")
        lines.append(f"  {len(plan.moves)} moves (placed with policy {plan.policy}):")
        lines += [f"    #{m.allocation_id} unit {m.unit} {m.flavor}: {m.source} -> {m.target}" for m in plan.moves]
        lines.append("  applied: reservations moved, audited, node configuration queued" if applied
                     else "  dry run: nothing changed (run without --dry-run to apply)")
    elif plan.movable_units:
        lines.append("  no better layout found: nothing to move")
    for entry in plan.unplaced:
        lines.append(f"  unplaced (granted before GPU placement): {entry}")
    return lines


class Command(BaseCommand):
    help = (
        "Propose moving the GPU reservations of allocations that have not started, to leave fewer GPUs partly "
        "used; without --dry-run, apply the moves (audited)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", nargs="?", help="cluster name (default: every active cluster)")
        parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
        parser.add_argument("--json", action="store_true", help="print the plans as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.filter(is_active=True).order_by("pk")
        if options["cluster"]:
            clusters = Cluster.objects.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(f"no cluster named {options['cluster']!r}")
        plans = []
        for cluster in clusters:
            if options["dry_run"]:
                plans.append(defrag_plan(cluster=cluster))
            else:
                plans.append(defrag_apply(cluster_id=cluster.pk))
        if options["json"]:
            self.stdout.write(json.dumps([plan.as_dict() for plan in plans], indent=2))
            return
        for plan in plans:
            for line in describe(plan, applied=not options["dry_run"]):
                self.stdout.write(line)
