"""The demo's idle policies, and one evaluation of them over the demo week's readings: the notebook
grant that has sat idle for hours (``demo.usage``) is warned, so that ``make run`` shows an idle
case that its owner (alice) or nlp's admin (bob) can keep or release at ``/idle/``.

The default policy reclaims a grant idle (below 5 % activity) for 2 hours of known readings, one
hour of known idle readings after the warning; vision's grants are only warned (its inference
services idle between requests by design), after 4 hours. Without new readings (the embedded
default has no exporter) the warned case waits: unknown data never leads to an action.
"""

from __future__ import annotations

import datetime
from typing import Any

from accounting.idle.evaluation import idle_cases_evaluate
from accounting.idle_models import IdleAction, IdlePolicy
from kernel.clock import clock_now
from tenants.models import Department

POLICIES: list[dict[str, Any]] = [
    {"name": "default", "description": "Idle grants are warned after 2 hours and reclaimed an idle hour later.",
     "department": None, "threshold": 0.05, "window_minutes": 120, "grace_minutes": 60, "action": IdleAction.RECLAIM,
     "max_keeps": 2, "keep_hours": 24},
    {"name": "vision-inference", "description": "Vision's inference services idle between requests: warn only.",
     "department": "vision", "threshold": 0.05, "window_minutes": 240, "grace_minutes": 60,
     "action": IdleAction.NOTIFY, "max_keeps": 3, "keep_hours": 24},
]  # fmt: skip


def demo_idle_seed(*, now: datetime.datetime | None = None) -> None:
    """Create the policies (once) and evaluate the grants against them."""
    for spec in POLICIES:
        values = dict(spec)
        slug = values.pop("department")
        values["department"] = Department.objects.get(slug=slug) if slug else None
        IdlePolicy.objects.get_or_create(name=values.pop("name"), defaults=values)
    idle_cases_evaluate(now=now or clock_now())
