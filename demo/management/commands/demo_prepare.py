from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


class Command(BaseCommand):
    # The system checks run before handle() (as for any command), so the server may skip them.
    help = ("What `make run` does before serving, in one process: apply the migrations not yet applied (after the "
            "system checks) and load the demo data (seed_demo). Both do nothing the second time.")

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = int(options["verbosity"])
        started = time.monotonic()
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            self.stdout.write(f"Applying {len(pending)} migrations (the first run takes a minute)")
        call_command("migrate", interactive=False, verbosity=verbosity if pending else 0)
        call_command("seed_demo", verbosity=verbosity)
        self.stdout.write(f"Database ready in {time.monotonic() - started:.1f} s")
