from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from demo.grants import demo_grants_seed
from demo.seed import demo_seed


class Command(BaseCommand):
    help = "Load the demo departments, users, flavors, quotas, cluster and grants (safe to run again)."

    def handle(self, *args: Any, **options: Any) -> None:
        demo_seed()
        demo_grants_seed()  # its own transactions: approvals push once they commit
        self.stdout.write(self.style.SUCCESS("Demo data is in place (users alice, bob, carol, dave, erin, admin)."))
