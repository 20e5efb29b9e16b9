from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from demo.accounting import demo_accounting_seed
from demo.fair_share import demo_fair_share_seed
from demo.grants import demo_grants_seed
from demo.idle import demo_idle_seed
from demo.seed import demo_seed
from demo.usage import demo_usage_continue, demo_usage_seed
from demo.windows import demo_windows_seed


class Command(BaseCommand):
    help = ("Load the demo departments, users, flavors, quotas, cluster, grants, quota windows and a week of "
            "utilisation with its GPU-equivalent-hours, rate cards, statements and idle cases (safe to run again).")

    def handle(self, *args: Any, **options: Any) -> None:
        demo_seed()
        demo_grants_seed()  # its own transactions: approvals push once they commit
        demo_windows_seed()  # after the grants: they were admitted against the base quotas
        demo_usage_seed()  # a week of utilisation under the grants (dates them back a week)
        demo_usage_continue()  # a later run: the readings since the last one, so that "now" has a value
        demo_accounting_seed()  # rate cards, the week's GPU-equivalent-hours, last month's statements
        demo_idle_seed()  # idle policies, and the notebook that sat idle warned
        demo_fair_share_seed()  # after the week was dated back: its grants count in the decayed usage
        self.stdout.write(self.style.SUCCESS("Demo data is in place (users alice, bob, carol, dave, erin, admin, frank)."))
