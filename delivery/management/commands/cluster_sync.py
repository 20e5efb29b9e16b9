from __future__ import annotations

from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.models import Cluster
from delivery.drivers import Change, DriverError, Plan
from delivery.drivers.diff import value_at
from delivery.services import cluster_plan, cluster_sync


def describe(change: Change) -> list[str]:
    """One line per change, then the wanted value of each differing field."""
    mark = {"create": "+", "update": "~", "delete": "-"}[change.action]
    lines = [f"{mark} {change.ref}" + (f"  ({change.scope})" if change.scope else "")]
    if change.action == "update" and change.desired is not None:
        for field in change.fields:
            path = tuple(field.split("."))
            wanted = value_at(change.desired, _split(change.desired, field) or path)
            live = value_at(change.live, _split(change.live or {}, field) or path)
            lines.append(f"    {field}: {_short(live)} -> {_short(wanted)}")
    return lines


def _split(document: dict[str, Any], dotted: str) -> tuple[str, ...] | None:
    """A dotted path back into keys, where keys themselves hold dots (label and resource names)."""
    if not dotted:
        return ()
    if not isinstance(document, dict):
        return None
    for key in sorted(document, key=len, reverse=True):
        if dotted == key:
            return (key,)
        if dotted.startswith(key + "."):
            rest = _split(document[key], dotted[len(key) + 1:])
            if rest is not None:
                return (key, *rest)
    return None


def _short(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip() if value is not None else "(absent)"
    return text if len(text) <= 120 else text[:117] + "..."


class Command(BaseCommand):
    help = "Bring a cluster to the desired state; with --dry-run, print the diff it would apply."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", nargs="?", help="cluster name (default: every active cluster)")
        parser.add_argument("--dry-run", action="store_true", help="print the changes, apply nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.filter(is_active=True)
        if options["cluster"]:
            clusters = Cluster.objects.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(f"no cluster named {options['cluster']!r}")
        failed = False
        for cluster in clusters.order_by("name"):
            try:
                if options["dry_run"]:
                    plan = cluster_plan(cluster_id=cluster.pk)
                    self._print(cluster, plan, verb="would change")
                else:
                    plan, result = cluster_sync(cluster_id=cluster.pk)
                    self._print(cluster, plan, verb="changed")
            except DriverError as error:
                self.stderr.write(f"{cluster.name}: {error}")
                failed = True
        if failed:
            raise CommandError("some clusters could not be synced")

    def _print(self, cluster: Cluster, plan: Plan, *, verb: str) -> None:
        for change in plan.changes:
            for line in describe(change):
                self.stdout.write(f"{cluster.name}: {line}")
        self.stdout.write(f"{cluster.name}: {verb} {len(plan.changes)} object(s), {plan.unchanged} unchanged")
