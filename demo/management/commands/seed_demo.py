from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.core.management.base import BaseCommand

from allocations.models import Allocation
from demo.accounting import demo_accounting_seed
from demo.custody import demo_custody_seed
from demo.fair_share import demo_fair_share_seed
from demo.grants import demo_grants_seed
from demo.idle import demo_idle_seed
from demo.play import demo_past_start
from demo.seed import demo_seed
from demo.usage import demo_usage_continue, demo_usage_seed
from demo.windows import demo_windows_seed
from kernel.clock import clock_at, clock_now


class Command(BaseCommand):
    help = ("Load the demo departments, users, flavors, quotas, cluster, grants, quota windows and a week of "
            "utilisation with its GPU-equivalent-hours, rate cards, statements and idle cases (safe to run again).")

    def handle(self, *args: Any, **options: Any) -> None:
        now = clock_now()
        # A first seeding plays the demo's past (demo.play): the organisation comes before its oldest
        # story, so that the stories' audit events can carry the moments they stand for.
        with clock_at(demo_past_start(now)) if not Allocation.objects.exists() else nullcontext():
            demo_seed()
        demo_grants_seed(now=now)  # its own transactions: approvals push once they commit
        demo_windows_seed()  # after the grants: they were admitted against the base quotas
        demo_usage_seed(now=now)  # a week of utilisation under the grants, which began when their readings do
        demo_usage_continue()  # a later run: the readings since the last one, so that "now" has a value
        demo_accounting_seed()  # rate cards, the week's GPU-equivalent-hours, last month's statements
        demo_idle_seed()  # idle policies, and the notebook that sat idle warned
        demo_fair_share_seed()  # after the week's readings: its grants count in the decayed usage
        demo_custody_seed(now=now)  # two days of which pod held which GPU, with a gap or two and one alarm
        self.stdout.write(self.style.SUCCESS("Demo data is in place (users alice, bob, carol, dave, erin, admin, frank)."))
