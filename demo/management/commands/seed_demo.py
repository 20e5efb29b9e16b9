from __future__ import annotations

import datetime
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from accounting.rolling import usage_hours_roll
from demo.grants import demo_grants_seed
from demo.seed import demo_seed
from demo.usage import demo_usage_seed
from demo.windows import demo_windows_seed


class Command(BaseCommand):
    help = ("Load the demo departments, users, flavors, quotas, cluster, grants, quota windows and a week of "
            "utilisation with its GPU-equivalent-hours (safe to run again).")

    def handle(self, *args: Any, **options: Any) -> None:
        demo_seed()
        demo_grants_seed()  # its own transactions: approvals push once they commit
        demo_windows_seed()  # after the grants: they were admitted against the base quotas
        demo_usage_seed()  # a week of utilisation under the grants (dates them back a week)
        now = timezone.now()  # the week's GPU-equivalent-hours (the clock keeps the last hours rolled)
        usage_hours_roll(start=now - datetime.timedelta(days=8), end=now, now=now)
        self.stdout.write(self.style.SUCCESS("Demo data is in place (users alice, bob, carol, dave, erin, admin)."))
