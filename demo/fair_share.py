"""The demo's fair share: vision holds 2 shares to nlp's 1 among acme's departments, and the
demo's week of grants is counted once into each department's decayed usage, so that ``make run``
opens the fair-share page with a ranking and orders the approvals queue by it."""

from __future__ import annotations

import datetime

from django.contrib.auth.models import User

from allocations.fair_share.services import fair_share_shares_set, fair_share_tick
from kernel.clock import clock_now
from tenants.models import Department

SHARES = {"vision": 2}


def demo_fair_share_seed(*, now: datetime.datetime | None = None) -> None:
    """Safe to run again: the shares are set once (setting them again records nothing) and a tick
    only adds what was held since the last one."""
    admin = User.objects.get(username="admin")
    for department in Department.objects.filter(slug__in=SHARES):
        fair_share_shares_set(actor=admin, department_id=department.pk, shares=SHARES[department.slug])
    fair_share_tick(now=now or clock_now())
