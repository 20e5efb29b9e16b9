"""``manage.py twin_export --days 30 --out DIR``: the portal's own history, inventory and policy
in the twin's file formats (docs/twin.md, "Sources"): ``workload.jsonl``, ``cluster.csv`` and
``policy.yaml``, which ``twin.workload.workload_load``, ``twin.clusters.nodes_load`` and
``twin.policy.policy_load`` read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.clock import clock_now
from twin.clusters import nodes_write
from twin.policy import policy_write
from twin.workload import jobs_write
from whatifs.models import HISTORY_DAYS_MAX
from whatifs.sources import history_workload, inventory_nodes, live_policy


class Command(BaseCommand):
    help = "Write the portal's history (the last --days), inventory and policy as the twin's files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=30, help="The history's window, in days before now.")
        parser.add_argument("--out", required=True, help="The folder to write into (made if missing).")
        parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="The workload's format.")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if not 1 <= days <= HISTORY_DAYS_MAX:
            raise CommandError(f"--days: must be from 1 to {HISTORY_DAYS_MAX}")
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        jobs = history_workload(days=days, now=clock_now())
        nodes = inventory_nodes()
        fmt = options["format"]
        (out / f"workload.{fmt}").write_text(jobs_write(jobs, fmt=fmt))
        (out / "cluster.csv").write_text(nodes_write(nodes) if nodes else "sn,cpu_milli,memory_mib,gpu,model\n")
        (out / "policy.yaml").write_text(policy_write(live_policy()))
        self.stdout.write(f"{len(jobs)} requests of the last {days} days, {len(nodes)} nodes and the policy written to {out}")
